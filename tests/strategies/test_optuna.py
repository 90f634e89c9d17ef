"""Optuna specifics: parameters, results in the study, repeats, storage, samplers, quiet logs."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys

import optuna
import pytest
from optuna.trial import TrialState
from strategy_helpers import EncodingRidgeScorer

from autosearch.errors import UserError
from autosearch.search.space import config_key
from autosearch.strategies import optuna_search
from autosearch.strategies.optuna_search import SAMPLERS, OptunaSearch, make_sampler
from autosearch.strategies.random_search import RandomSearch
from autosearch.types import Config, MeasureResult, Status
from tests.strategies.replay import ReplayRunner, SyntheticLatency, best_latency, run_strategy


def _ok(seconds: float) -> MeasureResult:
    return MeasureResult(Status.OK, latencies=(seconds, seconds, seconds))


def _trial_of(study: optuna.Study, config) -> optuna.trial.FrozenTrial:
    return next(
        t
        for t in study.get_trials()
        if t.user_attrs.get("config") == config_key(config) and not t.user_attrs.get("repeat")
    )


def test_params_are_conditional_categoricals_with_string_tiles(conv_space) -> None:
    strategy = OptunaSearch(conv_space, seed=0)
    [config] = strategy.ask(1)
    trial = strategy.study.trials[0]
    assert trial.params == strategy.params(config)
    assert trial.params["sketch"] == config.sketch
    names = [n for n in trial.params if n != "sketch"]
    assert all(n.startswith(f"s{config.sketch}.") for n in names)
    assert len(names) == len(conv_space.decisions(config.sketch))
    for name, value, decision in zip(names, config.values, conv_space.decisions(config.sketch)):
        if decision.kind == "SamplePerfectTile":
            assert trial.params[name] == "x".join(map(str, value))
        else:
            assert trial.params[name] == value
        assert isinstance(trial.distributions[name], optuna.distributions.CategoricalDistribution)


def test_ok_results_are_throughput_and_failures_are_fail_trials(conv_space) -> None:
    strategy = OptunaSearch(conv_space, seed=0)
    configs = strategy.ask(4)
    results = [
        _ok(0.002),
        MeasureResult.failed(Status.BUILD_ERROR, "x"),
        _ok(0.004),
        MeasureResult.failed(Status.WRONG_RESULT, "y"),
    ]
    strategy.tell(configs, results)
    trials = [_trial_of(strategy.study, c) for c in configs]
    assert [t.state for t in trials] == [
        TrialState.COMPLETE,
        TrialState.FAIL,
        TrialState.COMPLETE,
        TrialState.FAIL,
    ]
    assert trials[0].value == pytest.approx(500.0) and trials[2].value == pytest.approx(250.0)
    assert trials[1].value is None and trials[1].user_attrs["status"] == "build_error"
    assert strategy.study.best_trial.number == trials[0].number  # maximising throughput


def test_a_repeat_of_a_measured_config_is_answered_and_asked_again(conv_space) -> None:
    strategy = OptunaSearch(conv_space, seed=0)
    first = strategy.ask(4)
    strategy.tell(first, [_ok(0.001 * (i + 1)) for i in range(4)])
    strategy.study.enqueue_trial(strategy.params(first[1]))  # make Optuna suggest first[1] again
    again = strategy.ask(2)
    assert len(again) == 2 and not set(again) & set(first)
    repeats = [t for t in strategy.study.get_trials() if t.user_attrs.get("repeat")]
    assert len(repeats) == 1
    assert repeats[0].state == TrialState.COMPLETE and repeats[0].value == pytest.approx(500.0)


def test_a_repeat_of_a_config_in_flight_is_told_when_its_result_arrives(conv_space) -> None:
    strategy = OptunaSearch(conv_space, seed=0)
    first = strategy.ask(3)
    strategy.study.enqueue_trial(strategy.params(first[0]))
    [extra] = strategy.ask(1)
    assert extra not in first
    [repeat] = [t for t in strategy.study.get_trials() if t.user_attrs.get("repeat")]
    assert repeat.state == TrialState.RUNNING  # with constant liar, a pending trial counts as bad
    strategy.tell(
        first + [extra], [MeasureResult.failed(Status.RUN_ERROR, "z"), _ok(1e-3), _ok(2e-3), _ok(3e-3)]
    )
    repeat = strategy.study.trials[repeat.number]
    assert repeat.state == TrialState.FAIL
    assert all(t.state != TrialState.RUNNING for t in strategy.study.get_trials())


def test_a_stored_study_is_reloaded_and_its_configs_never_asked_again(
    conv_space, synthetic, tmp_path
) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = OptunaSearch(conv_space, seed=0, storage=storage, task_id="conv-task")
    done = run_strategy(first, ReplayRunner(conv_space, synthetic), 8, 4)  # sqlite: ~20 ms a write
    second = OptunaSearch(conv_space, seed=0, storage=storage, task_id="conv-task")  # same seed: would repeat
    more = run_strategy(second, ReplayRunner(conv_space, synthetic), 8, 4)
    assert not {c for c, _ in done} & {c for c, _ in more}
    study = optuna.load_study(study_name="conv-task", storage=storage)
    measured = [t for t in study.trials if not t.user_attrs.get("repeat")]
    assert len(measured) == 16
    assert sum(t.state == TrialState.COMPLETE for t in measured) == sum(r.ok for _, r in done + more)


def test_an_ordinal_study_is_stored_apart_from_a_categorical_one(conv_space, synthetic, tmp_path) -> None:
    """One storage, one task, TPE then CMA-ES: two studies (a study mixing the encodings would leave the
    relative sampler nothing to model), and the CMA-ES study reloads like any other."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    tpe = OptunaSearch(conv_space, seed=0, storage=storage, task_id="t")
    run_strategy(tpe, ReplayRunner(conv_space, synthetic), 4, 4)
    first = OptunaSearch(conv_space, seed=0, sampler="cmaes", storage=storage, task_id="t")
    assert first.study.study_name == "t:ordinal" and not first._known
    done = run_strategy(first, ReplayRunner(conv_space, synthetic), 4, 4)
    again = OptunaSearch(conv_space, seed=0, sampler="cmaes", storage=storage, task_id="t")
    assert set(again._known) == {c for c, _ in done}
    more = run_strategy(again, ReplayRunner(conv_space, synthetic), 4, 4)
    assert len(more) == 4 and not {c for c, _ in more} & {c for c, _ in done}
    assert sorted(s.study_name for s in optuna.get_all_study_summaries(storage)) == ["t", "t:ordinal"]


def test_storage_without_a_task_id_gets_a_stable_name(conv_space, tmp_path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    a = OptunaSearch(conv_space, seed=0, storage=storage)
    b = OptunaSearch(conv_space, seed=1, storage=storage)
    assert a.study.study_name == b.study.study_name
    assert a.study.study_name.startswith("autosearch-")


def test_resume_adds_the_logged_trials_to_the_study_as_finished_trials(conv_space, recorded) -> None:
    logged = recorded[:20]
    strategy = OptunaSearch(conv_space, seed=0)
    strategy.resume([c for c, _ in logged], [r for _, r in logged])
    assert len(strategy.study.trials) == 20
    for config, result in logged:
        trial = _trial_of(strategy.study, config)
        assert trial.params == strategy.params(config)
        assert trial.state == (TrialState.COMPLETE if result.ok else TrialState.FAIL)
        if result.ok:
            assert trial.value == pytest.approx(1.0 / result.median)
    assert any(not r.ok for _, r in logged)
    # the same distributions as a suggested trial of that sketch, or the sampler would not combine them
    [asked] = strategy.ask(1)
    suggested = strategy.study.trials[-1]
    resumed = next(_trial_of(strategy.study, c) for c, _ in logged if c.sketch == asked.sketch)
    assert resumed.distributions == suggested.distributions


def test_a_resumed_config_outside_the_choices_is_never_mutated_into_a_model_pick(conv_space, recorded) -> None:
    """A log holds configs as TVM applied them: a compute location legal only with their own tiles is outside
    the decision's choices. The best of them must not seed the cost model's candidates (Optuna cannot enqueue
    such a value: a resumed yolo11n run stopped on it)."""
    sketch, index = next((s.index, i) for s in conv_space.sketches for i, d in enumerate(s.decisions)
                         if d.kind == "SampleComputeLocation" and max(d.choices) < 40)
    logged = [(c, r) for c, r in recorded if c.sketch == sketch and r.ok][:12]
    outside = [(Config(c.sketch, c.values[:index] + (40,) + c.values[index + 1:]), r) for c, r in logged]
    assert all(conv_space.replayable(c) and not conv_space.contains(c) for c, _ in outside)
    best = MeasureResult(status=Status.OK, latencies=[1e-6])  # far the fastest: the first to mutate
    scorer = EncodingRidgeScorer(conv_space)
    scorer.update([c for c, _ in logged], [r for _, r in logged])
    strategy = OptunaSearch(conv_space, seed=0, cost_model=scorer, model_share=1.0, n_startup_trials=4)
    strategy.resume([c for c, _ in logged] + [c for c, _ in outside], [r for _, r in logged] + [best] * len(outside))
    asked = strategy.ask(8)
    assert len(asked) == 8 and all(conv_space.contains(c) for c in asked)
    assert sum(t.user_attrs.get("source") == "cost_model" for t in strategy.study.trials) == 8


def test_resume_into_a_stored_study_that_holds_the_trials_adds_none(conv_space, synthetic, tmp_path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    done = run_strategy(OptunaSearch(conv_space, seed=0, storage=storage, task_id="t"),
                        ReplayRunner(conv_space, synthetic), 8, 4)
    again = OptunaSearch(conv_space, seed=1, storage=storage, task_id="t")
    again.resume([c for c, _ in done], [r for _, r in done])
    assert len(again.study.trials) == 8


def test_unknown_sampler_lists_the_valid_ones() -> None:
    with pytest.raises(UserError) as err:
        make_sampler("bayes", seed=0)
    assert all(name in str(err.value) for name in SAMPLERS)


def test_gp_sampler_without_torch_is_a_user_error(conv_space, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without the [learned] extra
    with pytest.raises(UserError, match=r"needs torch.*\.\[learned\]"):
        OptunaSearch(conv_space, seed=0, sampler="gp")


@pytest.mark.parametrize("sampler", ["tpe", "qmc", "nsga2"])
def test_optuna_stays_quiet(sampler: str, conv_space, synthetic, capfd) -> None:
    """Optuna logs every trial at INFO and QMC warns on every conditional trial; a run must print nothing."""
    strategy = OptunaSearch(conv_space, seed=0, sampler=sampler)
    run_strategy(strategy, ReplayRunner(conv_space, synthetic), 24, 8)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert optuna.logging.get_verbosity() >= optuna.logging.WARNING


@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])  # both encodings
def test_cost_model_picks_a_share_of_each_batch_with_real_results(sampler: str, conv_space, synthetic) -> None:
    scorer = EncodingRidgeScorer(conv_space)
    strategy = OptunaSearch(
        conv_space, seed=0, sampler=sampler, cost_model=scorer, model_share=0.5, n_startup_trials=8, pool_size=64
    )
    history = run_strategy(strategy, ReplayRunner(conv_space, synthetic), 40, 8, cost_model=scorer)
    picked = [t for t in strategy.study.trials if t.user_attrs.get("source") == "cost_model"]
    # 4 per batch of 8 once 8 configs were measured ok (before that, Optuna's start-up trials only)
    guided_batches = sum(sum(r.ok for _, r in history[:b]) >= 8 for b in range(0, 40, 8))
    assert guided_batches >= 3 and len(picked) == 4 * guided_batches
    results = dict(history)
    for trial in picked:  # told what was measured, never a prediction
        result = results[Config.from_json(json.loads(trial.user_attrs["config"]))]
        assert (trial.state == TrialState.COMPLETE) == result.ok
        if result.ok:
            assert trial.value == pytest.approx(1.0 / result.median)


def test_model_ranks_a_pool_in_proportion_to_its_picks(conv_space, synthetic) -> None:
    """A batch that lets the model pick one config ranks CANDIDATES_PER_PICK candidates, not a full pool:
    every candidate is applied and featurised, which cost more than measuring a small batch."""
    from autosearch.strategies.optuna_search import CANDIDATES_PER_PICK

    scorer = EncodingRidgeScorer(conv_space)
    sizes: list[int] = []
    score = scorer.score
    scorer.score = lambda configs: (sizes.append(len(configs)), score(configs))[1]
    strategy = OptunaSearch(conv_space, seed=0, cost_model=scorer, model_share=0.5, n_startup_trials=4,
                            pool_size=128)
    run_strategy(strategy, ReplayRunner(conv_space, synthetic), 12, 2, cost_model=scorer)  # 1 pick a batch
    run_strategy(strategy, ReplayRunner(conv_space, synthetic), 32, 16, cost_model=scorer)  # 8 picks a batch
    assert sizes and all(s <= CANDIDATES_PER_PICK * 8 for s in sizes)
    assert min(sizes) <= CANDIDATES_PER_PICK < max(sizes)


def _skip_without_torch(sampler: str) -> None:
    if sampler == "gp" and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the gp sampler is a UserError (tested above)")


# ---------------------------------------------------------------------------------- relative samplers
_SAMPLER_CLASSES = {
    "gp": optuna.samplers.GPSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "nsga2": optuna.samplers.NSGAIISampler,
    "qmc": optuna.samplers.QMCSampler,
}
# where each keeps the relative sample of a trial (Optuna's own system attributes)
_RELATIVE_MARK = {"gp": "gp:relative_params", "cmaes": "cma:generation", "nsga2": "NSGAIISampler:generation"}


def _independent_draws(monkeypatch, sampler: str, strategy_of, runner, budget: int) -> tuple[OptunaSearch, dict]:
    """Run a strategy and record, per trial number, the parameters its sampler drew one by one
    (``sample_independent``: Optuna's fallback for parameters outside the modelled space)."""
    draws: dict[int, list[str]] = {}
    cls = _SAMPLER_CLASSES[sampler]
    original = cls.sample_independent

    def spy(self, study, trial, name, distribution):
        draws.setdefault(trial.number, []).append(name)
        return original(self, study, trial, name, distribution)

    monkeypatch.setattr(cls, "sample_independent", spy)
    strategy = strategy_of()
    run_strategy(strategy, runner, budget, 8)
    return strategy, draws


@pytest.mark.parametrize("sampler", ["gp", "cmaes", "nsga2", "qmc"])
def test_relative_samplers_model_every_decision(sampler: str, conv_space, synthetic, monkeypatch, capfd) -> None:
    """``--sampler gp`` / ``cmaes`` / ``nsga2`` / ``qmc``: after the start-up trials, every parameter of every
    trial comes from the sampler's model of the whole vector (``sample_relative``), none from its independent
    fallback (NSGA-II: only its mutations), quietly. With the conditional categorical encoding (TPE's) the same
    sampler draws the decisions independently, at random: that is what the ordinal encoding is for."""
    _skip_without_torch(sampler)

    def run(ordinal: bool):
        if not ordinal:
            monkeypatch.setattr(optuna_search, "RELATIVE_SAMPLERS", frozenset())
        return _independent_draws(
            monkeypatch, sampler,
            lambda: OptunaSearch(conv_space, seed=0, sampler=sampler, n_startup_trials=4),
            ReplayRunner(conv_space, synthetic), 16,
        )

    strategy, draws = run(True)
    assert isinstance(strategy.study.sampler, _SAMPLER_CLASSES[sampler])
    assert len(strategy._known) == 16
    late = [t for t in strategy.study.trials if t.number >= 8]  # asked once 8 were measured, >= 4 ok
    assert late and all(t.state != TrialState.RUNNING for t in late)
    assert all(len(t.params) == len(late[0].params) for t in late)
    drawn = sum(len(draws.get(t.number, [])) for t in late) / sum(len(t.params) for t in late)
    if sampler == "nsga2":
        assert drawn < 0.2  # its mutation: each parameter redrawn with probability 1 / (number of parameters)
    else:
        assert drawn == 0, {t.number: draws.get(t.number) for t in late}
    if sampler in _RELATIVE_MARK:
        assert all(any(k.startswith(_RELATIVE_MARK[sampler]) for k in t.system_attrs) for t in late)
    out, err = capfd.readouterr()
    assert out == "" and err == ""

    strategy, draws = run(False)
    late = [t for t in strategy.study.trials if t.number >= 8 and "source" not in t.user_attrs]  # not enqueued
    decisions = [{n for n, d in t.distributions.items() if n != "sketch" and not d.single()} for t in late]
    at_random = [names <= set(draws.get(t.number, ())) for t, names in zip(late, decisions)]
    # QMC models the parameters of its first trial: the decisions of that trial's sketch, where it comes up again
    assert late and sum(at_random) >= len(late) / 2, at_random


@pytest.mark.parametrize("sampler", ["gp", "cmaes"])
def test_a_resumed_relative_sampler_models_the_log_from_its_first_ask(
    sampler: str, conv_space, synthetic, recorded, monkeypatch
) -> None:
    """Logged trials become finished trials with the distributions the sampler suggests, so its first
    suggestions already come from its model of them (CMA-ES: started from their best) and beat the log's
    typical config."""
    _skip_without_torch(sampler)
    logged = recorded[:40]
    draws: list[str] = []
    cls = _SAMPLER_CLASSES[sampler]
    original = cls.sample_independent
    monkeypatch.setattr(cls, "sample_independent", lambda self, *a: (draws.append(a[2]), original(self, *a))[1])
    strategy = OptunaSearch(conv_space, seed=0, sampler=sampler)
    strategy.resume([c for c, _ in logged], [r for _, r in logged])
    assert len(strategy.study.trials) == 40
    first = strategy.ask(8)
    assert len(first) == 8 and not set(first) & {c for c, _ in logged}
    assert draws == []
    suggested = strategy.study.trials[-1]
    resumed = _trial_of(strategy.study, logged[0][0])
    assert resumed.distributions == suggested.distributions
    assert resumed.params == strategy.params(logged[0][0])
    logged_median = statistics.median(r.median for _, r in logged if r.ok)
    assert statistics.median(synthetic.latency(c) for c in first) < 0.8 * logged_median


def _best_and_typical(sampler: str, conv_space, seed: int, budget: int, startup: int) -> tuple[float, float]:
    """Best latency found in ``budget`` trials (batches of 4), and the median latency of the trials after the
    first ``startup`` (what the sampler proposes once it models the results), both as multiples of the optimum
    of a synthetic landscape of that seed."""
    landscape = SyntheticLatency(conv_space, seed=seed)
    strategy = (
        RandomSearch(conv_space, seed=seed)
        if sampler == "random"
        else OptunaSearch(conv_space, seed=seed, sampler=sampler, n_startup_trials=startup)
    )
    history = run_strategy(strategy, ReplayRunner(conv_space, landscape), budget, 4)
    optimum = landscape.latency(landscape.optimum())
    typical = statistics.median(landscape.latency(c) for c, _ in history[startup:])
    return best_latency(history) / optimum, typical / optimum


@pytest.mark.parametrize(
    ("sampler", "budget", "seeds"),
    [
        ("gp", 32, (0, 1, 2)),  # GP learns fast, but each suggestion costs a GP fit: a small budget, 3 seeds
        ("cmaes", 192, (0, 1, 2, 3, 4)),  # CMA-ES and NSGA-II need generations: a larger budget, and cheap
        ("nsga2", 192, (0, 1, 2, 3, 4)),
    ],
)
def test_relative_samplers_beat_random_search(sampler: str, budget: int, seeds, conv_space) -> None:
    """On the synthetic landscape (smooth in tile log-sizes and decision order, as the ordinal encoding sees
    it), each seed its own landscape, medians over seeds of the ratio to random search with the same seed: the
    best config found is better than random search's, and what the sampler proposes once it models the results
    is far better than random configs.

    Measured on seeds 0-5: best/random median 0.66 (GP), 0.74 (CMA-ES), 0.58 (NSGA-II); proposals/random 0.5 or
    less. With the categorical encoding CMA-ES and NSGA-II were no better than random search at these budgets."""
    _skip_without_torch(sampler)
    startup = 8
    ours = [_best_and_typical(sampler, conv_space, s, budget, startup) for s in seeds]
    random = [_best_and_typical("random", conv_space, s, budget, startup) for s in seeds]
    best_ratio = statistics.median(o[0] / r[0] for o, r in zip(ours, random))
    typical_ratio = statistics.median(o[1] / r[1] for o, r in zip(ours, random))
    assert best_ratio < 0.9, (ours, random)
    assert typical_ratio < 0.7, (ours, random)
