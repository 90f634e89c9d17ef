"""The compiled model's weights beside its library (autosearch.deploy.artifact): a tuned build reads exactly the
weights, in exactly the layouts, its kernels read when the weights were bound into the library; bad artifacts."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conftest import wide_conv_onnx


def _random_prepacked_database(tasks, target):
    """A database with, per task, a random schedule of MetaSchedule's space that prepacks its weights (its
    ``RewriteLayout`` gives them the layout it tiles them in): a tuned model without a tuning run."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.measure.prepack import has_prepack
    from autosearch.search.space import DecisionSpace

    rng = np.random.default_rng(0)
    db = ms.database.MemoryDatabase()
    for task in tasks:
        applied = next(a for a in DecisionSpace(task.mod, target).sample_applied(rng, 20) if has_prepack(a.mod["main"]))
        db.commit_tuning_record(ms.database.TuningRecord(applied.trace, db.commit_workload(task.mod), [1e-4], target,
                                                         ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])))
    return db


def _kernels(mod) -> dict:
    import tvm

    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


def _constants(mod) -> list[np.ndarray]:
    import tvm
    from tvm import relax

    found: dict = {}
    relax.analysis.post_order_visit(mod["main"], lambda e: found.setdefault(e.__chandle__(), e.value.numpy())
                                    if isinstance(e, tvm.ir.GenericConst) and hasattr(e.value, "shape") else None)
    return list(found.values())


def _called(mod) -> list[str]:
    """The kernels ``main`` calls."""
    from tvm import relax

    names: list[str] = []
    relax.analysis.post_order_visit(mod["main"], lambda e: names.append(e.args[0].name_hint) if isinstance(
        e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir" else None)
    return names


@pytest.mark.parametrize("winograd", ["off", "candidates"])
def test_a_tuned_build_reads_the_weights_its_kernels_read_when_they_were_in_the_library(target, tmp_path, winograd):
    """A 3x3 conv 64 -> 64, direct or Winograd, each with a schedule that prepacks its weights: the kernels are
    TVM's build of the database's schedules unchanged, the weights file holds the module's folded constants (the
    prepacked layout, the Winograd-transformed kernel: computed at compile time, no transform left in ``main``),
    and the outputs are bit for bit those of the library with the weights bound in."""
    import onnxruntime as ort
    import tvm
    import tvm_ffi
    from tvm import relax

    from autosearch.deploy.artifact import lift_weights, load_model
    from autosearch.deploy.build import compile_model
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.lowering import build_module, tuned_module, winograd_policy
    from autosearch.frontend.target import host_cores

    path = str(tmp_path / "wide.onnx")
    proto = wide_conv_onnx(path, channels=64, hw=16)
    model = import_model(path, target, winograd="off" if winograd == "off" else "auto", layout="NCHW")
    [task] = [t for t in model.tasks if winograd_policy(winograd).uses(t.lowering)]  # the layer as compiled
    assert ("winograd" in task.name) == (winograd == "candidates")
    db = _random_prepacked_database([task], target)

    bound = tuned_module(model.relax_mod, target, db, winograd=winograd)
    lifted, weights = lift_weights(bound)
    assert _kernels(lifted).keys() == _kernels(bound).keys()
    for name, kernel in _kernels(bound).items():
        assert tvm_ffi.structural_equal(_kernels(lifted)[name], kernel), name
    called = _called(lifted)
    assert called == _called(bound) and any(n.endswith("_prepacked") for n in called)  # the database's kernel
    assert not any(n.endswith("_weight_prepack") or "kernel_transform" in n for n in called)
    constants = _constants(bound)
    assert len(constants) == len(weights) and not _constants(lifted)
    for value in weights.values():
        assert sum(np.array_equal(value.numpy(), c) for c in constants) == 1
    raw = {tuple(w.dims) for w in proto.graph.initializer}
    assert any(tuple(v.shape) not in raw for v in weights.values())  # saved as the kernel reads it, not as ONNX has it

    compiled = compile_model(model.relax_mod, target, model.tasks, db, str(tmp_path / "split.so"), winograd=winograd)
    assert compiled.tuned_tasks == [task.name] and not compiled.missing_tasks
    old = str(tmp_path / "bound.so")
    build_module(bound, target).export_library(old)
    x = np.random.default_rng(1).uniform(0, 1, (1, 64, 16, 16)).astype("float32")
    got = load_model(compiled.path, threads=1)(tvm.runtime.tensor(x)).numpy()
    assert tvm.runtime.num_threads() == 1  # the runtime's pool, as asked
    load_model(compiled.path, threads=host_cores())
    assert tvm.runtime.num_threads() == host_cores()
    before = relax.VirtualMachine(tvm.runtime.load_module(old), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(got, before)
    [expected] = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_a_missing_or_foreign_weights_file_is_one_line(target, tmp_path):
    from autosearch.deploy.artifact import load_model, weights_path
    from autosearch.deploy.build import compile_model
    from autosearch.errors import UserError
    from autosearch.frontend.importer import import_model
    from tests.test_memory import conv_chain_onnx

    one = import_model(conv_chain_onnx(str(tmp_path / "one.onnx"), layers=1, channels=8, hw=4), target,
                       winograd="off", layout="NCHW")
    two = import_model(conv_chain_onnx(str(tmp_path / "two.onnx"), layers=2, channels=8, hw=4), target,
                       winograd="off", layout="NCHW")
    first = compile_model(one.relax_mod, target, one.tasks, None, str(tmp_path / "one.so"))
    second = compile_model(two.relax_mod, target, two.tasks, None, str(tmp_path / "two.so"))
    assert first.weights_path == weights_path(first.path) == str(tmp_path / "one.params")
    os.replace(second.weights_path, first.weights_path)
    with pytest.raises(UserError, match=r"one.params holds 2 weights, not the 1 of .*one.so: compile again"):
        load_model(first.path)
    os.unlink(first.weights_path)
    with pytest.raises(UserError, match=r"one.so needs its weights file .*one.params, which does not exist"):
        load_model(first.path)
    with pytest.raises(UserError, match="would overwrite its own weights file"):
        weights_path(str(tmp_path / "model.params"))
    for bad in (0, -2, 1.5, True):
        with pytest.raises(UserError, match="threads must be a positive integer"):
            load_model(second.path, threads=bad)


def test_a_model_input_named_like_a_weight_is_still_an_input(target, tmp_path):
    """The weights are ``main``'s trailing ``weight_0 ... weight_<k-1>``; an ONNX input called ``weight_0`` (the
    name the first lifted weight gets) stays the input the caller passes."""
    import onnx
    import onnxruntime as ort
    import tvm

    from autosearch.deploy.artifact import load_model
    from autosearch.deploy.build import compile_model
    from autosearch.frontend.importer import import_model
    from tests.test_memory import conv_chain_onnx

    path = conv_chain_onnx(str(tmp_path / "chain.onnx"), layers=2, channels=8, hw=6)
    proto = onnx.load(path)
    for node in proto.graph.node:
        node.input[:] = ["weight_0" if name == "x" else name for name in node.input]
    proto.graph.input[0].name = "weight_0"
    onnx.save(proto, path)
    model = import_model(path, target, winograd="off", layout="NCHW")
    compiled = compile_model(model.relax_mod, target, model.tasks, None, str(tmp_path / "chain.so"))
    x = np.random.default_rng(3).uniform(-1, 1, (1, 8, 6, 6)).astype("float32")
    got = load_model(compiled.path)(tvm.runtime.tensor(x)).numpy()
    [expected] = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"weight_0": x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def _one_conv_library(target, tmp_path) -> str:
    """A one-convolution model (8 channels at 8 x 8), untuned, compiled: its library's path."""
    from autosearch.deploy.build import compile_model
    from autosearch.frontend.importer import import_model
    from tests.test_memory import conv_chain_onnx

    model = import_model(conv_chain_onnx(str(tmp_path / "m.onnx"), layers=1, channels=8, hw=8), target,
                         winograd="off", layout="NCHW")
    return compile_model(model.relax_mod, target, model.tasks, None, str(tmp_path / "m.so")).path


def test_a_loaded_models_calls_hold_the_calling_thread_to_the_first_core_and_let_it_go_after(target, tmp_path):
    """With two threads on two cores, a call runs with the calling thread on the pool's first core (TVM left it free
    to share the other thread's core through whole kernels), and gives the thread its cores back after: held for
    good, a script that loaded a model and then tuned saw one core (``host_cores``), and its measuring processes
    were given that one core, timing every two-thread kernel about 2x slow."""
    import json

    from tests.conftest import run_python

    if (os.cpu_count() or 1) < 2:
        pytest.skip("this machine has one core: a pool of two threads has no core of its own for each")
    library = _one_conv_library(target, tmp_path)
    cores = sorted(os.sched_getaffinity(0)) if len(os.sched_getaffinity(0)) >= 2 else [0, 1]
    script = (
        "import json, os\n"
        f"os.sched_setaffinity(0, {set(cores[:2])!r})\n"
        "import numpy as np, tvm\n"
        "from autosearch.deploy.artifact import load_model\n"
        "from autosearch.frontend.target import host_cores\n"
        f"m = load_model({library!r}, threads=2)\n"
        "during = []\n"
        "def seen(*args):\n"
        "    during.append(sorted(os.sched_getaffinity(0)))\n"
        "    return 0\n"
        "m.vm.set_instrument(tvm.runtime.convert(seen))\n"
        "m(tvm.runtime.tensor(np.ones((1, 8, 8, 8), 'float32')))\n"
        "m.vm.set_instrument(None)\n"
        "print(json.dumps({'during': during, 'after': sorted(os.sched_getaffinity(0)), 'cores': host_cores()}))\n")
    seen = json.loads(run_python(script, timeout=120).strip().splitlines()[-1])
    assert seen["during"] and all(d == [cores[0]] for d in seen["during"]), seen
    assert seen["after"] == cores[:2] and seen["cores"] == 2, seen


def test_loading_a_model_keeps_a_pinned_process_on_its_cores(target, tmp_path):
    """A process held to one core (here the machine's last; ``taskset`` does the same) has every thread on it after
    ``load_model`` sets TVM's thread pool and the model runs, also with ``TVM_NUM_THREADS=2`` set (as ``report``
    times a model): TVM's default affinity mode moved the process to core 0, and with the variable bound a thread
    there and widened the caller to every core."""

    import tvm

    from tests.conftest import parallel_kernel_mod, run_python

    if (os.cpu_count() or 1) < 2:
        pytest.skip("this machine has one core: no other core to be moved to")
    library = _one_conv_library(target, tmp_path)
    # the untuned model runs no parallel loop, and TVM binds its pool's threads at the first one: a kernel that has one
    kernel = str(tmp_path / "parallel.so")
    tvm.compile(parallel_kernel_mod(), target=target).export_library(kernel)
    core = os.cpu_count() - 1  # the machine's last core, never TVM's first
    script = (
        "import glob, os\n"
        f"os.sched_setaffinity(0, {{{core}}})  # before any library starts a thread\n"
        "import numpy as np, tvm\n"
        "from autosearch.deploy.artifact import load_model\n"
        "for threads in (None, 1):\n"
        f"    m = load_model({library!r}, threads=threads)\n"
        "    m(tvm.runtime.tensor(np.ones((1, 8, 8, 8), 'float32')))\n"
        f"    tvm.runtime.load_module({kernel!r})['main'](*[tvm.runtime.tensor(np.ones((256, 1024), 'float32'))] * 2)\n"
        "    cpus = {open(t + '/status').read().split('Cpus_allowed_list:')[1].split()[0]\n"
        "            for t in glob.glob('/proc/self/task/*')}\n"
        "    print(sorted(os.sched_getaffinity(0)), sorted(cpus))\n")
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    for variable in ({}, {"TVM_NUM_THREADS": "2"}):
        out = run_python(script, env={**env, **variable}, timeout=120)
        assert out.split("\n")[:2] == [f"[{core}] ['{core}']"] * 2, (variable, out)
