"""autosearch: autotuning deep-learning kernels on Apache TVM.

The Python API (:mod:`autosearch.api`), what the CLI's commands do::

    import autosearch

    run = autosearch.tune("tiny-yolov2", strategy="optuna", trials=64, log="runs/tiny.jsonl")
    autosearch.export(run.log, "tiny-db")
    autosearch.compile("tiny-yolov2", "tiny-db", "tiny.so")
    model = autosearch.load_model("tiny.so", threads=2)  # model(tvm.runtime.tensor(x)) runs a forward pass
    print(autosearch.report("tiny-yolov2", "tiny-db", log=run.log).median_ms)

The names are imported on first use, so ``import autosearch`` imports neither TVM nor the API's module.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it (imported when the name is first used)
_API = {
    "load_tasks": "autosearch.api", "tune": "autosearch.api", "export": "autosearch.api",
    "compile": "autosearch.api", "report": "autosearch.api", "profile": "autosearch.api",
    "compare_models": "autosearch.api",
    "train_model": "autosearch.api", "MeasureOptions": "autosearch.api", "TaskResult": "autosearch.api",
    "TunePlanned": "autosearch.api", "TuneResult": "autosearch.api", "TuneStarted": "autosearch.api",
    "load_model": "autosearch.deploy.artifact", "UserError": "autosearch.errors",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'autosearch' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value  # once: later look-ups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
