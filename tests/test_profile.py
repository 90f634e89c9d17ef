"""``profile``: where a tuned model's time goes, kernel by kernel, beside OpenVINO's per-node profile; each
convolution of the tuned model matched with OpenVINO's of the same geometry (pixels and channels in and out, the
filter), whichever layout or precision the task was lowered to."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from autosearch.deploy.profile import (
    OPENVINO_FP32,
    TUNED,
    KernelTime,
    LayerProfile,
    TunedKernel,
    TunedProfiler,
    as_tuned_rows,
    as_tuned_table,
    geometry_label,
    in_turns,
    instrument_cost,
    ov_category,
    ov_profilers,
    per_layer,
    tuned_kernels,
    tvm_category,
    tvm_conv_geometry,
)


def test_a_conv_tasks_geometry_is_read_in_every_lowering() -> None:
    nhwc_fp32 = [[[1, 80, 80, 64], "bfloat16"], [[80, 3, 3, 64], "float32"], [[80], "float32"],
                 [[1, 80, 80, 80], "float32"]]
    bf16 = [[[1, 80, 80, 64], "bfloat16"], [[3, 3, 3, 32, 32, 2], "bfloat16"], [[1, 80, 80, 80], "bfloat16"]]
    nchw = [[[1, 64, 80, 80], "float32"], [[80, 64, 3, 3], "float32"], [[1, 80, 80, 80], "float32"]]
    winograd = [[[1, 64, 80, 80], "float32"], [[6, 6, 64, 80], "float32"], [[1, 80, 80, 80], "float32"]]
    want = ((80, 80), 64, (80, 80), 80, 3)
    assert tvm_conv_geometry("fused_conv2d30_add16_fast_sigmoid12", nhwc_fp32) == want
    assert tvm_conv_geometry("fused_conv2d_bf1630_add16", bf16) == want
    assert tvm_conv_geometry("fused_conv2d26_add13", nchw) == want
    assert tvm_conv_geometry("fused_conv2d_winograd2_add6", winograd) == want
    # fp32 Winograd in NHWC: its transformed weights (6, 6, in, out) are NCHW's; the task's layout tells them apart
    nhwc_winograd = [[[1, 80, 80, 64], "float32"], [[6, 6, 64, 80], "float32"], [[1, 1, 1, 80], "float32"],
                     [[1, 80, 80, 80], "float32"]]
    assert tvm_conv_geometry("fused_conv2d_winograd2_add4", nhwc_winograd, layout="NHWC") == want
    assert tvm_conv_geometry("fused_conv2d_winograd2_add4", nhwc_winograd) != want  # read as NCHW: another layer
    bf16_winograd = [[[1, 80, 80, 64], "bfloat16"], [[16, 1, 1, 1, 32, 80, 2], "bfloat16"],
                     [[1, 80, 80, 80], "float32"]]
    assert tvm_conv_geometry("fused_conv2d_winograd_bf163_add16", bf16_winograd) == want
    # a 1x1 layer on rows of 16 pixels (20x20 as 25 x 16): its pixels, not its rows
    rows = [[[1, 25, 16, 384], "bfloat16"], [[8, 1, 1, 192, 32, 2], "bfloat16"], [[1, 25, 16, 256], "bfloat16"]]
    assert tvm_conv_geometry("fused_conv2d_bf1612_add5", rows) == ("flat", 400, 384, 256)
    # the convolution's own output when the max pool is fused into it (the task writes the pooled image)
    pooled = [[[1, 26, 26, 64], "bfloat16"], [[4, 3, 3, 32, 32, 2], "bfloat16"], [[1, 13, 13, 128], "bfloat16"]]
    assert tvm_conv_geometry("fused_conv2d_bf164_max_pool2d_window1", pooled) == ((26, 26), 64, (26, 26), 128, 3)
    assert tvm_conv_geometry("fused_concatenate12", nchw) is None
    assert geometry_label(*want) == "80x80x64 -> 80x80x80, 3x3"


def test_layers_are_matched_by_geometry_and_summed_per_side() -> None:
    """Two layers of one geometry on each side are summed (calls and nodes counted); a 1x1 layer on rows meets
    OpenVINO's 20x20 layer; an NHWC Winograd task meets its layer by the layout its header names; a layer only one
    side has keeps its row with nothing on the other; the table sums the layers both have and gives the tuned /
    OpenVINO ratio."""
    def header(name, args, lowering=None):
        return {"name": name, "args": args, "lowering": lowering or {}}

    tuned = [
        TunedKernel("fused_conv2d_bf161_add1_prepacked", 0.2, 2, "k3", header(
            "fused_conv2d_bf161_add1", [[[1, 40, 40, 64], "bfloat16"], [[2, 3, 3, 32, 32, 2], "bfloat16"],
                                        [[1, 40, 40, 64], "bfloat16"]])),
        TunedKernel("fused_conv2d_bf162_add2", 0.1, 1, "k1", header(
            "fused_conv2d_bf162_add2", [[[1, 25, 16, 128], "bfloat16"], [[4, 1, 1, 64, 32, 2], "bfloat16"],
                                        [[1, 25, 16, 128], "bfloat16"]])),
        TunedKernel("fused_conv2d_winograd_add8", 0.25, 1, "kw", header(
            "fused_conv2d_winograd_add8", [[[1, 80, 80, 16], "float32"], [[6, 6, 16, 32], "float32"],
                                           [[1, 80, 80, 32], "float32"]], {"layouts": ["NHWC"]})),
        TunedKernel("fused_conv2d5_add3", 0.4, 1, "k5", None),  # a task the model has and the header lacks
        TunedKernel("fused_conv2d_bf165_add7", 0.04, 1, "k6", header(  # another task of k3's geometry
            "fused_conv2d_bf165_add7", [[[1, 40, 40, 64], "bfloat16"], [[2, 3, 3, 32, 32, 2], "bfloat16"],
                                        [[1, 40, 40, 64], "bfloat16"]])),
    ]
    ov_geometry = {"Conv_1": ((40, 40), 64, (40, 40), 64, 3), "Conv_2": ((40, 40), 64, (40, 40), 64, 3),
                   "Conv_3": ((20, 20), 128, (20, 20), 128, 1), "Conv_9": ((80, 80), 16, (80, 80), 32, 3),
                   "Conv_7": ((10, 10), 8, (10, 10), 8, 3)}
    nodes = {("Conv_1", "Convolution", "brgconv"): 0.06, ("Conv_2", "Convolution", "brgconv"): 0.07,
             ("Conv_3", "Convolution", "brgconv_1x1"): 0.05, ("Conv_9", "Convolution", "brgconv"): 0.3,
             ("Conv_7", "Convolution", "brgconv"): 0.01, ("Sigmoid_1", "Subgraph", "jit"): 0.1}
    layers = per_layer(tuned, {"OpenVINO": (nodes, ov_geometry)})
    rows = {r.layer: r for r in layers}
    k3, k1 = rows["40x40x64 -> 40x40x64, 3x3"], rows["20x20x128 -> 20x20x128, 1x1"]
    assert (k3.ms[TUNED], k3.count[TUNED], k3.ms["OpenVINO"], k3.count["OpenVINO"]) == (
        pytest.approx(0.24), 3, pytest.approx(0.13), 2)
    assert (k1.ms[TUNED], k1.count[TUNED], k1.ms["OpenVINO"]) == (0.1, 1, 0.05)
    wide = rows["80x80x16 -> 80x80x32, 3x3"]
    assert (wide.ms[TUNED], wide.ms["OpenVINO"]) == (0.25, 0.3) and wide.ratio("OpenVINO") == pytest.approx(0.25 / 0.3)
    assert rows["10x10x8 -> 10x10x8, 3x3"].ratio("OpenVINO") is None  # OpenVINO's alone: no ratio
    assert [r.layer for r in layers][:3] == ["80x80x16 -> 80x80x32, 3x3", "40x40x64 -> 40x40x64, 3x3",
                                             "20x20x128 -> 20x20x128, 1x1"]  # the tuned model's slowest first
    kernels = {TUNED: [KernelTime("fused_conv2d_bf161_add1_prepacked", "convolution", 0.2)],
               "OpenVINO": [KernelTime("Conv_1 (Convolution, brgconv)", "convolution", 0.06)]}
    profile = LayerProfile(model="m", runtimes=[TUNED, "OpenVINO"], kernels=kernels, layers=layers, tasks=tuned,
                           runs=4, rounds=2, threads=2, call_cost=1e-6)
    table = profile.markdown()
    assert "**layers in both (3)** | 0.590 | 0.480 | 1.23x |" in table and "| 2.00x |" in table
    assert profile.categories[TUNED]["convolution"] == 0.2 and profile.categories["OpenVINO"]["pooling"] == 0.0


def test_a_tuned_models_kernels_carry_their_tasks_and_calls() -> None:
    """The profile names kernels as the library does (``_prepacked`` where the weights are prepacked); each that runs
    a task gets its calls and its task's header; the VM's builtins and kernels of no task are left out."""
    from autosearch.deploy.build import Kernel

    compiled = [Kernel("fused_conv2d1_add1", "key1", 3), Kernel("fused_transpose", "key2", 1),
                Kernel("unused", "key3", 0)]
    profile = {"fused_conv2d1_add1_prepacked": 0.3, "fused_transpose": 0.02, "unused": 0.0, "other": 0.1}
    kernels = tuned_kernels(profile, compiled, {"key1": {"name": "fused_conv2d1_add1", "args": []}})
    assert [(k.name, k.calls, k.key, k.header) for k in kernels] == [
        ("fused_conv2d1_add1_prepacked", 3, "key1", {"name": "fused_conv2d1_add1", "args": []}),
        ("fused_transpose", 1, "key2", None)]


def test_each_kernel_beside_its_task_as_tuned() -> None:
    """A kernel whose task the log has a valid trial of gets that task's best x its calls; one without, no row; the
    table sums per category and lists the kernels that lose most in the model first, with a caller's extra columns."""
    class Log:  # the tuning log's answer, as LogContents.best_seconds gives it
        def best_seconds(self, key):
            return {"k1": 0.5e-3, "k2": 0.1e-3}.get(key)

    tasks = [TunedKernel("conv_a", 1.2, 2, "k1", None), TunedKernel("fused_transpose", 0.1, 1, "k2", None),
             TunedKernel("conv_b", 0.3, 1, "k3", None)]
    rows = as_tuned_rows(tasks, Log())
    assert [(r.kernel, r.category, r.in_model, r.tuned) for r in rows] == [
        ("conv_a", "other", 1.2, pytest.approx(1.0)), ("fused_transpose", "layout and casts", 0.1, pytest.approx(0.1))]
    rows[0].extra["alone, warm"] = 0.9
    table = as_tuned_table(rows, limit=5).markdown()
    assert "| alone, warm ms |" in table and "| **all tuned kernels** |  | 1.300 | 1.100 | 1.18x | 0.900 |" in table
    assert table.index("| conv_a |") < table.index("| fused_transpose |")  # 0.2 ms lost before 0.0


def test_categories_by_kernel_name_and_node_type() -> None:
    assert tvm_category("fused_conv2d_bf161_add1_prepacked") == "convolution"
    assert tvm_category("attention_matmul_bf16") == "convolution"
    assert tvm_category("fused_max_pool2d") == "pooling"
    assert tvm_category("fused_transpose_cast1") == "layout and casts"
    assert tvm_category("fused_softmax") == "other"
    assert [ov_category(t) for t in ("Convolution", "MaxPool", "Reorder", "Subgraph")] == [
        "convolution", "pooling", "layout and casts", "other"]


def test_the_runtimes_take_turns_in_rounds_and_each_key_gets_its_median() -> None:
    """Five passes each in two rounds: 3 + 2, the order reversed in the second round; medians per key."""
    calls: list[str] = []

    def profiler(label: str, times: list[float]):
        it = iter(times)

        def one_pass() -> dict:
            calls.append(label)
            return {"k": next(it)}

        return one_pass

    medians = in_turns({"a": profiler("a", [1, 2, 9, 4, 5]), "b": profiler("b", [7, 1, 1, 8, 9])}, runs=5, rounds=2)
    assert calls == ["a"] * 3 + ["b"] * 3 + ["b"] * 2 + ["a"] * 2
    assert medians == {"a": {"k": 4}, "b": {"k": 7}}
    calls.clear()
    assert in_turns({"a": profiler("a", [3, 1]), "b": profiler("b", [2])}, runs=1, rounds=4) == {"a": {"k": 3},
                                                                                              "b": {"k": 2}}
    assert calls == ["a", "b"]  # no more rounds than passes


def test_each_call_is_timed_and_counted_and_the_profilers_own_cost_is_taken_off() -> None:
    """A Relax function calling one kernel twice and another once: each symbol's calls counted and its seconds
    inside the pass; the profiler's own cost per call (an empty kernel's) is positive and small, and a profile pass
    takes it off each call, never below zero."""
    import time

    import tvm
    from tvm import relax, te

    from autosearch.deploy.artifact import CallTimes, profile_calls

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((64, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_te(lambda a: te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="twice"), x)
            y = bb.emit_te(lambda a: te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="twice"), y)
            z = bb.emit_te(lambda a: te.compute((64,), lambda i: a[i, 0] + 1.0, name="first"), y)
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    mod = bb.get()
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    data = tvm.runtime.tensor(np.ones((64, 64), "float32"), tvm.cpu())
    kernels = {gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    start = time.perf_counter()
    times = profile_calls(vm, lambda: vm["main"](data))
    wall = time.perf_counter() - start
    counted = {name: t.calls for name, t in times.items() if name in kernels}
    assert sorted(counted.values()) == [1, 2], times  # the two identical computations are one kernel, called twice
    assert 0 < sum(t.seconds for t in times.values()) < wall

    cost = instrument_cost(passes=200)
    assert 0 < cost < 1e-3

    class Loaded:
        def profile(self, *args):
            return {"k": CallTimes(seconds=10e-6, calls=4), "tiny": CallTimes(seconds=1e-6, calls=2),
                    "vm.builtin.alloc_storage": CallTimes(seconds=5e-6, calls=1)}

    profile = object.__new__(TunedProfiler)
    profile._loaded, profile._args, profile.call_cost = Loaded(), [], 2e-6
    # ms: 10 us less 4 x 2 us; never below 0; the VM's own builtins are not kernels
    assert profile.one_pass() == pytest.approx({"k": 2e-3, "tiny": 0.0})


def test_openvinos_default_precision_is_left_out_where_it_cannot_compile_and_fp32_is_not() -> None:
    """Under a oneDNN capped below the CPU's bf16 unit (``--onednn-max-isa AVX2`` on a Zen 4), OpenVINO cannot
    compile its default precision, bf16: that column is left out and the header says why; fp32 failing is an error.
    OpenVINO's compile is stood in for here (what is tested is what the profile does with its failure)."""
    def make(fp32: bool):
        if not fp32:
            raise RuntimeError("Exception from src/inference/src/cpp/core.cpp:132:\nCheck failed: Supported "
                               "primitive descriptors list is empty for node: MaxPool_0 type: Pooling")
        return (lambda: {}), {"conv": (1,)}

    variants = [("OpenVINO default precision", False), ("OpenVINO fp32", True)]
    passes, geometry, notes = ov_profilers(variants, make)
    assert list(passes) == ["OpenVINO fp32"] and list(geometry) == ["OpenVINO fp32"]
    assert notes == ["OpenVINO default precision left out: OpenVINO could not compile it here (Check failed: "
                     "Supported primitive descriptors list is empty for node: MaxPool_0 type: Pooling)"]

    def broken(fp32: bool):
        raise RuntimeError("no CPU plugin")

    with pytest.raises(RuntimeError, match="no CPU plugin"):
        ov_profilers([("OpenVINO fp32", True)], broken)


@pytest.mark.slow
def test_profile_of_a_tuned_model_through_the_cli_and_the_api(tmp_path, capfd):
    """A short real run of the small model's conv task, exported, then ``profile``: each kernel of the tuned model
    timed in the model beside OpenVINO's nodes; the convolution matched with OpenVINO's by geometry (the model's
    16 -> 32 3x3 at 28 x 28), the PNG and the Markdown written; the same through the CLI, which prints the tables."""
    import autosearch
    from tests.conftest import run_cli_here, small_conv_run

    model, log = small_conv_run(tmp_path, trials=2)
    db = str(tmp_path / "db")
    autosearch.export(log, db)
    png, md = str(tmp_path / "p.png"), str(tmp_path / "p.md")
    messages: list[str] = []
    profile = autosearch.profile(model, db, log=log, runs=4, rounds=2, threads=2, plot=png, markdown=md,
                                 on_message=messages.append)
    assert profile.runtimes[0] == TUNED and OPENVINO_FP32 in profile.runtimes  # the test extra installs OpenVINO
    assert any(m.startswith("profiling TVM tuned, ") for m in messages)
    tuned = {k.name: k for k in profile.kernels[TUNED]}
    convs = [k for k in tuned.values() if k.category == "convolution"]
    assert convs and all(k.ms > 0 for k in convs)
    assert any(k.calls == 1 and k.header and "conv2d" in k.header["name"] for k in profile.tasks)
    layer = {r.layer: r for r in profile.layers}["28x28x16 -> 28x28x32, 3x3"]
    assert layer.count[TUNED] == 1 and layer.count[OPENVINO_FP32] == 1 and layer.ratio(OPENVINO_FP32) > 0
    assert os.path.getsize(png) > 0 and "28x28x16 -> 28x28x32, 3x3" in open(md).read()
    # the log's conv task beside its kernel in the model (the run tuned the conv task alone)
    [conv] = [r for r in profile.as_tuned if r.category == "convolution"]
    assert conv.calls == 1 and conv.in_model > 0 and conv.tuned > 0 and profile.log == log
    assert "in the model against as tuned" in open(md).read()

    proc = run_cli_here(capfd, "profile", "--model", model, "--db", db, "--log", log, "--runs", "2", "--rounds", "1",
                        "--threads", "2", "--plot", str(tmp_path / "cli.png"), "--top", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "convolutions by geometry" in proc.stdout and "28x28x16 -> 28x28x32, 3x3" in proc.stdout
    shown = re.search(r"TVM tuned: the (\d+) slowest of (\d+)", proc.stdout)
    assert shown and int(shown[1]) == min(3, int(shown[2])) and os.path.getsize(tmp_path / "cli.png") > 0
    assert "in the model against as tuned" in proc.stdout


def test_profile_refuses_bad_input_in_one_line(tmp_path, capfd):
    """A missing database, counts that are not positive, and a GPU target (the model runs on this CPU beside
    OpenVINO): one line, exit code 2."""
    from tests.conftest import ROOT, run_cli_here, small_conv_onnx

    model = str(tmp_path / "small.onnx")
    small_conv_onnx(model)
    tvm_db = os.path.join(ROOT, "tests", "data", "tvm_tune_tir_db")
    for args, message in ((("--db", str(tmp_path / "missing")), "database directory not found"),
                          (("--db", str(tmp_path), "--runs", "0"), "--runs must be positive"),
                          (("--db", str(tmp_path), "--top", "0"), "--top must be positive"),
                          (("--model", model, "--db", tvm_db, "--target", "cuda"),
                           "profile runs the model on this machine's CPU: --target must be a CPU (llvm) target")):
        proc = run_cli_here(capfd, "profile", *args)
        lines = [ln for ln in proc.stderr.splitlines() if "Unable to detect CUDA version" not in ln]  # TVM's log
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr[-1500:]
