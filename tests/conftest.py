"""Shared fixtures: a small real conv task (fast to build and measure) and the host target."""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosearch.tvm_compat import lighten_tvm_import

lighten_tvm_import()  # TVM imported as the CLI imports it; torch still loads when a test's model needs it

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The fast tier, ``pytest -m "not slow"`` (the inner loop, a few minutes on 2 cores): the modules whose tests tune,
# build and time whole models, run the CLI in fresh processes, start Ray clusters or fork servers or train models
# are "slow".
# README's test command (and CI) runs every test.
SLOW_MODULES = frozenset({
    "tests/cost_models/test_asm_features.py", "tests/cost_models/test_cost_model_contract.py",
    "tests/cost_models/test_evaluate.py", "tests/cost_models/test_guidance.py", "tests/cost_models/test_pretrained.py",
    "tests/experiments/test_concat_sketch.py",
    "tests/measure/test_forkserver.py", "tests/measure/test_ray_pool.py",
    "tests/measure/test_runner_contract.py", "tests/search/test_siblings.py",
    "tests/test_api_end_to_end.py",
    "tests/test_export.py",
    "tests/test_dpbf16.py", "tests/test_fast_math.py", "tests/test_faults_in_a_run.py", "tests/test_finalists.py",
    "tests/test_layout.py", "tests/test_measure.py", "tests/test_memory.py", "tests/test_memory_budget.py",
    "tests/test_reliability.py", "tests/test_report.py", "tests/test_run.py", "tests/test_tasks.py",
    "tests/test_tensor_units.py", "tests/test_train_measure.py", "tests/test_winograd.py",
})


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        module = item.nodeid.split("::")[0]
        if module in SLOW_MODULES or module.startswith("tests/experiments/"):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config) -> None:
    """The suite runs on two workers (pytest-xdist, ``-n 2`` in pyproject's addopts), each held to a core of its own:
    a kernel timed on two threads while the other worker builds on one of its cores waits for that core at every
    barrier, so tuned schedules lost to the single-threaded loop nest they must beat (docs/usage.md). On
    its own core a worker's kernels run on one thread (``host_cores``), timed as alone. Without workers, or with
    fewer cores than workers, nothing is pinned."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if worker.startswith("gw") and 1 < count <= len(cores):
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})
    if cores:
        config.stash[START_CORES] = os.sched_getaffinity(0)


START_CORES = pytest.StashKey[set]()  # the cores every test starts on: the worker's one, or the run's


@pytest.fixture(autouse=True)
def on_its_core(request) -> None:
    """Every test of a pinned worker starts on the worker's core (without workers, on the cores the run began with),
    whatever an earlier test in the process left the main thread's affinity at: a CI run logged a worker moved off
    its core by ``test_artifact.py``'s loader tests (TVM's thread pool in its default mode bound the loading thread
    to the machine's first cores; ``load_model`` now binds it to the process's own, and holds it to the first of
    them where the pool has more threads), and with the modules reaching the workers in another order, thread-pool
    and timing tests failed on such a worker. Which tests a worker runs before a test is not the test's to know."""
    cores = request.config.stash.get(START_CORES, None)
    if cores and os.sched_getaffinity(0) != cores:
        os.sched_setaffinity(0, cores)


def processes_left(matches, wait: float = 10) -> list[int]:
    """The pids of this machine's live processes for which ``matches(pid)`` holds (``pid`` as /proc names it),
    polled until there are none or ``wait`` seconds have passed: what a test expects gone may take a moment (a
    worker that was building when its caller ended finds its pipe closed once the build returns)."""
    import time

    end = time.monotonic() + wait
    while True:
        left = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and matches(pid)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


def example_plug_in(distribution: str):
    """The installed distribution of the example plug-in package ``examples/<distribution>``; without it, the test
    skips and says how to install it (CI installs both examples, so the contract suites run them too)."""
    from importlib import metadata

    try:
        return metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        pytest.skip(f"the example plug-in package {distribution} is not installed, so the contract suite runs "
                    f"without it: pip install -e examples/{distribution} (CI installs it)")


def parallel_kernel_mod():
    """``b = 2 * a`` over 256 x 1024 floats, its rows a parallel loop: a kernel that starts TVM's thread pool (which
    binds its threads at the first parallel loop it runs)."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule

    a = te.placeholder((256, 1024), name="a")
    b = te.compute((256, 1024), lambda i, j: a[i, j] * 2.0, name="b")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    sch.parallel(sch.get_loops(sch.get_sblock("b"))[0])
    return sch.mod


def small_conv_onnx(path: str | None = None, *, cin: int = 16, cout: int = 32, hw: int = 28,
                    kernel: int = 3, stride: int = 1, bias: bool = False) -> onnx.ModelProto:
    """Conv 3x3 (or ``kernel`` x ``kernel``, same padding, ``stride``; with a bias if ``bias``) + Relu + MaxPool: two
    tasks, the conv one ~7 MFLOP (a ~0.1-1 ms kernel)."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((cout, cin, kernel, kernel)) * 0.1).astype("float32"), "W")
    constants = [weight]
    if bias:
        constants.append(numpy_helper.from_array(rng.standard_normal(cout).astype("float32"), "B"))
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W"] + (["B"] if bias else []), ["c"], pads=[kernel // 2] * 4,
                             strides=[stride, stride]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
        ],
        "small_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, hw // 2 // stride, hw // 2 // stride])],
        constants,
    )
    return _model(graph, path)


def _model(graph, path: str | None) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if path:
        onnx.save(model, path)
    return model


def channel_concat_onnx(path: str | None = None) -> onnx.ModelProto:
    """Three NHWC maps concatenated on their last axis (channels), then a Relu: one fused task whose concatenation
    is an intermediate block."""
    graph = helper.make_graph(
        [helper.make_node("Concat", ["a", "b", "c"], ["cat"], axis=3), helper.make_node("Relu", ["cat"], ["y"])],
        "channel_concat",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 12, 12, channels])
         for name, channels in (("a", 8), ("b", 16), ("c", 8))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 12, 32])],
    )
    return _model(graph, path)


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


def two_wide_convs_onnx(path: str | None = None) -> onnx.ModelProto:
    """Conv 3x3 64 -> 64 then 64 -> 96 at 16 x 16 (+ ReLU): two layers with different keys, both Winograd
    candidates."""
    rng = np.random.default_rng(3)
    w0 = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype("float32"), "W0")
    w1 = numpy_helper.from_array((rng.standard_normal((96, 64, 3, 3)) * 0.05).astype("float32"), "W1")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W0"], ["c0"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c0"], ["r0"]),
         helper.make_node("Conv", ["r0", "W1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["y"])],
        "two_wide_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 96, 16, 16])], [w0, w1])
    return _model(graph, path)


@pytest.fixture(scope="session", autouse=True)
def _own_feature_cache(tmp_path_factory):
    """The suite's own cache of features and sketches (every ``run`` a test starts inherits it): tests must neither
    read the user's cache (a stale entry would hide a bug) nor fill it."""
    from autosearch.cost_models.feature_store import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("feature-cache"))
    yield
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="session")
def target():
    from autosearch.frontend.target import parse_target

    return parse_target(None)


@pytest.fixture(scope="session")
def small_model(tmp_path_factory, target):
    from autosearch.frontend.importer import import_model

    path = str(tmp_path_factory.mktemp("models") / "small_conv.onnx")
    small_conv_onnx(path)
    return import_model(path, target)


@pytest.fixture(scope="session")
def imported():
    """``imported(name, **options)``: ``import_model(name, host target, **options)``, once per session for each
    name and options (a tiny-yolov2 import takes seconds; tests only read the result)."""
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target

    target = parse_target(None)

    @functools.cache
    def load(name: str, **options):
        return import_model(name, target, **options)

    return load


@pytest.fixture(scope="session")
def tuned_two_wide(tmp_path_factory):
    """A short real run on :func:`two_wide_convs_onnx` (each layer tuned direct and as Winograd: four tasks,
    one trial each, as the scheduler's first pass gives them), exported. Shared by the Winograd and memory
    budget tests; read it, never write into its directory."""
    return tune_and_export(tmp_path_factory.mktemp("two-wide"), two_wide_convs_onnx, trials=4, batch=4,
                           options=("--finalist-rounds", "0"))


@pytest.fixture(scope="session")
def conv_task(small_model):
    return next(t for t in small_model.tasks if "conv" in t.name)


@pytest.fixture(scope="session")
def conv_space(conv_task):
    from autosearch.search.space import DecisionSpace

    return DecisionSpace(conv_task.mod, conv_task.target)


def small_conv_run(work, *, trials: int, measure=None) -> tuple[str, str]:
    """(model, log): a real ``trials``-trial random run of :func:`small_conv_onnx`'s conv task, written to ``work``
    (fp32 NCHW, no finalists, no PNG; ``measure`` default short repeats): a log for a script or a check that reads
    one, not a tuning result."""
    import autosearch

    model = str(work / "small.onnx")
    small_conv_onnx(model)
    result = autosearch.tune(model, strategy="random", tasks="conv", trials=trials, batch=trials, finalist_rounds=0,
                             log=str(work / "run.jsonl"), layout="NCHW", precision="fp32", plot=False,
                             measure=measure or autosearch.MeasureOptions(repeat=3, min_repeat_ms=5))
    return model, result.log


def exported_tasks(contents) -> set[str]:
    """The names of a log's tasks that export writes: a valid record faster than the untuned kernel."""
    from autosearch.deploy.database import exported_records

    return {h["name"] for key, h in contents.tasks.items() if exported_records(contents, key)[0]}


def tune_and_export(work, make_onnx, *, trials: int, batch: int, options: tuple[str, ...] = (),
                    until=None) -> dict:
    """A short real ``run --strategy random [options]`` on a model written by ``make_onnx(path)`` (a process of
    its own, as a user runs it), then ``export`` (in this one).

    ``until(contents)`` is what the tests read of the log beyond the run itself, e.g. a task tuned faster than
    its untuned kernel (which is what export writes): while it is false the run resumes with ``trials`` more, as
    a user would, twice at most. A handful of random configs of a small kernel can all lose to TVM's default
    code on a noisy machine (CI runs saw every trial of a task lose), and those tests are about what export,
    compile and report do with a tuned task, not about that draw."""
    from autosearch.records import read_log

    model = str(work / "model.onnx")
    make_onnx(model)
    log = str(work / "run.jsonl")
    pinned = () if "--layout" in options else ("--layout", "NCHW")  # one layout unless the test is about layouts
    if "--precision" not in options:  # fp32 unless the test is about precision: on a CPU with AMX, auto adds tasks
        pinned += ("--precision", "fp32")
    if "--finalist-rounds" not in options:  # one re-timing round: the rounds are test_finalists' subject
        pinned += ("--finalist-rounds", "1")
    pinned += ("--no-plot",)  # the run's PNG is tests/test_run.py's subject
    for attempt in range(3):
        resume = ("--resume",) if attempt else ()
        proc = run_cli("run", "--strategy", "random", "--model", model, "--trials", str(trials * (attempt + 1)),
                       "--batch", str(batch), "--log", log, *pinned, *options, *resume)
        assert proc.returncode == 0, proc.stderr[-2000:]
        if until is None or until(read_log(log)):
            break
    else:
        raise AssertionError(f"{trials * 3} trials and still not what the test needs of {log}")
    db = str(work / "db")
    from autosearch.cli import main

    assert main(["export", "--log", log, "--out", db]) == 0  # in this process: TVM is imported here already
    return {"model": model, "log": log, "db": db, "work": work}


def run_cli_here(capfd, *args: str) -> subprocess.CompletedProcess:
    """``autosearch.cli.main([...])`` in this process, its output captured at the file descriptors (TVM's C++
    log included): what :func:`run_cli` returns, without a fresh interpreter importing TVM (seconds a call).
    For the commands' behaviour; tests of the process itself (exit code, traceback, signals) use run_cli."""
    from autosearch.cli import main

    capfd.readouterr()  # what came before is not this command's
    sigterm = signal.getsignal(signal.SIGTERM)  # ``run`` installs its own handler
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()  # main's logging.basicConfig then logs to stderr, as in a fresh process
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.signal(signal.SIGTERM, sigterm)
        root.handlers[:] = handlers
        root.setLevel(level)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["autosearch", *args], code, out, err)


def run_cli(*args: str, timeout: float = 600, cwd: str | None = None, env: dict | None = None):
    """Run ``python -m autosearch ...`` as a user would; returns CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "autosearch", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env={**os.environ, **(env or {})})


def run_python(script: str, *, env: dict | None = None, timeout: float = 300) -> str:
    """Run ``python -c script`` in a fresh interpreter from the checkout (``env``: its whole environment, default
    this one's): its standard output, once it has exited 0. For what only a fresh process shows (what an import
    loads, a process's own cores)."""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def run_conv_in(worker, conv_task, conv_space, evaluator: dict | None = None) -> dict:
    """Build the conv task's untuned and default-config kernels in ``worker``, install the first as the reference
    and check and time the second there (one run, or as ``evaluator`` says); the run's reply value."""
    import tvm

    from autosearch.frontend.target import target_to_json

    key, target = conv_task.workload_key, target_to_json(conv_task.target)
    naive, tuned = (worker.call("build", tvm.ir.save_json(mod), target, timeout=120)
                    for mod in (conv_task.mod, conv_space.apply(conv_space.default(0)).mod))
    assert naive.kind == tuned.kind == "ok", (naive.error, tuned.error)
    reference = worker.call("reference", key, naive.value[0], conv_task.args, 0, {"repeat": 1}, timeout=60)
    ran = worker.call("run", key, tuned.value[0], conv_task.args, 0, evaluator or {"repeat": 1}, timeout=60)
    assert reference.kind == ran.kind == "ok", (reference.error, ran.error)
    assert "wrong_result" not in ran.value
    return ran.value
