"""The task scheduler on synthetic task states: warm-up shares, the plan of a time-limited run, Ansor's gradient,
and the rivalry of alternatives the model runs only one of. Nothing is built or measured."""

from __future__ import annotations

import time

import pytest

from autosearch.frontend.task import TuningTask
from autosearch.records import TuningLog
from autosearch.search.scheduler import (
    BEHIND_LIMIT,
    LATE_LAYOUT_LIMIT,
    MIN_FIRST_PASS,
    NARROWING,
    PLANNED_TRIALS_PER_CORE_MINUTE,
    TaskScheduler,
    TaskState,
)
from autosearch.search.tuner import Tuner
from autosearch.types import Config, MeasureResult, Status


def _task(i: int, flops: float = 1e9, **lowering) -> TuningTask:
    return TuningTask(index=i, name=f"t{i}", weight=1, flops=flops, mod=None, target=None, args=(),
                      workload_key=str(i), **({"lowering": lowering} if lowering else {}))


def _ok(secs: float) -> MeasureResult:
    return MeasureResult(Status.OK, (secs,))


def _scheduler(tasks, **kw) -> TaskScheduler:
    return TaskScheduler([TaskState(task=t) for t in tasks], **kw)


def test_first_pass_follows_the_flops_share():
    """The warm-up budget goes to the heavy tasks; FLOP-less copies get the minimum."""
    scheduler = _scheduler([_task(0, 3e9), _task(1, 1e9)] + [_task(i, 0.0) for i in range(2, 22)],
                           budget=400, batch=16)
    firsts = [scheduler.first_pass(s) for s in scheduler.states]
    assert firsts[0] == 16 and firsts[1] == 16  # capped at one batch
    assert all(f == MIN_FIRST_PASS for f in firsts[2:])
    assert sum(firsts) <= 200


def test_a_time_limit_alone_plans_the_warm_up_for_the_trials_it_should_hold():
    """With ``seconds`` and no trial budget the warm-up is sized for the trials the limit should hold: at the prior
    pace per build core first, then at the run's own pace."""
    tasks = [_task(i, 1e9 * (i + 1)) for i in range(40)]
    timed = _scheduler(tasks, seconds=600, batch=16, cores=2)
    counted = _scheduler(tasks, budget=timed.planned, batch=16, cores=2)
    assert timed.planned == 10 * PLANNED_TRIALS_PER_CORE_MINUTE * 2 and timed.budget is None
    assert [timed.first_pass(s) for s in timed.states] == [counted.first_pass(s) for s in counted.states]
    # after a minute of 120 measured trials the run's own pace plans the rest: 2 a second for 540 s more
    for n in range(120):
        timed.states[n % 3].record(Config(0, (n,)), _ok(1e-3))
    timed.started = time.perf_counter() - 60
    assert timed.planned == pytest.approx(120 + 2 * 540, abs=3)


def test_with_a_budget_and_a_time_limit_the_one_that_runs_out_first_plans_and_prices_the_run():
    """The quick start's 400 trials or 10 minutes: on a machine fast enough for the trials the warm-up is planned
    for the budget and the gradient counts trials; on one where the minutes come first the warm-up is planned for
    the trials they hold, and the gradient counts seconds, so a task whose trials cost 4x gets less."""
    tasks = [_task(i, 1e9 * (i + 1)) for i in range(40)]
    fast, slow = (_scheduler(tasks, budget=400, seconds=600, batch=16, cores=2) for _ in range(2))
    for scheduler, pace in ((fast, 2.0), (slow, 0.6)):  # trials per second over the first minute
        for n in range(int(60 * pace)):
            scheduler.states[n % 40].record(Config(0, (n,)), _ok(1e-3))
        scheduler.started = time.perf_counter() - 60
    assert fast.planned == 400 and not fast.time_binds()  # 120 + 2 x 540 would be 1,200: the budget caps it
    assert slow.planned == pytest.approx(36 + 0.6 * 540, abs=3) and slow.time_binds()
    assert [slow.first_pass(s) for s in slow.states] == [
        _scheduler(tasks, budget=slow.planned, batch=16, cores=2).first_pass(s) for s in slow.states]
    for pace, chosen in ((2.0, 1), (0.6, 0)):  # a task twice as slow, its trials four times as costly
        scheduler = _scheduler([_task(0), _task(1)], budget=400, seconds=600, batch=16, cores=2)
        cheap, costly = scheduler.states
        n = int(60 * pace) // 2
        for i in range(n):
            cheap.record(Config(0, (i,)), _ok(1e-3))
            costly.record(Config(0, (i,)), _ok(2e-3))
        for state, seconds in ((cheap, 1.0), (costly, 4.0)):
            state.warm_up, state.seconds, state.timed_trials = 2, seconds * n, n
        scheduler.started = time.perf_counter() - 60
        assert scheduler.next_task() is scheduler.states[chosen]


def test_a_scheduler_needs_a_budget_or_a_time_limit_and_so_does_the_tuner(tmp_path):
    with pytest.raises(ValueError):
        _scheduler([_task(0)])
    with pytest.raises(ValueError):
        _scheduler([_task(0)], seconds=0)
    with TuningLog(str(tmp_path / "l.jsonl")) as log:
        with pytest.raises(ValueError):
            Tuner(tasks=[_task(0)], runner=None, log=log, strategy="random")


def test_a_batch_never_goes_beyond_the_budget():
    scheduler = _scheduler([_task(0)], budget=5, batch=16)
    [state] = scheduler.states
    assert scheduler.next_round() == (state, 2) and scheduler.first_pass(state) == 2  # half the budget warms up
    for n in range(2):
        state.record(Config(0, (n,)), _ok(1e-3))
    assert scheduler.next_round() == (state, 3) and scheduler.has_budget()  # a batch, cut to the budget left
    for n in range(2, 5):
        state.record(Config(0, (n,)), _ok(1e-3))
    assert not scheduler.has_budget()


def test_scheduler_moves_on_from_a_heavy_task_whose_best_stays_flat():
    """Ansor's forward gradient fades with a task's trials: a heavy task stuck at its best for hundreds
    of trials yields the next batch to a lighter task that has had few (and an improving task wins)."""
    scheduler = _scheduler([_task(0), _task(1)], budget=1000, batch=16)
    heavy, light = scheduler.states
    for n in range(400):  # 16 ms, flat after the first trial
        heavy.record(Config(0, (n,)), _ok(16e-3 if n == 0 else 30e-3))
    for n in range(32):  # 4 ms, also flat
        light.record(Config(0, (n,)), _ok(4e-3 if n == 0 else 9e-3))
    for s in scheduler.states:
        s.warm_up = 2  # both warmed up
    assert scheduler.next_task() is light
    for n in range(32, 400):
        light.record(Config(0, (n,)), _ok(9e-3))
    assert scheduler.next_task() is heavy  # equal trials: the heavier task again
    heavy.record(Config(0, (10_000,)), _ok(8e-3))  # the heavy task improves: its backward term grows
    for n in range(400, 430):
        light.record(Config(0, (n,)), _ok(9e-3))
    assert scheduler.next_task() is heavy


def test_a_task_that_only_moves_data_stops_taking_batches_once_its_best_stays_flat():
    """A copy has no FLOPs, so its GFLOPS stay 0 whatever it gains: judged by GFLOPS its recent improvement never
    faded, and YOLOv8n's output concatenation took 754 of a run's 4,251 trials, 589 of them after its last gain.
    Judged by latency it is flat like any other task, and a convolution with fewer trials gets the batch."""
    scheduler = _scheduler([_task(0, 0.0), _task(1, 1e9)], budget=2000, batch=16)
    copy, conv = scheduler.states
    for n in range(200):  # 0.6 ms after its 30th trial, no gain since
        copy.record(Config(0, (n,)), _ok(0.6e-3 if n >= 30 else 1.5e-3))
    for n in range(80):  # 0.3 ms, flat
        conv.record(Config(0, (n,)), _ok(0.3e-3))
    for s in scheduler.states:
        s.warm_up = 2
    assert copy.expected_gain(window=32) < conv.expected_gain(window=32)
    assert scheduler.next_task() is conv


def test_scheduler_gives_less_to_the_slower_alternative_of_a_layer():
    """A layer tuned both ways runs its faster alternative: the slower one's gain is scaled down."""
    scheduler = _scheduler([_task(0, winograd="auto", layer="L", algorithm="direct"),
                            _task(1, winograd="auto", layer="L", algorithm="winograd")], budget=1000, batch=16)
    direct, wino = scheduler.states
    for n in range(64):
        direct.record(Config(0, (n,)), _ok(10e-3))
        wino.record(Config(0, (n,)), _ok(4e-3))
    for s in scheduler.states:
        s.warm_up = 2
    assert scheduler.rivalry() == {id(direct): pytest.approx(0.16)}
    assert scheduler.next_task() is wino


def _play(scheduler: TaskScheduler, latency, rounds: int) -> list[tuple[str, int]]:
    """``rounds`` rounds of ``next_round``, each trial measured at ``latency(task name)``: (task, batch) per round."""
    played = []
    for _ in range(rounds):
        picked = scheduler.next_round()
        if picked is None:
            break
        state, n = picked
        for _ in range(n):
            state.record(Config(0, (state.trials,)), _ok(latency(state.task.name)))
        played.append((state.task.name, n))
    return played


def test_an_alternative_far_behind_after_its_probe_gets_no_more_warm_up():
    """Every task is probed first; the layout 4.3x behind after the probes is dropped (no more warm-up, no batch
    from the gradient, where its few trials would give it the largest optimistic gain), while the task both
    layouts run and the leading layout's tasks warm up in full."""
    tasks = [_task(0, 4e9, layout="auto", layouts=["NCHW"]), _task(1, 4e9, layout="auto", layouts=["NHWC"]),
             _task(2, 4e9, layout="auto", layouts=["NCHW", "NHWC"])]
    scheduler = _scheduler(tasks, budget=1000, batch=16)
    nchw, nhwc, shared = scheduler.states
    assert [scheduler.is_alternative(s) for s in scheduler.states] == [True, True, False]
    played = _play(scheduler, lambda name: {"t0": 12e-3, "t1": 2e-3, "t2": 1e-3}[name], rounds=4)
    first = scheduler.first_pass(nhwc)
    assert first > MIN_FIRST_PASS
    # the probes: the first-named layout's model (NCHW: its own task and the shared one), then NHWC's
    assert played[:3] == [("t0", MIN_FIRST_PASS), ("t2", first), ("t1", MIN_FIRST_PASS)]
    assert played[3] == ("t1", first - MIN_FIRST_PASS)  # the rest of the leader's warm-up, not NCHW's
    assert scheduler.rivalry()[id(nchw)] == 0 and nchw.trials == MIN_FIRST_PASS  # dropped
    for s in scheduler.states:
        s.warm_up = 2
    later = _play(scheduler, lambda name: 2e-3, rounds=20)
    assert len(later) == 20 and "t0" not in {name for name, _ in later}  # dropped: never picked again


def test_one_layouts_model_is_probed_whole_before_the_other_layouts_tasks():
    """With ``--layout auto`` the probes take every task of the layout the task list names first (its own and the
    ones both layouts share), then the other's: halfway through the probes one model has a latency for every task,
    which is what ``export`` needs, where probes in turns completed neither until the last one. Without two layouts
    the tasks' own order stands."""
    import math

    def auto(i: int, *layouts: str) -> TuningTask:
        return _task(i, 1e9, layout="auto", layouts=list(layouts))

    tasks = [auto(0, "NHWC"), auto(1, "NCHW"), auto(2, "NHWC"), auto(3, "NCHW"), auto(4, "NCHW", "NHWC")]
    scheduler = _scheduler(tasks, budget=1000, batch=16)
    assert [s.task.name for s in scheduler.order] == ["t0", "t2", "t4", "t1", "t3"]
    probed = []
    for _ in range(3):
        state, n = scheduler.next_round()
        for _ in range(n):
            state.record(Config(0, (state.trials,)), _ok(1e-3))
        probed.append(state.task.name)
    assert probed == ["t0", "t2", "t4"]
    totals = scheduler.layout_totals()
    assert math.isfinite(totals["NHWC"]) and not math.isfinite(totals["NCHW"])  # one model whole, the other not yet
    assert [scheduler.next_round()[0].task.name for _ in range(2)] == ["t1", "t3"]  # then the other layout's probes

    plain = _scheduler([_task(0), _task(1), _task(2)], budget=100)
    assert plain.order == plain.states


def test_an_alternative_close_behind_its_rival_warms_up_in_full():
    """A layer 2.5x slower as Winograd after the probes is still warmed up: it may yet win (an fp32 layout was
    that far behind after its first trials and won)."""
    tasks = [_task(0, 4e9, winograd="auto", layer="L", algorithm="direct"),
             _task(1, 4e9, winograd="auto", layer="L", algorithm="winograd")]
    scheduler = _scheduler(tasks, budget=300, batch=16)
    played = _play(scheduler, lambda name: {"t0": 5e-3, "t1": 2e-3}[name], rounds=4)
    rest = scheduler.first_pass(scheduler.states[0]) - MIN_FIRST_PASS
    assert played == [("t0", MIN_FIRST_PASS), ("t1", MIN_FIRST_PASS), ("t0", rest), ("t1", rest)]


def test_a_resumed_task_past_its_warm_up_goes_straight_to_the_gradient():
    scheduler = _scheduler([_task(0), _task(1)], budget=1000, batch=16)
    done, new = scheduler.states
    for n in range(40):
        done.record(Config(0, (n,)), _ok(1e-3))
    state, n = scheduler.next_round()
    assert state is new and n == scheduler.first_pass(new)
    assert done.warm_up == 2  # its warm-up round was skipped, not measured again


def test_under_a_time_limit_the_gradient_is_bought_per_second_and_under_a_trial_budget_per_trial():
    """Two tasks alike in latency and trials, one of them three times as costly a trial (a Winograd layer's
    larger kernel): under a time limit the next batch goes to the cheap one until the costly one's gain is three
    times larger; under a trial budget alone, cost does not count (Ansor's gradient per trial)."""
    def states():
        cheap, costly = TaskState(task=_task(0)), TaskState(task=_task(1))
        for s, secs in ((cheap, 0.5), (costly, 1.5)):
            for n in range(32):
                s.record(Config(0, (n,)), _ok(10e-3))
            s.warm_up, s.seconds, s.timed_trials = 2, secs * 32, 32
        return cheap, costly

    cheap, costly = states()
    timed = TaskScheduler([costly, cheap], seconds=600)
    assert timed.seconds_per_trial(costly) == pytest.approx(1.5) and timed.next_task() is cheap
    costly.best = _ok(40e-3)  # four times the latency to gain from: worth its price again
    costly.history[-1] = 40e-3
    assert timed.next_task() is costly
    cheap, costly = states()
    counted = TaskScheduler([costly, cheap], budget=1000)
    assert counted.next_task() is costly  # equal gains per trial: the first listed
    resumed = TaskState(task=_task(2))
    assert TaskScheduler([costly, cheap, resumed], seconds=600).seconds_per_trial(resumed) == pytest.approx(1.0)


def _layouts_behind(budget: int | None = 1000, seconds: float | None = None, *, layer: bool = False):
    """A ``--layout auto`` model whose NCHW tasks are 1.4x behind NHWC's after 64 trials each (with ``layer``, also
    a layer tuned direct and 1.4x slower as Winograd), every task past its warm-up."""
    tasks = [_task(0, 4e9, layout="auto", layouts=["NCHW"]), _task(1, 4e9, layout="auto", layouts=["NHWC"])]
    if layer:
        tasks += [_task(2, 4e9, winograd="auto", layer="L", algorithm="direct"),
                  _task(3, 4e9, winograd="auto", layer="L", algorithm="winograd")]
    scheduler = _scheduler(tasks, budget=budget, seconds=seconds, batch=16)
    for state, secs in zip(scheduler.states, (14e-3, 10e-3, 10e-3, 14e-3)):
        for n in range(64):
            state.record(Config(0, (n,)), _ok(secs))
        state.warm_up = 2
    return scheduler


def test_the_layout_behind_keeps_its_share_early_and_is_dropped_late():
    """A layout 1.4x behind may still win early in a run (its gain scaled down, not dropped); once most of the run
    is spent it does not, and the batches go to the layout the model keeps."""
    early = _layouts_behind(budget=1000)  # 128 of 1000 trials spent
    nchw = early.states[0]
    assert early.layout_limit() == pytest.approx(BEHIND_LIMIT)
    assert early.rivalry()[id(nchw)] == pytest.approx((10 / 14) ** 2)
    late = _layouts_behind(budget=150)  # 128 of 150 spent: past the narrowing
    assert late.progress() == pytest.approx(128 / 150)
    assert late.layout_limit() == pytest.approx(LATE_LAYOUT_LIMIT)
    assert late.rivalry()[id(late.states[0])] == 0
    played = _play(late, lambda name: 10e-3, rounds=3)
    assert played and all(name == "t1" for name, _ in played)


def test_the_narrowing_follows_the_time_limit_when_it_is_further_than_the_trials():
    """Under a time limit the run's progress is its share of the minutes: at 90% of them a layout 1.4x behind gets
    no batch though few of its trials are spent."""
    scheduler = _layouts_behind(budget=100_000, seconds=600)
    assert scheduler.rivalry()[id(scheduler.states[0])] > 0
    scheduler.started = time.perf_counter() - 540
    assert scheduler.progress() == pytest.approx(0.9, abs=0.01)
    assert scheduler.rivalry()[id(scheduler.states[0])] == 0


def test_a_layers_alternatives_keep_the_wide_limit_to_the_end():
    """A layer's Winograd form 1.4x behind its direct one late in a run keeps a scaled-down gain: in the logs a
    layer's lead changed hands late, a model's layout did not."""
    scheduler = _layouts_behind(budget=300, layer=True)
    assert scheduler.progress() > NARROWING[1]
    factors = scheduler.rivalry()
    assert factors[id(scheduler.states[0])] == 0  # the NCHW model: dropped
    assert factors[id(scheduler.states[3])] == pytest.approx((10 / 14) ** 2)  # Winograd: still searched


def test_the_run_records_when_a_layout_stopped_taking_trials(tmp_path):
    """The scheduler names the layouts it drops; the tuning loop keeps when each stopped, for the run's summary, and
    forgets a layout taken back."""
    early, late = _layouts_behind(budget=1000), _layouts_behind(budget=150)
    assert early.dropped_layouts() == {} and late.dropped_layouts() == {"NCHW": pytest.approx(1.4)}
    tasks = [s.task for s in late.states]
    with TuningLog(str(tmp_path / "l.jsonl")) as log:
        tuner = Tuner(tasks=tasks, runner=None, log=log, strategy="random", budget=150)
    for state, secs in zip(tuner.states, (14e-3, 10e-3)):
        for n in range(64):
            state.record(Config(0, (n,)), _ok(secs))
    tuner._note_dropped_layouts()
    assert tuner.layouts_dropped == {"NCHW": (128, pytest.approx(128 / 150), pytest.approx(1.4))}
    for n in range(64, 70):  # NCHW level again: taken back
        tuner.states[0].record(Config(0, (n,)), _ok(10e-3))
    tuner._note_dropped_layouts()
    assert tuner.layouts_dropped == {}
    tuner.states[0].record(Config(0, (70,)), _ok(9.5e-3))  # then ahead: late in the run the other layout stops
    tuner._note_dropped_layouts()
    assert set(tuner.layouts_dropped) == {"NHWC"}


def _conv(i: int, layout: str, cin: int, cout: int, **lowering) -> TuningTask:
    """A 3x3 convolution task of one layout's model (``--layout auto``), its arguments in that layout."""
    shapes = (((1, cin, 8, 8), (cout, cin, 3, 3), (1, cout, 8, 8)) if layout == "NCHW" else
              ((1, 8, 8, cin), (cout, 3, 3, cin), (1, 8, 8, cout)))
    return TuningTask(index=i, name=f"fused_conv2d{i}", weight=1, flops=4e9, mod=None, target=None,
                      args=tuple((s, "float32") for s in shapes), workload_key=str(i),
                      lowering={"layout": "auto", "layouts": [layout], **lowering})


def _layers_split(budget: int = 150, **lowering) -> TaskScheduler:
    """NCHW's model 1.17x behind NHWC's (14 ms against 12), yet its second layer faster than NHWC's (4 ms against 6);
    a pool per layout; 64 trials each, late in the run (past the narrowing)."""
    tasks = [_conv(0, "NCHW", 16, 32, **lowering), _conv(1, "NCHW", 32, 64, **lowering),
             _conv(2, "NHWC", 16, 32, **lowering), _conv(3, "NHWC", 32, 64, **lowering),
             _task(4, 1e6, layout="auto", layouts=["NCHW"]), _task(5, 1e6, layout="auto", layouts=["NHWC"])]
    scheduler = _scheduler(tasks, budget=budget, batch=16)
    for state, secs in zip(scheduler.states, (8e-3, 4e-3, 4e-3, 6e-3, 2e-3, 2e-3)):
        for n in range(64):
            state.record(Config(0, (n,)), _ok(secs))
        state.warm_up = 2
    return scheduler


def test_in_fp32_a_layouts_convolutions_race_their_own_layer_not_the_whole_model():
    """``export`` can keep one layout per convolution, so late in the run the model behind keeps tuning the layer
    it leads, and the model ahead stops tuning the layer it trails; the tasks no layer pairs (the pools) race as
    models. No layout's model counts as dropped: its faster layers still take trials."""
    scheduler = _layers_split()
    assert scheduler.progress() > NARROWING[1]
    nchw_a, nchw_b, nhwc_a, nhwc_b, nchw_pool, nhwc_pool = (id(s) for s in scheduler.states)
    assert scheduler.layer_layout_costs()[nchw_b] == (pytest.approx(4e-3), pytest.approx(4e-3))
    factors = scheduler.rivalry()
    assert nchw_b not in factors and factors[nhwc_b] == 0  # the layer's leader keeps its gain; the other stops
    assert factors[nchw_a] == 0 and nhwc_a not in factors
    assert factors[nchw_pool] == 0 and nhwc_pool not in factors  # the model behind: its pool is dropped
    assert scheduler.dropped_layouts() == {}
    early = _layers_split(budget=1000)  # early, the layer behind keeps a scaled-down gain
    assert early.rivalry()[id(early.states[3])] == pytest.approx((4 / 6) ** 2)


def test_with_bf16_alternatives_the_layouts_race_as_models():
    """A layer tuned in fp32 and bf16 is NHWC: no layout per convolution, the models race whole."""
    scheduler = _layers_split(layer="L", algorithm="fp32")
    assert scheduler.layer_layout_costs() == {}
    assert scheduler.rivalry()[id(scheduler.states[1])] == 0  # NCHW's faster layer goes with its model
    assert scheduler.dropped_layouts() == {"NCHW": pytest.approx(14 / 12)}
