"""A deformable attention's sampling (autosearch/frontend/sampling.py): ``grid_sample`` computed channels innermost,
fused with the copies of the value tensor before it and the levels' concatenation after it, against ONNX Runtime
and at every sketch of its task."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

LEVELS = ((8, 8), (4, 6))  # (height, width) of each level
HEADS, CHANNELS, QUERIES, POINTS = 2, 16, 5, 3
TOKENS = sum(h * w for h, w in LEVELS)


def sampling_onnx(*, align_corners: int = 0, mode: str = "bilinear", padding: str = "zeros") -> onnx.ModelProto:
    """Ultralytics' ``multi_scale_deformable_attn_pytorch`` up to the levels' concatenation: the value tensor
    ``(1, tokens, heads, channels)`` transposed to ``(heads, channels, tokens)``, split into its levels, each
    reshaped to NCHW planes and sampled at its grid ``(heads, queries, points, 2)``; the samples concatenated."""
    nodes = [
        helper.make_node("Transpose", ["value"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "flat_shape"], ["flat"]),
        helper.make_node("Split", ["flat", "split"], [f"level{i}" for i in range(len(LEVELS))], axis=2),
    ]
    inits = [helper.make_tensor("flat_shape", TensorProto.INT64, [3], [HEADS, CHANNELS, TOKENS]),
             helper.make_tensor("split", TensorProto.INT64, [len(LEVELS)], [h * w for h, w in LEVELS])]
    grids = []
    for i, (h, w) in enumerate(LEVELS):
        inits.append(helper.make_tensor(f"plane{i}", TensorProto.INT64, [4], [HEADS, CHANNELS, h, w]))
        nodes.append(helper.make_node("Reshape", [f"level{i}", f"plane{i}"], [f"image{i}"]))
        nodes.append(helper.make_node("GridSample", [f"image{i}", f"grid{i}"], [f"sampled{i}"],
                                      align_corners=align_corners, mode=mode, padding_mode=padding))
        grids.append(helper.make_tensor_value_info(f"grid{i}", TensorProto.FLOAT, [HEADS, QUERIES, POINTS, 2]))
    nodes.append(helper.make_node("Concat", [f"sampled{i}" for i in range(len(LEVELS))], ["y"], axis=-1))
    graph = helper.make_graph(
        nodes, "deformable_sampling",
        [helper.make_tensor_value_info("value", TensorProto.FLOAT, [1, TOKENS, HEADS, CHANNELS]), *grids],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [HEADS, CHANNELS, QUERIES, POINTS * len(LEVELS)])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    return model


def _inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """The value tensor, and grids whose points fall inside the image, on its edges and past them (zero padding)."""
    rng = np.random.default_rng(seed)
    feeds = {"value": rng.standard_normal((1, TOKENS, HEADS, CHANNELS)).astype("float32")}
    for i in range(len(LEVELS)):
        grid = rng.uniform(-1.3, 1.3, (HEADS, QUERIES, POINTS, 2)).astype("float32")
        grid[0, 0, 0] = (-1.0, -1.0)  # corners, exactly
        grid[0, 0, 1] = (1.0, 1.0)
        grid[1, 0, 0] = (1.7, -1.8)  # past the image: zero
        feeds[f"grid{i}"] = grid
    return feeds


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _lowered(model: onnx.ModelProto, target, layout: str = "NHWC"):
    from autosearch.frontend.importer import to_relax
    from autosearch.frontend.lowering import lower

    shapes = {"value": (1, TOKENS, HEADS, CHANNELS), **{f"grid{i}": (HEADS, QUERIES, POINTS, 2)
                                                          for i in range(len(LEVELS))}}
    return lower(to_relax(model, shapes), target, layout=layout, precision="fp32")


def _run_untuned(lowered, target, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The lowered model built as it is (every kernel unscheduled), run on ``feeds``."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autosearch.frontend.lowering import apply_database, build_module

    vm = relax.VirtualMachine(build_module(apply_database(lowered, target, ms.database.MemoryDatabase()), target),
                              tvm.cpu())
    names = ["value", *(f"grid{i}" for i in range(len(LEVELS)))]
    out = vm["main"](*(tvm.runtime.tensor(feeds[n], tvm.cpu()) for n in names))
    return out.numpy()


def _kernels(lowered) -> dict[str, object]:
    from tvm import tirx

    return {gv.name_hint: f for gv, f in lowered.functions_items() if isinstance(f, tirx.PrimFunc)}


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_the_sampling_is_one_kernel_reading_the_value_tensor_and_matches_onnxruntime(align_corners, layout, target):
    """Both layouts' lowerings: one kernel samples both levels, reading the value tensor as the graph gives it (no
    kernel copies it to planes first) and writing the concatenation; its output is ONNX Runtime's, for points
    inside, on the edges of and outside each level."""
    model = sampling_onnx(align_corners=align_corners)
    lowered = _lowered(model, target, layout)
    kernels = _kernels(lowered)
    [fused] = [name for name in kernels if "grid_sample_nhwc" in name]
    assert fused.count("grid_sample_nhwc") == len(LEVELS) and "concatenate" in fused
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    params = [tuple(int(n) for n in a.shape) for a in ArgInfo.from_prim_func(kernels[fused])]
    assert (1, TOKENS, HEADS * CHANNELS) in params or (1, TOKENS, HEADS, CHANNELS) in params, params
    assert len(kernels) == 1, sorted(kernels)  # nothing else: the copies, slices and grid transposes are in it
    feeds = _inputs()
    want = _onnxruntime(model, feeds)
    got = _run_untuned(lowered, target, feeds)
    assert np.abs(want).max() > 0.5 and (want == 0).any()  # samples of the value, and points past the edges
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_other_grid_samples_keep_tvms_lowering_and_match_onnxruntime(target):
    """Nearest sampling and border padding are TOPI's kernels, as before, apart from the copies."""
    for mode, padding in (("nearest", "zeros"), ("bilinear", "border")):
        model = sampling_onnx(mode=mode, padding=padding)
        lowered = _lowered(model, target)
        names = list(_kernels(lowered))
        assert not any("grid_sample_nhwc" in n for n in names)
        assert sum(n.startswith("grid_sample") for n in names) == len(LEVELS), names
        feeds = _inputs(1)
        np.testing.assert_allclose(_run_untuned(lowered, target, feeds), _onnxruntime(model, feeds), rtol=1e-5,
                                   atol=1e-5)


def test_every_sketch_of_the_sampling_task_computes_onnxruntimes_output(tmp_path, target):
    """The task as a run tunes it: its design space's sketches, at their defaults and at a random config, built and
    run into an output filled with NaN, give ONNX Runtime's output; the space offers more than the loop order of
    its output (the sampling kept a block of its own, not inlined into the concatenation)."""
    from autosearch import api
    from tests.test_bf16_matmul import every_sketch_computes

    model = sampling_onnx()
    path = str(tmp_path / "sampling.onnx")
    onnx.save(model, path)
    [task] = [t for t in api.load_tasks(path, layout="NHWC", precision="fp32").tasks if "grid_sample" in t.name]
    feeds = _inputs(2)
    by_shape = {tuple(v.shape): v for v in feeds.values() if v.shape != (HEADS, QUERIES, POINTS, 2)}
    grids = iter(feeds[f"grid{i}"] for i in range(len(LEVELS)))
    inputs = [by_shape[tuple(shape)] if tuple(shape) in by_shape else next(grids) for shape, _ in task.args[:-1]]
    assert every_sketch_computes(task, inputs, _onnxruntime(model, feeds), target, np.random.default_rng(0)) >= 1

    from autosearch.search.space import DecisionSpace

    traces = [str(s.trace) for s in DecisionSpace(task.mod, task.target).sketches]
    assert all("sample_compute_location" in t for t in traces), traces
