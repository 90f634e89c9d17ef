"""ModelScorer: random until trained, then ranks a task's unmeasured configs better than chance."""

from __future__ import annotations

import os

import numpy as np
import pytest

from autosearch.cost_models.evaluate import pairwise_accuracy
from autosearch.cost_models.guidance import ModelScorer
from autosearch.records import LogContents
from autosearch.search.cost_model import ConfigScorer, make_cost_model, make_scorer
from autosearch.types import Config


@pytest.fixture(scope="module")
def task_records(contents, held_out_task):
    task, _ = held_out_task
    records = [r for r in contents.trials(task.workload_key) if r.ok]
    order = np.random.default_rng(0).permutation(len(records))
    return [records[i] for i in order[:20]], [records[i] for i in order[20:]]


def _truth(records):
    return np.array([1.0 / r.latency for r in records])


@pytest.mark.parametrize("model,features", [("xgb-rank", "tvm"), ("xgb-rank", "encoding"),
                                            ("xgb-rank@pooled", "tvm"), ("xgb-rank@pooled+loop", "tvm")])
def test_scorer_ranks_held_out_configs_better_than_random(contents, task_spaces, model, features):
    """Measured 20 configs of a task, the scorer orders the other 20 (4 tasks x 2 random splits)."""
    accuracies = []
    for key, (task, space) in task_spaces.items():
        records = [r for r in contents.trials(key) if r.ok]
        for split in range(2):
            order = np.random.default_rng(split).permutation(len(records))
            train, test = [records[i] for i in order[:20]], [records[i] for i in order[20:]]
            scorer = ModelScorer(make_cost_model(model, seed=0), space, task, seed=0, features=features)
            assert isinstance(scorer, ConfigScorer) and not scorer.fitted
            scorer.update([r.config for r in train], [r.result for r in train])
            # space.apply refuses a few effective configs (a compute location outside the sketch's list),
            # and what cannot be featurised is not learned: 12 of the 160 records here
            assert scorer.fitted and scorer.n_train >= 15
            accuracies.append(pairwise_accuracy(_truth(test), scorer.score([r.config for r in test])))
    # chance is 0.5; measured 0.724 (loop), 0.683 (pooled), 0.735 (pooled+loop), 0.628 (encoding)
    assert np.mean(accuracies) > 0.6 and min(accuracies) > 0.45


def test_scorer_caches_features(held_out_task, task_records):
    task, space = held_out_task
    train, test = task_records
    scorer = ModelScorer(make_cost_model("xgb", seed=0), space, task, seed=0, features="tvm")
    random_scores = scorer.score([r.config for r in test])
    assert ((random_scores >= 0) & (random_scores < 1)).all()
    assert scorer.stats.featurised == 0  # untrained: no features needed yet
    scorer.update([r.config for r in train], [r.result for r in train])
    scores = scorer.score([r.config for r in test])
    assert scorer.stats.featurised == 40 and scorer.stats.fits == 1
    np.testing.assert_array_equal(scorer.score([r.config for r in test]), scores)
    assert scorer.stats.featurised == 40  # scoring again featurises nothing


@pytest.mark.parametrize("model", ["xgb", "mlp"])
def test_threaded_featurising_changes_nothing(held_out_task, task_records, model):
    """New configs are featurised on threads (TVM releases the GIL); features and scores are the same as on one."""
    task, space = held_out_task
    train, test = task_records
    configs = [r.config for r in test]
    broken = Config(configs[0].sketch, configs[0].values[:-1])  # cannot be applied: scored lowest either way
    scores = []
    for n_jobs in (1, 3):
        scorer = ModelScorer(make_cost_model(model, seed=0), space, task, seed=0, features="tvm", n_jobs=n_jobs)
        scorer.update([r.config for r in train], [r.result for r in train])
        scores.append(scorer.score([broken] + configs))
        assert scorer.stats.featurised == len(train) + len(test) + 1
    np.testing.assert_array_equal(scores[0], scores[1])
    assert scores[0][0] < scores[0][1:].min()


def test_untrained_scores_are_seeded(held_out_task, task_records):
    task, space = held_out_task
    configs = [r.config for r in task_records[1]]
    a = ModelScorer(make_cost_model("rf"), space, task, seed=7).score(configs)
    b = ModelScorer(make_cost_model("rf"), space, task, seed=7).score(configs)
    c = ModelScorer(make_cost_model("rf"), space, task, seed=8).score(configs)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_failed_results_are_not_learned_and_bad_configs_score_lowest(held_out_task, task_records):
    from autosearch.types import MeasureResult, Status

    task, space = held_out_task
    train, test = task_records
    scorer = ModelScorer(make_cost_model("xgb"), space, task, seed=0, features="tvm")
    failed = [MeasureResult.failed(Status.BUILD_ERROR, "boom")] * 5
    scorer.update([r.config for r in train[:5]], failed)
    assert scorer.n_train == 0 and not scorer.fitted
    scorer.update([r.config for r in train], [r.result for r in train])
    broken = Config(test[0].config.sketch, test[0].config.values[:-1])  # one decision short
    scores = scorer.score([broken] + [r.config for r in test[:5]])
    assert scores[0] < scores[1:].min()


def test_warm_start_from_other_tasks(contents, held_out_task):
    """Trained only on the other three tasks' records, the scorer already ranks this task's configs."""
    task, space = held_out_task
    own = task.workload_key
    others = LogContents(path=contents.path, tasks={k: v for k, v in contents.tasks.items() if k != own},
                         records=[r for r in contents.records if r.task_key != own])
    scorer = make_scorer("xgb-rank", space, task, seed=0, warm_start=[others])
    assert isinstance(scorer, ModelScorer)
    assert scorer.features == "tvm"  # cross-task data only transfers through program features
    assert scorer.fitted and scorer.n_train == 120
    records = [r for r in contents.trials(own) if r.ok]
    assert pairwise_accuracy(_truth(records), scorer.score([r.config for r in records])) > 0.6

    # bare records of other tasks carry no task header: skipped, not guessed at
    bare = ModelScorer(make_cost_model("xgb"), space, task, seed=0, warm_start=others.trials())
    assert bare.n_train == 0 and not bare.fitted
    # records of this task are used even with the cheap encoding
    own_warm = ModelScorer(make_cost_model("xgb"), space, task, seed=0, warm_start=records)
    assert own_warm.features == "encoding" and own_warm.fitted and own_warm.n_train == 40


def test_feature_choice(held_out_task):
    task, space = held_out_task
    assert ModelScorer(make_cost_model("rf"), space, task).features == "encoding"
    assert ModelScorer(make_cost_model("mlp"), space, task).features == "tvm"
    assert ModelScorer(make_cost_model("seq"), space, task).features == "tvm"  # tokens of the applied trace
    with pytest.raises(ValueError, match="program features"):
        ModelScorer(make_cost_model("seq"), space, task, features="encoding")
    with pytest.raises(ValueError, match="program features"):
        ModelScorer(make_cost_model("tvm-xgb"), space, task, features="encoding")
    # a model made for decision encodings gets them, even where program features would be the default
    assert ModelScorer(make_cost_model("xgb@encoding"), space, task).features == "encoding"
    with pytest.raises(ValueError, match="decision encodings"):
        ModelScorer(make_cost_model("xgb@encoding"), space, task, features="tvm")


@pytest.mark.parametrize("name", ["tvm-xgb", "mlp", "tvm-mlp", "seq@sequence+loop", "mlp-rank", "blend"])
def test_models_of_every_family_guide(held_out_task, task_records, name):
    task, space = held_out_task
    train, test = task_records
    scorer = make_scorer(name, space, task, seed=0)
    scorer.update([r.config for r in train], [r.result for r in train])
    assert scorer.fitted
    scores = scorer.score([r.config for r in test])
    assert scores.shape == (len(test),) and np.isfinite(scores).all()
    assert pairwise_accuracy(_truth(test), scores) > 0.5


def test_scoring_more_configs_than_the_cache_holds(held_out_task, task_records, monkeypatch):
    """One call may score more configs than the feature cache keeps (annealing scores thousands)."""
    import autosearch.cost_models.guidance as guidance

    monkeypatch.setattr(guidance, "_DEFAULT_CACHE_SIZE", 16)
    task, space = held_out_task
    train, _ = task_records
    scorer = ModelScorer(make_cost_model("xgb", seed=0), space, task, seed=0, features="encoding")
    scorer.update([r.config for r in train], [r.result for r in train])
    rng = np.random.default_rng(0)
    configs = list(dict.fromkeys(space.sample(rng) for _ in range(64)))
    scores = scorer.score(configs)
    assert len(scores) == len(configs) and scorer.fitted


def test_warm_start_is_featurised_once_per_run_and_across_runs(contents, task_spaces, held_out_task, tmp_path):
    """The tuner makes one scorer per task, each with the same warm start: only the first featurises it."""
    from autosearch.cost_models.feature_store import FeatureStore

    task, space = held_out_task
    own = task.workload_key
    others = LogContents(path=contents.path, tasks={k: v for k, v in contents.tasks.items() if k != own},
                         records=[r for r in contents.records if r.task_key != own])
    records = [r for r in contents.trials(own) if r.ok]
    run = FeatureStore(tmp_path)
    first = make_scorer("xgb-rank", space, task, seed=0, warm_start=[others], feature_store=run)
    assert first.stats.warm_featurised == 120 and first.stats.warm_cached == 0

    # another task of the same run, warm-started on every record: only the 40 not featurised yet are
    other_key, (other_task, other_space) = next((k, v) for k, v in task_spaces.items() if k != own)
    second = make_scorer("xgb-rank", other_space, other_task, seed=0, warm_start=[contents], feature_store=run)
    assert second.stats.warm_featurised == 40 and second.stats.warm_cached == 120

    # the next run (a new store on the same directory) featurises none, and its features are the same
    again = make_scorer("xgb-rank", space, task, seed=0, warm_start=[others], feature_store=str(tmp_path))
    assert again.stats.warm_featurised == 0 and again.stats.warm_cached == 120
    configs = [r.config for r in records]
    np.testing.assert_array_equal(again.score(configs), first.score(configs))


def test_scorer_defaults_to_the_user_feature_cache(contents, held_out_task, feature_cache):
    """Without a feature_store the scorer uses the cache directory (AUTOSEARCH_CACHE, set per test here)."""
    task, space = held_out_task
    own = task.workload_key
    others = LogContents(path=contents.path, tasks={k: v for k, v in contents.tasks.items() if k != own},
                         records=[r for r in contents.records if r.task_key != own])
    make_scorer("xgb", space, task, seed=0, warm_start=[others])
    assert os.listdir(os.path.join(feature_cache, "features", "loop"))
    assert make_scorer("xgb", space, task, seed=0, warm_start=[others]).stats.warm_featurised == 0


def test_make_scorer_finds_the_scorer_through_the_registry(held_out_task):
    """The core names no scorer module: the package of each registry entry makes the scorer."""
    from autosearch.cost_models.learned import SegmentSumMLP
    from autosearch.cost_models.sklearn_model import SklearnCostModel
    from autosearch.cost_models.xgboost_model import XGBCostModel
    from autosearch.search.cost_model import cost_model_names

    task, space = held_out_task
    for name, cls in (("xgb-rank", XGBCostModel), ("sklearn:KNeighborsRegressor", SklearnCostModel),
                      ("mlp", SegmentSumMLP)):
        scorer = make_scorer(name, space, task, seed=0)
        assert isinstance(scorer, ModelScorer) and type(scorer.model) is cls
    assert "sklearn:" not in cost_model_names() and "sklearn:<Regressor>" in cost_model_names()


def test_a_call_smaller_than_a_pool_featurises_in_full_and_probes_nothing(held_out_task, task_records, monkeypatch):
    """A task's known schedules, scored before its first trial, are a call of a few configs: applied in full, with
    no probe of the cheaper RewriteLayout ways (each would apply the config again), the choice left open; the first
    call of a pool's size probes and decides. The scores are those of a scorer that probed from the start."""
    from autosearch.cost_models import guidance

    task, space = held_out_task
    train, test = task_records
    applied_for_features = []
    real = type(space).apply_for_features
    monkeypatch.setattr(type(space), "apply_for_features",
                        lambda self, config, **kw: applied_for_features.append(config) or real(self, config, **kw))
    assert len(test) >= guidance.PROBE_BATCH + 4
    few, pool = [r.config for r in test[:4]], [r.config for r in test[4:4 + guidance.PROBE_BATCH]]
    scorer = ModelScorer(make_cost_model("xgb-rank", seed=0), space, task, seed=0, features="tvm", n_jobs=1)
    measured = train[:12]  # fewer than a pool: no probe (and enough to fit)
    scorer.update([r.config for r in measured], [r.result for r in measured])
    few_scores = scorer.score(few)
    assert applied_for_features == [] and scorer.layout_rewrite is None
    scorer.score(pool)
    assert applied_for_features and scorer.layout_rewrite == "none"  # the dataset's NCHW conv: the probes agree

    monkeypatch.setattr(guidance, "PROBE_BATCH", 1)
    probed = ModelScorer(make_cost_model("xgb-rank", seed=0), space, task, seed=0, features="tvm", n_jobs=1)
    probed.update([r.config for r in measured], [r.result for r in measured])
    np.testing.assert_array_equal(few_scores, probed.score(few))


def test_candidates_skip_the_layout_rewrite_only_where_the_loop_features_do_not_see_it(held_out_task, task_records,
                                                                                         monkeypatch, tmp_path):
    """The dataset's NCHW conv: the probes agree, the rest is featurised without RewriteLayout, and the scores are
    those of a scorer that always applies it. An NHWC conv, where RewriteLayout changes the weights' strides the
    features read: the first probe differs, and every candidate is applied in full. The same conv with a bias:
    the bias's rewrite moves no feature here, so candidates are featurised with the weights' rewrite alone, and
    score as in full."""
    from autosearch.cost_models import guidance
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target
    from autosearch.search.space import DecisionSpace
    from autosearch.types import MeasureResult, Status
    from tests.conftest import small_conv_onnx

    task, space = held_out_task
    train, test = task_records
    monkeypatch.setattr(guidance, "PROBE_BATCH", 1)  # every call probes (the NHWC updates: 12, under a pool)
    scores = []
    for probes in (guidance.LAYOUT_PROBES, 10**6):  # the second never decides: every config applied in full
        monkeypatch.setattr(guidance, "LAYOUT_PROBES", probes)
        scorer = ModelScorer(make_cost_model("xgb-rank", seed=0), space, task, seed=0, features="tvm", n_jobs=1)
        assert scorer.layout_rewrite is None
        scorer.update([r.config for r in train], [r.result for r in train])
        scores.append(scorer.score([r.config for r in test]))
        assert scorer.layout_rewrite == ("none" if probes < 100 else None)
    np.testing.assert_array_equal(scores[0], scores[1])
    assert "nchw" in str(task.mod).lower()

    monkeypatch.setattr(guidance, "LAYOUT_PROBES", 8)
    path = str(tmp_path / "conv.onnx")
    small_conv_onnx(path, cin=32, cout=64, hw=16)
    target = parse_target(None)
    nhwc = next(t for t in import_model(path, target, layout="NHWC", precision="fp32").tasks if "conv" in t.name)
    nhwc_space = DecisionSpace(nhwc.mod, nhwc.target)
    rng = np.random.default_rng(0)
    configs = list(dict.fromkeys(nhwc_space.sample(rng) for _ in range(40)))[:12]
    scorer = ModelScorer(make_cost_model("xgb-rank", seed=0), nhwc_space, nhwc, seed=0, features="tvm", n_jobs=1)
    ok = MeasureResult(Status.OK, (1e-3, 1e-3, 1e-3))  # the latencies are not what this test reads
    scorer.update(configs, [ok] * len(configs))
    assert scorer.layout_rewrite == "all" and nhwc_space.layout_rewrites == ("all", "none")

    small_conv_onnx(path, cin=32, cout=64, hw=16, bias=True)
    biased = next(t for t in import_model(path, target, layout="NHWC", precision="fp32").tasks if "conv" in t.name)
    biased_space = DecisionSpace(biased.mod, biased.target)
    assert biased_space.layout_rewrites == ("all", "weights", "none")
    configs = list(dict.fromkeys(biased_space.sample(rng) for _ in range(60)))
    train, test = configs[:12], configs[12:40]
    scores, ways = [], []
    for probes in (8, 10**6):
        monkeypatch.setattr(guidance, "LAYOUT_PROBES", probes)
        scorer = ModelScorer(make_cost_model("xgb-rank", seed=0), biased_space, biased, seed=0, features="tvm",
                             n_jobs=1)
        scorer.update(train, [MeasureResult(Status.OK, (1e-3 * (1 + i),) * 3) for i in range(len(train))])
        scores.append(scorer.score(test))
        ways.append(scorer.layout_rewrite)
    assert ways == ["weights", None]
    np.testing.assert_array_equal(scores[0], scores[1])
