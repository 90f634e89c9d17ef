"""A worker process starts lean: TVM without PyTorch (which tvm_ffi would import when it is installed)."""

from __future__ import annotations

import pytest


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as fh:
        return fh.read()


def test_a_worker_builds_and_runs_without_loading_torch(conv_task, conv_space):
    pytest.importorskip("torch")  # without torch installed there is nothing to keep out
    import tvm

    from autosearch.measure.worker import STARTUP_TIMEOUT, Worker
    from autosearch.target import target_to_json

    w = Worker(name="lean")
    try:
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        key, target = conv_task.workload_key, target_to_json(conv_task.target)
        naive, tuned = (w.call("build", tvm.ir.save_json(mod), target, timeout=120)
                        for mod in (conv_task.mod, conv_space.apply(conv_space.default(0)).mod))
        assert naive.kind == tuned.kind == "ok", (naive.error, tuned.error)
        reference = w.call("reference", key, naive.value[0], conv_task.args, 0, {"repeat": 1}, timeout=60)
        ran = w.call("run", key, tuned.value[0], conv_task.args, 0, {"repeat": 1}, timeout=60)
        assert reference.kind == ran.kind == "ok", (reference.error, ran.error)
        assert "wrong_result" not in ran.value and len(ran.value["latencies"]) == 1
        maps = _maps(w._proc.pid)
        assert "libtvm" in maps and "libtorch" not in maps
    finally:
        w.close()
