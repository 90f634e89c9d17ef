"""Sibling tasks: one convolution's loop nest fused with two epilogues, found as siblings and lending each other
their best configs in a real run with ``siblings=True`` (the lent trials logged as such); off by default."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosearch.search.scheduler import TaskState
from autosearch.search.siblings import SOURCE, best_config, group, lent, sibling_key
from autosearch.types import MeasureResult, Status


def twin_convs_onnx(path: str) -> None:
    """x -> conv A + relu -> a; a -> conv B + relu, + a -> y: two 3x3 convolutions of one geometry (16 -> 16
    channels at 16 x 16), the second fused with a residual add as well, and a 1x1 convolution of another."""
    rng = np.random.default_rng(0)

    def weight(name, k):
        return numpy_helper.from_array((rng.standard_normal((16, 16, k, k)) * 0.1).astype("float32"), name)

    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "A"], ["ca"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["ca"], ["a"]),
            helper.make_node("Conv", ["a", "B"], ["cb"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["cb"], ["b"]),
            helper.make_node("Add", ["b", "a"], ["s"]),
            helper.make_node("Conv", ["s", "C"], ["y"]),
        ],
        "twin_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
        [weight("A", 3), weight("B", 3), weight("C", 1)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    import autosearch

    path = str(tmp_path_factory.mktemp("twins") / "twins.onnx")
    twin_convs_onnx(path)
    imported = autosearch.load_tasks(path, layout="NCHW", winograd="off", precision="fp32")
    return path, imported.tasks


def _result(seconds: float) -> MeasureResult:
    return MeasureResult(status=Status.OK, latencies=(seconds,) * 3)


def test_the_two_epilogues_of_one_convolution_are_siblings_and_nothing_else_is(twins):
    _, tasks = twins
    convs = [t for t in tasks if "conv2d" in t.name]
    assert len(convs) == 3, [t.name for t in tasks]
    wide = [t for t in convs if t.args[1][0][2] == 3]  # the two 3x3 ones
    assert len(wide) == 2 and wide[0].workload_key != wide[1].workload_key  # two tasks, two keys
    assert sibling_key(wide[0]) == sibling_key(wide[1]) is not None
    [narrow] = [t for t in convs if t not in wide]
    assert sibling_key(narrow) != sibling_key(wide[0])
    states = [TaskState(task=t) for t in tasks]
    siblings = group(states)
    paired = {s.task.name for s in states if id(s) in siblings}
    assert paired == {t.name for t in wide}
    for state in states:
        for other in siblings.get(id(state), []):
            assert other is not state and other.task in wide


def test_a_sibling_ahead_lends_its_best_once_and_one_behind_lends_nothing(twins):
    from autosearch.search.space import DecisionSpace

    _, tasks = twins
    first, second = [TaskState(task=t) for t in tasks if "conv2d" in t.name and t.args[1][0][2] == 3]
    for state in (first, second):
        state.space = DecisionSpace(state.task.mod, state.task.target)
        state.baseline = _result(1e-2)
    rng = np.random.default_rng(0)
    configs = [a.config for a in first.space.sample_applied(rng, 4)]
    assert len(set(configs)) == 4 and all(second.space.replayable(c) for c in configs)  # they replay on both
    for config, seconds in zip(configs, (3e-4, 1e-4, 2e-4)):
        first.record(config, _result(seconds))
    assert best_config(first) == configs[1]
    assert lent(second, [first]) == configs[1]  # nothing measured here yet: the sibling is ahead
    second.record(configs[0], _result(5e-4))
    assert lent(second, [first]) == configs[1]  # still ahead
    assert lent(first, [second]) is None  # first is ahead of second: nothing to borrow
    second.asked[configs[1]] = configs[1]  # asked for (or measured): not lent again
    assert lent(second, [first]) is None
    del second.asked[configs[1]]
    second.record(configs[3], _result(5e-5))  # second overtook its sibling, with a config first never measured
    assert lent(second, [first]) is None
    assert lent(first, [second]) == configs[3]
    second.baseline = _result(1e-4)  # relative to its untuned kernel second is now behind (0.5 against 0.01)
    assert lent(second, [first]) == configs[1] and lent(first, [second]) is None
    first.baseline = MeasureResult(status=Status.RUN_TIMEOUT)  # no untuned timing to compare by: latencies decide
    assert lent(second, [first]) is None and lent(first, [second]) == configs[3]


def test_a_run_lends_siblings_trials_and_by_default_each_task_searches_alone(twins, tmp_path):
    import autosearch
    from autosearch.records import read_log

    path, tasks = twins
    logs = {}
    for siblings in (True, False):
        log = str(tmp_path / f"siblings-{siblings}.jsonl")
        result = autosearch.tune(path, strategy="random", trials=30, batch=5, log=log, seed=2, layout="NCHW",
                                 winograd="off", precision="fp32", known_schedules="none",
                                 **({"siblings": True} if siblings else {}),  # off by default
                                 finalist_rounds=0, plot=False,
                                 measure=autosearch.MeasureOptions(repeat=3, min_repeat_ms=5))
        assert not result.interrupted
        logs[siblings] = read_log(log)
    on, off = logs[True], logs[False]
    assert not [r for r in off.trials() if r.strategy == SOURCE]
    lent_trials = [r for r in on.trials() if r.strategy == SOURCE]
    assert lent_trials, "no sibling lent a config in 30 trials"
    names = {t.workload_key: t.name for t in tasks}
    for rec in lent_trials:
        assert "conv2d" in names[rec.task_key]
        # the config was measured on the sibling before, and there it was the best valid one at the time
        [sibling] = [t.workload_key for t in tasks if t.workload_key != rec.task_key and "conv2d" in t.name
                     and sibling_key(t) == sibling_key(next(x for x in tasks if x.workload_key == rec.task_key))]
        before = [r for r in on.trials(sibling) if r.trial < rec.trial and r.result.ok]
        assert before and min(before, key=lambda r: r.result.median).config == rec.config
    trials = on.trials()
    assert len(trials) == 30 and len({(r.task_key, r.config) for r in trials}) == 30  # budget kept, none twice
