"""Known schedules of the same layer at another shape: which tasks are one layer, the nearest shape first, each
config re-fitted to this task's extents (inner tiles kept), the task records kept in the known-schedules file, and
a tuning run that measures the re-fitted configs first on a real convolution at a size nobody measured."""

from __future__ import annotations

import pytest

from autosearch.search.known import RESIZED, SOURCE, KnownSchedule, KnownSchedules
from autosearch.search.resized import layer_key, nearest_tiling, refit, relative_shape, shape_distance
from autosearch.search.space import perfect_tilings
from autosearch.types import Config, MeasureResult, Record, Status


def _conv(hw: int, *, batch: int = 1, cin: int = 64, cout: int = 64, stride: int = 1) -> list:
    """A fused NHWC convolution's arguments as a task holds them: data, weights, bias, result."""
    return [((batch, hw, hw, cin), "float32"), ((cout, 3, 3, cin), "float32"), ((1, 1, 1, cout), "float32"),
            ((batch, hw // stride, hw // stride, cout), "float32")]


NAME, LOWERING = "fused_conv2d11_add8_fast_sigmoid6_multiply6", {"layout": "NHWC"}


def test_one_layer_at_every_image_size_and_batch_but_not_at_another_stride_or_channel_count():
    key = layer_key(NAME, _conv(80), LOWERING)
    assert key is not None
    assert layer_key("fused_conv2d27_add13_fast_sigmoid9_multiply91", _conv(128), LOWERING) == key  # numbering
    assert layer_key(NAME, _conv(40, batch=2), LOWERING) == key
    assert layer_key(NAME, [[list(s), d] for s, d in _conv(64)], LOWERING) == key  # a log's lists
    assert layer_key(NAME, _conv(80, stride=2), LOWERING) != key  # same weights, another loop nest
    assert layer_key(NAME + "_add", _conv(80), LOWERING) != key  # another epilogue
    assert layer_key(NAME, _conv(80), {"layout": "NCHW"}) != key
    narrower = _conv(80)
    narrower[0] = ((1, 80, 80, 51), "float32")  # packed weights alike, fewer input channels
    assert layer_key(NAME, narrower, LOWERING) != key
    assert layer_key("fused_concatenate", [((1, 8, 8, 4), "float32"), ((1, 8, 8, 8), "float32")], {}) is None
    assert relative_shape(_conv(80, stride=2)) == ((1.0, 2.0, 2.0, 1.0), (1.0, 1.0, 1.0, 1.0))
    assert relative_shape(_conv(80, batch=2, cin=32)) == ((1.0, 1.0, 1.0, 0.5), (1.0, 1.0, 1.0, 1.0))


def test_the_nearest_shape_is_the_least_log_distance():
    assert shape_distance(_conv(80), _conv(80)) == 0
    assert shape_distance(_conv(128), _conv(80)) < shape_distance(_conv(128), _conv(40))
    assert shape_distance(_conv(80, batch=2), _conv(80)) == pytest.approx(2 * 0.6931, abs=1e-3)


def test_a_tiling_refits_to_the_new_extent_keeping_its_inner_factors():
    choices = perfect_tilings(128, 4, 64)
    fitted = nearest_tiling(choices, (1, 5, 4, 4))  # best at 80: vector and register tiles of 4
    assert fitted in choices and fitted[2:] == (4, 4)
    assert nearest_tiling(choices, (2, 4, 4, 4)) == (2, 4, 4, 4)  # legal as it is: unchanged
    assert nearest_tiling(perfect_tilings(12, 2, 64), (1, 16)) == (1, 12)  # no 16 in 12: the nearest divisor


def _known_at(shapes: dict[str, list], configs: dict[str, list[Config]], cpu: str = "rocketlake") -> KnownSchedules:
    by_key = {key: [KnownSchedule(c, 1e-3 * (i + 1), cpu) for i, c in enumerate(configs[key])] for key in shapes}
    tasks = {key: {"name": NAME, "args": [[list(s), d] for s, d in args], "lowering": LOWERING}
             for key, args in shapes.items()}
    return KnownSchedules(by_key, tasks=tasks)


def test_a_task_borrows_its_layers_configs_nearest_shape_first_refitted_and_filtered():
    a, b, c = Config(0, (1,)), Config(0, (2,)), Config(0, (3,))
    known = _known_at({"k80": _conv(80), "k40": _conv(40), "k80s2": _conv(80, stride=2)},
                      {"k80": [a, b], "k40": [c, a], "k80s2": [Config(0, (9,))]})
    assert known.layer_sources(NAME, _conv(128), LOWERING) == ["k80", "k40"]  # not the stride-2 layer
    assert known.layer_sources(NAME, _conv(80), LOWERING) == ["k40"]  # a known shape is not its own source
    doubled = known.for_layer(NAME, _conv(128), LOWERING, host_cpu="rocketlake",
                              refit=lambda cfg: Config(0, (cfg.values[0] * 10,)))
    assert doubled == [Config(0, (10,)), Config(0, (20,)), Config(0, (30,))]  # each once, nearest shape's first
    assert known.for_layer(NAME, _conv(128), LOWERING, host_cpu="rocketlake", refit=lambda cfg: cfg,
                           fits=lambda cfg: cfg != b, limit=1) == [a]
    assert known.for_layer(NAME, _conv(128), LOWERING, host_cpu="rocketlake",
                           refit=lambda cfg: None if cfg == a else cfg) == [b, c]
    assert known.for_layer(NAME, _conv(128, cin=32), LOWERING, host_cpu="rocketlake", refit=lambda cfg: cfg) == []
    assert RESIZED >= 2


def test_the_header_counts_the_tasks_that_borrow_and_a_file_keeps_the_tasks(tmp_path):
    from types import SimpleNamespace

    known = _known_at({"k80": _conv(80)}, {"k80": [Config(0, ((2, 4), 3))]})
    tasks = [SimpleNamespace(workload_key="new", name=NAME, args=_conv(128), lowering=LOWERING),
             SimpleNamespace(workload_key="other", name="fused_add", args=_conv(128), lowering=LOWERING)]
    line = known.describe([t.workload_key for t in tasks], tasks=tasks)
    assert line.startswith("none of the 2 tasks") and "1 task borrows the known configs of the same layer" in line
    path = str(tmp_path / "known.jsonl.gz")
    known.write(path)
    again = KnownSchedules.read(path)
    assert again.tasks == known.tasks and again.layer_sources(NAME, _conv(128), LOWERING) == ["k80"]
    bare = KnownSchedules(known.by_key)  # a file written before tasks were kept: exact keys only
    bare.write(path)
    assert KnownSchedules.read(path).layer_sources(NAME, _conv(128), LOWERING) == []


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory, target):
    """The conv task of :func:`small_conv_onnx` at 28 x 28 and at 20 x 20 (one layer, two keys)."""
    from autosearch.frontend.importer import import_model
    from tests.conftest import small_conv_onnx

    out = []
    for hw in (28, 20):
        path = str(tmp_path_factory.mktemp("sizes") / f"conv{hw}.onnx")
        small_conv_onnx(path, hw=hw)
        out.append(next(t for t in import_model(path, target).tasks if "conv" in t.name))
    return out


def test_a_config_of_one_size_replays_on_the_other_and_a_foreign_one_does_not(two_sizes):
    import numpy as np

    from autosearch.search.space import DecisionSpace

    big, small = two_sizes
    assert big.workload_key != small.workload_key
    assert layer_key(big.name, big.args, big.lowering) == layer_key(small.name, small.args, small.lowering)
    big_space, small_space = DecisionSpace(big.mod, big.target), DecisionSpace(small.mod, small.target)
    rng = np.random.default_rng(0)
    moved = 0
    for _ in range(12):
        config = big_space.sample(rng)
        fitted = refit(small_space, config)
        assert fitted is not None and fitted.sketch == config.sketch and small_space.replayable(fitted)
        assert small_space.apply(fitted).ok
        moved += fitted != config
    assert moved  # some tiles of 28 are not tiles of 20
    first = big_space.default(0)
    assert refit(small_space, Config(first.sketch, first.values[:-1])) is None  # another decision count
    assert refit(small_space, Config(len(small_space.sketches), first.values)) is None


@pytest.mark.slow
def test_a_run_at_an_unmeasured_size_measures_the_other_sizes_best_first(tmp_path, two_sizes):
    """Known configs of the 28 x 28 convolution only: a run of the 20 x 20 one measures them, re-fitted, as its
    first trials (logged as known schedules), and the strategy's trials come after."""
    import numpy as np

    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog, read_log
    from autosearch.search.space import DecisionSpace
    from autosearch.search.tuner import Tuner

    big, small = two_sizes
    big_space, small_space = DecisionSpace(big.mod, big.target), DecisionSpace(small.mod, small.target)
    rng = np.random.default_rng(4)
    configs = []
    while len(configs) < 2:
        applied = big_space.apply(big_space.sample(rng))
        if applied.ok and applied.config not in configs:
            configs.append(applied.config)
    records = [Record(kind="trial", task_key=big.workload_key, task_name=big.name,
                      target={"kind": "llvm", "mcpu": "znver4"}, config=c,
                      result=MeasureResult(status=Status.OK, latencies=(1e-3 * (i + 1),)), flops=big.flops)
               for i, c in enumerate(configs)]
    known = KnownSchedules.from_records(records, tasks={big.workload_key: big.to_json()})
    expected = [refit(small_space, c) for c in configs]
    assert expected == known.for_layer(small.name, small.args, small.lowering, host_cpu="znver4",
                                       refit=lambda c: refit(small_space, c))
    runner = LocalRunner(target=small.target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5), run_timeout=10)
    path = str(tmp_path / "run.jsonl")
    try:
        with TuningLog(path) as log:
            Tuner(tasks=[small], runner=runner, log=log, strategy="random", budget=4, batch=4, seed=1,
                  known=known, finalist_rounds=0).run()
    finally:
        runner.close()
    trials = read_log(path).trials()
    assert [r.strategy for r in trials[:2]] == [SOURCE] * 2 and {r.strategy for r in trials[2:]} == {"random"}
    assert {r.config for r in trials[:2]} == {small_space.apply(c).config for c in expected}
    assert all(r.result.status == Status.OK for r in trials[:2])
    assert len(trials) == 4 == len({r.config for r in trials})
