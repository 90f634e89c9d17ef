"""Processes start lean: TVM without PyTorch (which tvm_ffi would import when it is installed)."""

from __future__ import annotations

import pytest

from tests.conftest import run_conv_in, run_python, small_conv_onnx


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as fh:
        return fh.read()


def test_a_worker_builds_and_runs_without_loading_torch(conv_task, conv_space):
    pytest.importorskip("torch")  # without torch installed there is nothing to keep out
    from autosearch.measure.worker import STARTUP_TIMEOUT, Worker

    w = Worker(name="lean")
    try:
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        assert len(run_conv_in(w, conv_task, conv_space)["latencies"]) == 1
        maps = _maps(w._proc.pid)
        assert "libtvm" in maps and "libtorch" not in maps
    finally:
        w.close()


def test_the_cli_imports_tvm_without_torch_and_a_learned_model_still_loads_it(tmp_path):
    """The CLI's process (a fresh one: this one has imported TVM already) imports TVM with torch hidden; a
    learned cost model imports torch afterwards, and it works."""
    pytest.importorskip("torch")
    model = str(tmp_path / "small.onnx")
    small_conv_onnx(model)
    code = ("import sys\n"
            "from autosearch.cli import main\n"
            f"assert main(['tasks', '--model', {model!r}]) == 0\n"
            "import tvm\n"
            "print('after tasks:', 'torch' in sys.modules, type(tvm.__loader__).__name__)\n"
            "from autosearch.search.cost_model import make_cost_model\n"
            "make_cost_model('mlp', seed=0)\n"
            "import torch\n"
            "print('after mlp:', float(torch.ones(3).sum()))\n")
    out = run_python(code)
    assert "after tasks: False SourceFileLoader" in out and "after mlp: 3.0" in out, out


def test_reports_timing_processes_import_tvm_without_torch(tmp_path):
    """``report`` times TVM in a fresh process per round: each imports TVM without torch, as the CLI does."""
    pytest.importorskip("torch")
    import numpy as np

    inputs = str(tmp_path / "inputs.npz")
    np.savez(inputs, x=np.zeros((1, 3, 8, 8), "float32"))
    code = ("import sys\n"
            "from autosearch.deploy.bench import main\n"
            f"assert main(['tvm', '--baseline', '--inputs', {inputs!r}]) == 0\n"
            "print('torch loaded:', 'torch' in sys.modules, 'tvm loaded:', 'tvm' in sys.modules)\n")
    out = run_python(code)
    assert "torch loaded: False tvm loaded: True" in out, out
