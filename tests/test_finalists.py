"""The choice of each task's best kernel among its finalists is robust to one lucky measuring process.

The real runs build and measure real kernels; only the noise is scripted (it is not what is under test,
the choice is): a wrapper around the real LocalRunner rewrites one finalist's re-timed latencies, or
swaps in a crashing kernel, in chosen re-timing rounds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random

import pytest

from autosearch.ranking import score
from autosearch.records import TuningLog, read_log
from autosearch.search.finalists import contenders, rank, rotated
from autosearch.types import Config, MeasureResult, Record, Status
from tests.conftest import run_cli_here, small_conv_onnx


def _scaled(result: MeasureResult, median: float) -> MeasureResult:
    return dataclasses.replace(result, latencies=tuple(x * median / result.median for x in result.latencies))


class ScriptedRounds:
    """The real LocalRunner; in re-timing round ``self.round`` (one per ``refresh()``) the finalist picked
    by ``pick`` (from the finalists' in-run medians) is measured as ``script(round, ...)`` says."""

    name = "scripted"

    def __init__(self, runner, *, pick, script) -> None:
        self.runner, self.pick, self.script = runner, pick, script
        self.round = 0  # 0 while tuning; n in the n-th re-timing round
        self.in_run: dict[str, float] = {}  # a trial's module (TVM JSON) -> its in-run median (s)
        self.picked: str | None = None
        # this round's scripted results: a timing the machine disturbed is asked for again after its round's batch,
        # and gets what the script gave it (the script is the noise under test, not the machine's)
        self.this_round: dict[str, MeasureResult] = {}

    def prepare(self, task):
        return self.runner.prepare(task)

    def prepare_many(self, tasks, *, meanwhile=None):
        return self.runner.prepare_many(tasks, meanwhile=meanwhile)

    def refresh(self) -> None:
        self.round += 1
        self.this_round = {}
        self.runner.refresh()

    def close(self) -> None:
        self.runner.close()

    def measure(self, task, mods):
        import tvm

        keys = [tvm.ir.save_json(m) for m in mods]
        if self.round == 0:
            results = self.runner.measure(task, mods)
            self.in_run.update({k: r.median for k, r in zip(keys, results) if r.ok})
            return results
        assert all(k in self.in_run for k in keys), "finalists are re-timed as the modules measured in the run"
        if self.this_round and all(k in self.this_round for k in keys):
            return [self.this_round[k] for k in keys]
        self.picked = self.pick(keys, self.in_run)
        results = self.script(self.round, self, task, keys, mods)
        self.this_round = dict(zip(keys, results))
        return results


def _lucky_in(lucky_round: int):
    """The picked finalist is twice as slow as the slowest other finalist of each round, except in
    ``lucky_round``, whose process reports it at half the fastest."""

    def script(round_no, wrapper, task, keys, mods):
        results = wrapper.runner.measure(task, mods)
        others = [r.median for k, r in zip(keys, results) if k != wrapper.picked]
        target = 0.5 * min(others) if round_no == lucky_round else 2.0 * max(others)
        return [_scaled(r, target) if k == wrapper.picked else r for k, r in zip(keys, results)]

    return script


def _crashes_in(crash_round: int):
    """The picked finalist crashes the measuring process in ``crash_round`` (a real crashing kernel); in
    every other round it is reported at half the fastest other finalist, so it would win on timings."""
    from tests.faulty_kernels import FAULTS

    def script(round_no, wrapper, task, keys, mods):
        if round_no == crash_round:
            return wrapper.runner.measure(task, [FAULTS["crash"] if k == wrapper.picked else m
                                                 for k, m in zip(keys, mods)])
        results = wrapper.runner.measure(task, mods)
        fastest = min(r.median for k, r in zip(keys, results) if k != wrapper.picked)
        return [_scaled(r, 0.5 * fastest) if k == wrapper.picked else r for k, r in zip(keys, results)]

    return script


def _chosen(state) -> Config | None:
    return next((c for c, r in state.measured.items() if r is state.best), None)


def _tune(path: str, conv_task, wrapper_args: dict | None, *, budget: int = 8, rounds: int = 3):
    """``budget`` real trials of the small conv (continuing the log at ``path`` if there is one), then
    ``rounds`` re-timing rounds, through a ScriptedRounds runner if ``wrapper_args``. Returns the
    tuner's final state of the task, its choice after each scripted round and the log read back."""
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.search.tuner import Tuner

    local = LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5))
    runner = ScriptedRounds(local, **wrapper_args) if wrapper_args else local
    choices: dict[int, Config | None] = {}

    def on_event(event):
        if event.phase == "retime" and wrapper_args:
            choices[runner.round] = _chosen(event.task)

    resume = read_log(path) if os.path.exists(path) else None
    try:
        with TuningLog(path, resume=resume is not None) as log:
            summary = Tuner(tasks=[conv_task], runner=runner, log=log, strategy="random", budget=budget, batch=4,
                            seed=2, finalist_rounds=rounds, resume=resume, on_event=on_event).run()
    finally:
        runner.close()
    assert summary.trials == budget and not summary.interrupted
    [state] = summary.states
    return state, choices, read_log(path)


def _finalists(contents, key, n=3) -> list[Config]:
    return [r.config for r in sorted((r for r in contents.trials(key) if r.ok), key=lambda r: r.latency)[:n]]


def test_one_lucky_process_does_not_choose_the_best(tmp_path, conv_task):
    def slowest(keys, in_run):
        return max(keys, key=in_run.__getitem__)

    state, choices, contents = _tune(str(tmp_path / "run.jsonl"), conv_task, {"pick": slowest, "script": _lucky_in(1)})
    key = conv_task.workload_key
    finalists = _finalists(contents, key)
    victim = finalists[-1]  # the slowest finalist in its trial, and in every round but the lucky first
    retimes = contents.retimes(key)
    by_round = {n: [r.config for r in retimes if r.round == n] for n in (1, 2, 3)}
    assert len(retimes) == sum(map(len, by_round.values())) and {r.round for r in retimes} == {1, 2, 3}
    assert by_round[1] == finalists and by_round[2] == rotated(finalists, 1), "every finalist, in rotated order"
    # lucky once, slowest once: the victim can still win in round 3, which measures only those that can
    assert victim in by_round[3] and set(by_round[3]) <= set(finalists)

    lucky = {r.config: r.latency for r in retimes if r.round == 1}
    assert min(lucky, key=lucky.get) == victim, "the scripted lucky process reports the slower finalist fastest"
    assert choices[1] == victim, "on one process (the old rule, --finalist-rounds 1) the lucky finalist wins"
    assert choices[3] != victim and _chosen(state) == choices[3], "over three processes it does not"
    assert contents.best(key).config == _chosen(state), "the log (export, report) chooses as the tuner did"
    assert state.finalist_results and all(r.ok for _, r in state.finalist_results)
    # its re-timed latency is its score over the rounds, not its trial's (the minimum the run picked it by)
    assert state.best_retimed == pytest.approx(score(r.result for r in retimes if r.config == _chosen(state)))
    assert state.best_retimed != state.best.median


def test_a_finalist_that_crashes_in_one_round_is_never_best_nor_after_a_resume(tmp_path, conv_task):
    def fastest(keys, in_run):
        return min(keys, key=in_run.__getitem__)

    path = str(tmp_path / "run.jsonl")
    # one batch of 4 trials, its 3 finalists re-timed in 3 rounds: the favourite crashes in the second
    state, choices, contents = _tune(path, conv_task, {"pick": fastest, "script": _crashes_in(2)}, budget=4)
    key = conv_task.workload_key
    favourite = _finalists(contents, key)[0]
    crashed = [r for r in contents.retimes(key) if not r.ok]
    assert [(r.config, r.round, r.result.status) for r in crashed] == [(favourite, 2, Status.WORKER_CRASHED)]
    assert choices[1] == favourite, "fastest in the round before its crash"
    assert favourite not in {r.config for r in contents.retimes(key) if r.round == 3}, "out after its crash"
    assert all(choices[n] != favourite for n in choices if n > 1) and _chosen(state) == choices[max(choices)]
    assert state.best is not None and state.best.ok
    assert favourite not in [r.config for r in contents.ranked(key)], "never exported either"
    assert contents.best(key).config == _chosen(state)

    # --resume with 4 more trials: new finalists, re-timed afresh (2 rounds, no scripted noise); the crash stays
    state, _, contents = _tune(path, conv_task, None, budget=8, rounds=2)
    last_trial = max(i for i, r in enumerate(contents.records) if r.kind == "trial")
    new_retimes = [r for r in contents.records[last_trial:] if r.kind == "retime"]
    eligible = [c for c in _finalists(contents, key, n=4) if c != favourite][:3]
    assert [r.config for r in new_retimes if r.round == 1] == eligible, "the crashed kernel is no finalist again"
    assert favourite not in [r.config for r in contents.ranked(key)] and _chosen(state) != favourite
    assert contents.best(key).config == _chosen(state), "tuner and log agree after the resume"
    evidence = sorted((c, r.status.value, r.latencies) for c, r in state.finalist_results)
    assert evidence == sorted([(favourite, "worker_crashed", ())] + [(r.config, r.result.status.value,
                                                                       r.result.latencies) for r in new_retimes]), \
        "the evidence: the old crash and the new rounds, none of the old timings"


# ---------------------------------------------------------------------------------------------- the rule
def _result(*medians_ms: float, status: Status = Status.OK) -> list[MeasureResult]:
    return [MeasureResult(status, (m * 1e-3,) if status is Status.OK else (), error="" if status is Status.OK
                          else "boom") for m in medians_ms]


def test_median_over_rounds_ignores_one_lucky_process():
    x, y, z = Config(0, (1,)), Config(0, (2,)), Config(0, (3,))
    in_run = {x: 6.09e-3, y: 4.47e-3, z: 4.60e-3, Config(0, (4,)): 5.0e-3}
    rounds = [(x, r) for r in _result(4.50, 6.8, 6.9)] + [(y, r) for r in _result(4.55, 4.50, 4.60)] \
        + [(z, r) for r in _result(4.70, 4.80, 4.75)]
    assert rank(in_run, rounds[:1] + rounds[3:4] + rounds[6:7])[0] == x  # first round alone: the lucky one
    assert rank(in_run, rounds) == [y, z, x, Config(0, (4,))]
    crashed = rounds + [(y, _result(1.0, status=Status.WORKER_CRASHED)[0])]
    assert rank(in_run, crashed) == [z, x, Config(0, (4,))], "a finalist that failed a round is out"


def test_a_finalist_that_cannot_win_is_not_measured_again_and_the_choice_is_the_same():
    """Skipping the rounds that cannot change the choice (``contenders``) chooses what all rounds would."""
    rng = random.Random(0)
    finalists = [Config(0, (i,)) for i in range(4)]
    in_run = {c: 1e-3 for c in finalists}
    skipped = 0
    for _ in range(300):
        true = {c: rng.uniform(1.0, 1.3) for c in finalists}
        rounds = [[(c, _result(true[c] * rng.uniform(0.8, 1.25))[0]) for c in finalists] for _ in range(3)]
        alive = contenders(rounds[0] + rounds[1], finalists, 1)
        assert alive, "someone can always still win"
        third = [(c, r) for c, r in rounds[2] if c in alive] if len(alive) > 1 else []
        skipped += len(finalists) - len(third)
        assert rank(in_run, rounds[0] + rounds[1] + third)[0] == rank(in_run, sum(rounds, []))[0]
    assert skipped > 300, "the third round is often cheaper"
    lead, mid, last = finalists[:3]
    two_rounds = [(lead, r) for r in _result(1.0, 1.1)] + [(mid, r) for r in _result(1.05, 1.3)] \
        + [(last, r) for r in _result(1.2, 1.4)]
    assert contenders(two_rounds, [lead, mid, last], 1) == [lead, mid], "last is behind lead in both rounds"
    assert contenders(two_rounds, [lead, mid, last], 2) == [lead, mid, last], "two more rounds: anyone can win"
    assert contenders(two_rounds + [(mid, _result(1.0, status=Status.RUN_ERROR)[0])], [lead, mid, last], 1) == [lead]


def _line(kind: str, config: Config, ms: float, status: Status = Status.OK, **extra) -> str:
    rec = Record(kind=kind, task_key="k", task_name="conv", target={"kind": "llvm"}, config=config,
                 result=_result(ms, status=status)[0], flops=1e6, **extra)
    return json.dumps(rec.to_json())


def test_resumed_log_counts_the_timings_after_the_last_trial_and_every_failure(tmp_path):
    a, b, c, d, f = (Config(0, (i,)) for i in range(5))
    first_run = [_line("trial", cfg, ms, trial=i) for i, (cfg, ms) in enumerate(((a, 1.0), (b, 1.1), (c, 1.2)), 1)]
    # a finalize as logged before rounds existed (round 0 is not written): b crashed, c re-timed fastest
    old_finalize = [_line("retime", a, 1.3), _line("retime", b, 0, Status.WORKER_CRASHED), _line("retime", c, 0.5)]
    resumed = [_line("trial", d, 0.9, trial=4), _line("trial", f, 0.95, trial=5)]
    new_finalize = [_line("retime", cfg, ms, round=n) for n in (1, 2, 3)
                    for cfg, ms in ((d, 0.92), (f, 0.97), (a, 1.02))]
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(first_run + old_finalize) + "\n")
    old = read_log(str(path))
    assert not old.corrupt and {r.round for r in old.retimes("k")} == {0} and '"round"' not in path.read_text()
    assert [r.config for r in old.ranked("k")] == [c, a], "an older log still reads; the crashed b is out"
    path.write_text("\n".join(first_run + old_finalize + resumed + new_finalize) + "\n")
    new = read_log(str(path))
    assert [r.round for r in new.retimes("k")] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [r.config for r in new.ranked("k")] == [d, f, a, c], \
        "c's timing from before the resume is stale (c ranks by its trial), b's crash still counts"


def test_finalist_rounds_flag_rejects_a_negative_count(tmp_path, capfd):
    model = str(tmp_path / "small.onnx")
    small_conv_onnx(model)
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", model, "--finalist-rounds", "-1",
                        "--log", str(tmp_path / "x.jsonl"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "--finalist-rounds" in lines[0], proc.stderr


def test_only_tasks_worth_it_are_re_timed_and_without_a_rebuild(tmp_path, small_model, monkeypatch):
    """Finalists are re-timed only for tasks with at least ``FINALIST_MIN_SHARE`` of the model's estimated
    latency; the others keep their in-run best (and export it)."""
    import autosearch.search.tuner as tuner_module
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.search.tuner import Tuner

    monkeypatch.setattr(tuner_module, "FINALIST_MIN_SHARE", 0.5)  # the conv is most of this model, the pool not
    tasks = small_model.tasks
    runner = LocalRunner(target=tasks[0].target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5))
    path = str(tmp_path / "run.jsonl")
    try:
        with TuningLog(path) as log:
            summary = Tuner(tasks=tasks, runner=runner, log=log, strategy="random", budget=12, batch=4, seed=0,
                            finalist_rounds=2).run()
    finally:
        runner.close()
    share = {s.task.workload_key: s.task.weight * s.model_seconds for s in summary.states}
    total = sum(share.values())
    contents = read_log(path)
    retimed = {key for key in share if contents.retimes(key)}
    assert retimed == {key for key, seconds in share.items() if seconds >= 0.5 * total}
    assert len(retimed) == 1 and len(share) == 2
    assert all(sum(r.ok for r in s.measured.values()) > 1 for s in summary.states), "each has finalists to re-time"
    [key] = retimed
    assert all(r.result.build_secs == 0.0 for r in contents.retimes(key)), "finalists load their kept builds"
    assert all(r.result.build_secs > 0.0 for r in contents.trials(key) if r.ok)
    for s in summary.states:  # the task not re-timed keeps its fastest in-run measurement
        if s.task.workload_key not in retimed:
            assert s.best is not None and s.best.median == min(r.median for r in s.measured.values() if r.ok)


def test_the_layouts_that_can_still_win_are_re_timed():
    from autosearch.search.finalists import LAYOUT_RETIME_MARGIN, contending_layouts

    assert contending_layouts({"NCHW": 20.7e-3, "NHWC": 21.4e-3}) == ["NCHW", "NHWC"]
    assert contending_layouts({"NCHW": 22.8e-3, "NHWC": 5.1e-3}) == ["NHWC"]  # bf16 on AMX: NCHW far behind
    assert contending_layouts({"NCHW": LAYOUT_RETIME_MARGIN * 1.01, "NHWC": 1.0}) == ["NHWC"]
    assert contending_layouts({"NCHW": float("inf"), "NHWC": 1.0}) == ["NHWC"]
    assert contending_layouts({}) == [None]  # one model


def test_export_keeps_the_layout_whose_model_is_faster_re_timed_not_as_tuned(tmp_path):
    """A layout's model read from its best trials is the sum of each task's luckiest timing. The NCHW model here
    is the faster as tuned (2.0 against 2.2 ms) and the slower re-timed (2.5 against 2.25): export keeps NHWC,
    with the re-timed totals, and a task never re-timed counts its in-run best."""
    from autosearch.deploy.database import lowering_of

    a, b = Config(0, (1,)), Config(0, (2,))
    lines = []
    for key, layout in (("c", "NCHW"), ("h", "NHWC")):
        lowering = {"winograd": "auto", "layout": "auto", "fast_math": "on", "precision": "fp32", "layouts": [layout]}
        lines.append(json.dumps({"v": 1, "kind": "task", "task": {"name": f"conv_{layout}", "weight": 1,
                                                                   "workload_key": key, "lowering": lowering}}))

    def line(kind: str, key: str, config: Config | None, ms: float, **extra) -> str:
        rec = Record(kind=kind, task_key=key, task_name="conv", target={"kind": "llvm"}, config=config,
                     result=_result(ms)[0], flops=1e6, **extra)
        return json.dumps(rec.to_json())

    lines += [line("baseline", key, None, 10.0) for key in "ch"]
    lines += [line("trial", "c", a, 2.0, trial=1), line("trial", "c", b, 2.4, trial=2),
              line("trial", "h", a, 2.2, trial=1), line("trial", "h", b, 2.3, trial=2)]
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    as_tuned = read_log(str(path))
    assert as_tuned.best_seconds("c") == pytest.approx(2.0e-3) and lowering_of(as_tuned)["layout"] == "NCHW"
    lines += [line("retime", key, cfg, ms, round=n) for n in (1, 2, 3)
              for key, cfg, ms in (("c", a, 2.5), ("c", b, 2.6), ("h", a, 2.25))]
    path.write_text("\n".join(lines) + "\n")
    retimed = read_log(str(path))
    assert retimed.best_seconds("c") == pytest.approx(2.5e-3) and retimed.best_seconds("h") == pytest.approx(2.25e-3)
    lowering = lowering_of(retimed)
    assert lowering["layout"] == "NHWC" and lowering["layout_totals"] == pytest.approx({"NCHW": 2.5e-3,
                                                                                       "NHWC": 2.25e-3})


def test_finalists_come_from_each_model_re_timed_each_task_once():
    """Both layouts' models close: the heavy tasks of each are re-timed, a task both models run once, and a task
    under ``min_share`` of its model not at all."""
    from autosearch.frontend.task import TuningTask
    from autosearch.search.finalists import Retiming
    from autosearch.search.scheduler import TaskState

    def state(key: str, layouts: list[str], ms: float) -> TaskState:
        task = TuningTask(index=0, name=key, weight=1, flops=1e9, mod=None, target=None, args=(), workload_key=key,
                          lowering={"layout": "auto", "layouts": layouts})
        s = TaskState(task=task, space=object())
        for i, factor in enumerate((1.0, 1.1, 1.2)):
            s.record(Config(0, (i,)), MeasureResult(Status.OK, (ms * factor * 1e-3,)))
        return s

    states = [state("c", ["NCHW"], 2.0), state("h", ["NHWC"], 2.2), state("t", ["NHWC"], 0.001),
              state("shared", ["NCHW", "NHWC"], 1.0)]
    retiming = Retiming(top=2, rounds=1, min_share=0.01, measure=None, append=None)
    chosen = retiming.finalists(states, ["NCHW", "NHWC"])
    assert [s.task.workload_key for s, _ in chosen] == ["c", "h", "shared"]
    assert all(len(top) == 2 for _, top in chosen)
    assert [s.task.workload_key for s, _ in retiming.finalists(states, ["NHWC"])] == ["h", "shared"]


def test_a_convolution_leading_its_layer_is_re_timed_though_its_model_is_far_behind():
    """fp32 ``--layout auto``: export may keep one layout per convolution, comparing each layer's re-timed costs, so a
    layer the slower model leads is re-timed with the faster model's tasks (a task below ``min_share`` of the faster
    model still is not); in the tuning loop the leaders come from the scheduler's per-layer race."""
    from autosearch.frontend.task import TuningTask
    from autosearch.search.finalists import Retiming
    from autosearch.search.scheduler import TaskScheduler, TaskState

    def conv(key: str, layout: str, ms: float, cin: int = 16) -> TaskState:
        shapes = (((1, cin, 8, 8), (32, cin, 3, 3), (1, 32, 8, 8)) if layout == "NCHW" else
                  ((1, 8, 8, cin), (32, 3, 3, cin), (1, 8, 8, 32)))
        task = TuningTask(index=0, name=f"fused_conv2d_{key}", weight=1, flops=1e9, mod=None, target=None,
                          args=tuple((s, "float32") for s in shapes), workload_key=key,
                          lowering={"layout": "auto", "layouts": [layout]})
        s = TaskState(task=task, space=object())
        for i, factor in enumerate((1.0, 1.1, 1.2)):
            s.record(Config(0, (i,)), MeasureResult(Status.OK, (ms * factor * 1e-3,)))
        return s

    # NCHW 2x behind as a model (8 ms against 4), yet its first layer 1 ms against NHWC's 2
    states = [conv("a-nchw", "NCHW", 1.0), conv("b-nchw", "NCHW", 7.0, cin=8), conv("a-nhwc", "NHWC", 2.0),
              conv("b-nhwc", "NHWC", 2.0, cin=8), conv("tiny-nchw", "NCHW", 0.001, cin=4),
              conv("tiny-nhwc", "NHWC", 0.002, cin=4)]
    by_layer = TaskScheduler(states, budget=100).layer_layout_costs()
    leaders = [s for s in states if by_layer[id(s)][0] <= by_layer[id(s)][1]]
    assert [s.task.workload_key for s in leaders] == ["a-nchw", "b-nhwc", "tiny-nchw"]
    retiming = Retiming(top=2, rounds=1, min_share=0.01, measure=None, append=None)
    assert [s.task.workload_key for s, _ in retiming.finalists(states, ["NHWC"])] == ["a-nhwc", "b-nhwc"]
    chosen = retiming.finalists(states, ["NHWC"], leaders)
    assert [s.task.workload_key for s, _ in chosen] == ["a-nchw", "a-nhwc", "b-nhwc"]
