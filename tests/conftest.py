"""Shared fixtures: a small real conv task (fast to build and measure) and the host target."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def small_conv_onnx(path: str | None = None, *, cin: int = 16, cout: int = 32, hw: int = 28) -> onnx.ModelProto:
    """Conv 3x3 + Relu + MaxPool: two tasks, the conv one ~7 MFLOP (a ~0.1-1 ms kernel)."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype("float32"), "W")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
        ],
        "small_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, hw // 2, hw // 2])],
        [weight],
    )
    return _model(graph, path)


def _model(graph, path: str | None) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if path:
        onnx.save(model, path)
    return model


def wide_conv_onnx(path: str | None = None, *, channels: int = 128, hw: int = 16) -> onnx.ModelProto:
    """Conv 3x3 (128 -> 128 at 16 x 16, 75 MFLOP) + Relu: wide enough that ``--winograd auto`` converts it."""
    rng = np.random.default_rng(1)
    weight = numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype("float32"), "W")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "wide_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, hw, hw])],
        [weight],
    )
    return _model(graph, path)


@pytest.fixture(scope="session", autouse=True)
def _own_feature_cache(tmp_path_factory):
    """The suite's own feature cache (every ``run`` a test starts inherits it): tests must neither read the
    user's cache (a stale entry would hide a bug) nor fill it."""
    from cost_models.feature_store import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("feature-cache"))
    yield
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="session")
def target():
    from autosearch.target import parse_target

    return parse_target(None)


@pytest.fixture(scope="session")
def small_model(tmp_path_factory, target):
    from autosearch.importer import import_model

    path = str(tmp_path_factory.mktemp("models") / "small_conv.onnx")
    small_conv_onnx(path)
    return import_model(path, target)


@pytest.fixture(scope="session")
def conv_task(small_model):
    return next(t for t in small_model.tasks if "conv" in t.name)


@pytest.fixture(scope="session")
def conv_space(conv_task):
    from autosearch.space import DecisionSpace

    return DecisionSpace(conv_task.mod, conv_task.target)


def tune_and_export(work, make_onnx, *, trials: int, batch: int, options: tuple[str, ...] = ()) -> dict:
    """A short real ``run --strategy random [options]`` on a model written by ``make_onnx(path)``, then
    ``export``."""
    model = str(work / "model.onnx")
    make_onnx(model)
    log = str(work / "run.jsonl")
    pinned = () if "--layout" in options else ("--layout", "NCHW")  # one layout unless the test is about layouts
    if "--finalist-rounds" not in options:  # one re-timing round: the rounds are test_finalists' subject
        pinned += ("--finalist-rounds", "1")
    proc = run_cli("run", "--strategy", "random", "--model", model, "--trials", str(trials), "--batch", str(batch),
                   "--log", log, *pinned, *options)
    assert proc.returncode == 0, proc.stderr[-2000:]
    db = str(work / "db")
    proc = run_cli("export", "--log", log, "--out", db)
    assert proc.returncode == 0, proc.stderr
    return {"model": model, "log": log, "db": db, "work": work}


def run_cli(*args: str, timeout: float = 600, cwd: str | None = None, env: dict | None = None):
    """Run ``python -m autosearch ...`` as a user would; returns CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "autosearch", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env={**os.environ, **(env or {})})
