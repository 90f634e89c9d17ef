"""The Python API's contract without tuning anything: ``import autosearch`` is cheap, its names resolve, and bad
values raise ``UserError`` with the CLI's one-line message before any work (nothing written). The API's end-to-end
runs are tests/test_api_end_to_end.py."""

from __future__ import annotations

import os

import pytest

import autosearch
from autosearch.errors import UserError
from tests.conftest import run_python


def test_import_autosearch_imports_neither_tvm_nor_the_api_until_a_name_is_used():
    code = ("import sys, autosearch\n"
            "assert 'tvm' not in sys.modules and 'autosearch.api' not in sys.modules, sorted(sys.modules)\n"
            "assert callable(autosearch.tune) and 'autosearch.api' in sys.modules and 'tvm' not in sys.modules\n"
            # the sub-packages and their modules do not shadow the functions
            "import autosearch.deploy.database, autosearch.deploy.report, autosearch.search\n"
            "assert autosearch.export.__module__ == autosearch.report.__module__ == 'autosearch.api'\n")
    run_python(code, timeout=120)


def test_the_public_names_resolve_and_unknown_ones_raise_attribute_error():
    for name in autosearch.__all__:
        assert getattr(autosearch, name) is not None
    assert autosearch.UserError is UserError
    with pytest.raises(AttributeError, match="no attribute 'tunez'"):
        autosearch.tunez  # noqa: B018


@pytest.mark.parametrize("kwargs, message", [
    ({"strategy": "hillclimb"}, "unknown strategy 'hillclimb'; valid strategies: annealing, coordinate_descent"),
    ({"trials": 0}, "--trials must be a positive number, not 0"),
    ({"minutes": float("nan")}, "--minutes must be a positive number, not nan"),
    ({"batch": -1}, "--batch must be a positive number, not -1"),
    ({"finalist_rounds": -1}, "--finalist-rounds must be 0 or more"),
    ({"resume": True}, "--resume needs --log PATH"),
    ({"runner": "gpu"}, "unknown runner 'gpu'; valid runners: "),
    ({"runner": "local", "runner_options": {"nosuch": 1}}, "runner 'local' has no option 'nosuch'; its options: none"),
    ({"strategy": "random", "options": {"nosuch": 1}}, "strategy 'random' has no option 'nosuch'"),
])
def test_tune_refuses_bad_values_before_any_work(tmp_path, kwargs, message):
    log = None if kwargs.get("resume") else str(tmp_path / "run.jsonl")
    with pytest.raises(UserError) as exc:
        autosearch.tune("tiny-yolov2", **{"strategy": "random", "trials": 4, "log": log, **kwargs})
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert not os.listdir(tmp_path)  # no log started


def test_export_and_report_refuse_bad_values_before_reading_anything(tmp_path):
    missing = str(tmp_path / "no-such.jsonl")
    with pytest.raises(UserError, match="--top-k must be positive, not 0"):
        autosearch.export(missing, str(tmp_path / "db"), top_k=0)
    with pytest.raises(UserError, match="--memory-budget needs --model"):
        autosearch.export(missing, str(tmp_path / "db"), memory_budget=64)
    with pytest.raises(UserError, match="log not found"):
        autosearch.export(missing, str(tmp_path / "db"))
    with pytest.raises(UserError, match="--runs must be positive, not 0"):
        autosearch.report("tiny-yolov2", str(tmp_path / "db"), runs=0)
    with pytest.raises(UserError, match="--models: give at least one cost model"):
        autosearch.compare_models([missing], models=[" "])
    with pytest.raises(UserError, match="needs --log .* or --measure"):
        autosearch.train_model(str(tmp_path / "model"))
    assert not os.listdir(tmp_path)


def test_select_tasks_takes_a_spec_string_or_a_sequence():
    from types import SimpleNamespace

    from autosearch.api import select_tasks

    tasks = [SimpleNamespace(name=name, workload_key=str(i)) for i, name in enumerate(["conv_a", "pool", "conv_b"])]
    assert [t.name for t in select_tasks(tasks, None)] == ["conv_a", "pool", "conv_b"]
    assert [t.name for t in select_tasks(tasks, "conv")] == ["conv_a", "conv_b"]
    assert [t.name for t in select_tasks(tasks, [1, "conv_b"])] == ["pool", "conv_b"]
    assert [t.name for t in select_tasks(tasks, "0-1,0")] == ["conv_a", "pool"]  # each task once
    with pytest.raises(UserError, match="no task 3; the model has tasks 0..2"):
        select_tasks(tasks, [3])


def test_tune_without_trials_or_minutes_plans_the_quick_starts_budget_whichever_comes_first(tmp_path):
    """Neither given: 400 trials or 10 minutes of search, the plan announced before any work (the event's
    handler stops the run there)."""
    from autosearch.api import DEFAULT_MINUTES, DEFAULT_TRIALS, TunePlanned

    class Stop(Exception):
        pass

    def stop(event):
        raise Stop(event)

    with pytest.raises(Stop) as exc:
        autosearch.tune("tiny-yolov2", strategy="random", log=str(tmp_path / "run.jsonl"), on_event=stop)
    planned = exc.value.args[0]
    assert isinstance(planned, TunePlanned) and (DEFAULT_TRIALS, DEFAULT_MINUTES) == (400, 10)
    assert (planned.trials, planned.minutes) == (DEFAULT_TRIALS, DEFAULT_MINUTES)
    assert not os.listdir(tmp_path)
