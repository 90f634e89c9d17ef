"""experiments/layer_profile.py: each convolution of the tuned model matched with OpenVINO's of the same geometry
(pixels and channels in and out, the filter), whichever layout or precision the task was lowered to."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.layer_profile import geometry_label, layer_table, per_layer, tvm_conv_geometry


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


def test_layers_are_matched_by_geometry_and_summed_per_side(tmp_path) -> None:
    """Two calls of one geometry on each side are summed; a 1x1 layer on rows meets OpenVINO's 20x20 layer; an NHWC
    Winograd task meets its layer by the layout its header names; a layer only one side has keeps its row with
    nothing on the other."""
    log = tmp_path / "log.jsonl"
    headers = {
        "k3": ("fused_conv2d_bf161_add1", [[[1, 40, 40, 64], "bfloat16"], [[2, 3, 3, 32, 32, 2], "bfloat16"],
                                                [[1, 40, 40, 64], "bfloat16"]]),
        "k1": ("fused_conv2d_bf162_add2", [[[1, 25, 16, 128], "bfloat16"], [[4, 1, 1, 64, 32, 2], "bfloat16"],
                                                [[1, 25, 16, 128], "bfloat16"]]),
        "kw": ("fused_conv2d_winograd_add8", [[[1, 80, 80, 16], "float32"], [[6, 6, 16, 32], "float32"],
                                               [[1, 80, 80, 32], "float32"]]),
    }
    layouts = {"kw": {"layouts": ["NHWC"]}}
    with open(log, "w") as f:
        for key, (name, args) in headers.items():
            f.write(json.dumps({"kind": "task", "task": {"workload_key": key, "name": name, "args": args, "index": 0,
                                                         "weight": 1, "flops": 1.0, "target": {"kind": "llvm"},
                                                         "workload": {}, "lowering": layouts.get(key, {})}}) + "\n")
    tvm_rows = [{"key": "k3", "in_model": 0.2, "calls": 2}, {"key": "k1", "in_model": 0.1, "calls": 1},
                {"key": "kw", "in_model": 0.25, "calls": 1}]
    ov_geometry = {"Conv_1": ((40, 40), 64, (40, 40), 64, 3), "Conv_2": ((40, 40), 64, (40, 40), 64, 3),
                   "Conv_3": ((20, 20), 128, (20, 20), 128, 1), "Conv_9": ((80, 80), 16, (80, 80), 32, 3)}
    nodes = {("Conv_1", "Convolution", "brgconv"): 0.06, ("Conv_2", "Convolution", "brgconv"): 0.07,
             ("Conv_3", "Convolution", "brgconv_1x1"): 0.05, ("Conv_9", "Convolution", "brgconv"): 0.3,
             ("Sigmoid_1", "Subgraph", "jit"): 0.1}
    rows = {r["layer"]: r for r in per_layer(tvm_rows, str(log), {"OpenVINO": (nodes, ov_geometry)})}
    k3, k1 = rows["40x40x64 -> 40x40x64, 3x3"], rows["20x20x128 -> 20x20x128, 1x1"]
    assert (k3["tvm"], k3["tvm_n"], k3["OpenVINO"], k3["OpenVINO_n"]) == (0.2, 2, 0.13, 2)
    assert (k1["tvm"], k1["tvm_n"], k1["OpenVINO"]) == (0.1, 1, 0.05)
    assert (rows["80x80x16 -> 80x80x32, 3x3"]["tvm"], rows["80x80x16 -> 80x80x32, 3x3"]["OpenVINO"]) == (0.25, 0.3)
    table = layer_table(list(rows.values()), ["OpenVINO"])
    assert "**layers in both (3)** | 0.55" in table and "| 2.00x |" in table


def test_the_runtimes_take_turns_in_rounds_and_each_key_gets_its_median() -> None:
    """Five passes each in two rounds: 3 + 2, the order reversed in the second round; medians per key."""
    from experiments.layer_profile import in_turns

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
    from experiments.layer_profile import TVMProfile, instrument_cost

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
            return {"k": CallTimes(seconds=10e-6, calls=4), "tiny": CallTimes(seconds=1e-6, calls=2)}

    profile = object.__new__(TVMProfile)
    profile._loaded, profile._args, profile.call_cost = Loaded(), [], 2e-6
    assert profile.one_pass() == pytest.approx({"k": 2e-3, "tiny": 0.0})  # ms: 10 us less 4 x 2 us; never below 0


def test_openvinos_default_precision_is_left_out_where_it_cannot_compile_and_fp32_is_not() -> None:
    """Under a oneDNN capped below the CPU's bf16 unit (``--onednn-max-isa AVX2`` on a Zen 4), OpenVINO cannot
    compile its default precision, bf16: that column is left out and the header says why; fp32 failing is an error.
    OpenVINO's compile is stood in for here (what is tested is what the profile does with its failure)."""
    from experiments.layer_profile import ov_variants

    def make(fp32: bool):
        if not fp32:
            raise RuntimeError("Exception from src/inference/src/cpp/core.cpp:132:\nCheck failed: Supported "
                               "primitive descriptors list is empty for node: MaxPool_0 type: Pooling")
        return (lambda: {}), {"conv": (1,)}

    variants = [("OpenVINO default precision", False), ("OpenVINO fp32", True)]
    passes, geometry, notes = ov_variants(variants, make)
    assert list(passes) == ["OpenVINO fp32"] and list(geometry) == ["OpenVINO fp32"]
    assert notes == ["OpenVINO default precision left out: OpenVINO could not compile it here (Check failed: "
                     "Supported primitive descriptors list is empty for node: MaxPool_0 type: Pooling)"]

    def broken(fp32: bool):
        raise RuntimeError("no CPU plugin")

    with pytest.raises(RuntimeError, match="no CPU plugin"):
        ov_variants([("OpenVINO fp32", True)], broken)


def test_retimed_gives_each_best_config_a_warm_and_a_cold_median_over_rounds_in_fresh_processes(tmp_path):
    import math

    from autosearch.records import read_log
    from experiments.layer_profile import retimed
    from tests.conftest import small_conv_run

    _, path = small_conv_run(tmp_path, trials=2)
    log = read_log(path)
    [key] = [k for k, h in log.tasks.items() if "conv" in h["name"]]
    [(warm, cold)] = retimed(log, [log.best(key)], rounds=2)  # the second round after a refresh
    assert 0 < warm < 1 and 0 < cold < 1 and math.isfinite(warm) and math.isfinite(cold)
