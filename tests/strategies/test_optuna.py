"""Optuna specifics: parameters, results in the study, repeats, storage, samplers, quiet logs."""

from __future__ import annotations

import importlib.util
import json

import optuna
import pytest
from optuna.trial import TrialState
from strategy_helpers import EncodingRidgeScorer

from autosearch.errors import UserError
from autosearch.records import Config, MeasureResult, Status
from autosearch.space import config_key
from strategies.optuna_search import SAMPLERS, OptunaSearch, make_sampler
from tests.strategies.replay import ReplayRunner, run_strategy


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


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_gp_sampler_without_torch_is_a_user_error(conv_space) -> None:
    with pytest.raises(UserError, match="torch"):
        OptunaSearch(conv_space, seed=0, sampler="gp")


@pytest.mark.parametrize("sampler", ["tpe", "qmc", "nsga2"])
def test_optuna_stays_quiet(sampler: str, conv_space, synthetic, capfd) -> None:
    """Optuna logs every trial at INFO and QMC warns on every conditional trial; a run must print nothing."""
    strategy = OptunaSearch(conv_space, seed=0, sampler=sampler)
    run_strategy(strategy, ReplayRunner(conv_space, synthetic), 24, 8)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert optuna.logging.get_verbosity() >= optuna.logging.WARNING


def test_cost_model_picks_a_share_of_each_batch_with_real_results(conv_space, synthetic) -> None:
    scorer = EncodingRidgeScorer(conv_space)
    strategy = OptunaSearch(
        conv_space, seed=0, cost_model=scorer, model_share=0.5, n_startup_trials=8, pool_size=64
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
    from strategies.optuna_search import CANDIDATES_PER_PICK

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


@pytest.mark.parametrize("sampler", ["gp", "cmaes"])
def test_gp_and_cmaes_samplers_search_through_the_strategy(sampler: str, conv_space, synthetic, capfd) -> None:
    """``--sampler gp`` / ``cmaes`` (as the study runs them): Optuna's sampler of that name drives the study, 16
    trials without repeats, quietly. CMA-ES models no categorical parameter, so it never needs the ``cmaes``
    package (not installed here); GP needs torch."""
    if sampler == "gp" and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the gp sampler is a UserError (tested above)")
    strategy = OptunaSearch(conv_space, seed=0, sampler=sampler, n_startup_trials=4)
    history = run_strategy(strategy, ReplayRunner(conv_space, synthetic), 16, 4)
    assert len({c for c, _ in history}) == 16
    expected = {"gp": optuna.samplers.GPSampler, "cmaes": optuna.samplers.CmaEsSampler}[sampler]
    assert isinstance(strategy.study.sampler, expected)
    assert len(strategy.study.get_trials(states=(TrialState.COMPLETE, TrialState.FAIL))) == 16
    out, err = capfd.readouterr()
    assert out == "" and err == ""
