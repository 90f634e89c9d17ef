"""Model-guided search: a :class:`ModelScorer` ranks unmeasured configs of one task for a strategy.

A strategy (annealing, evolutionary, a filter over random samples) asks ``score(configs)`` for
hundreds to thousands of candidates per batch and measures only the best few; after each measured
batch the tuner calls ``update(configs, results)`` and the scorer refits its cost model on all
measured data of the task, plus warm-start records from other tasks or earlier logs.

Two feature sets (``features=``):

- ``"tvm"``: features of the applied TVM program (``space.apply``, then the model's own input kind: the
  loop features, MetaSchedule's ``PerStoreFeature``, or an LLVM build for the assembly features; README's
  feature table gives what each costs). They transfer across tasks, so warm-start records of *other*
  tasks help; the only choice for ``mlp``, ``tvm-xgb``, ``tvm-mlp`` and ``seq`` (which reads the applied
  schedule's trace).
- ``"encoding"``: ``DecisionSpace.encode`` of the config: no apply, about a thousand times cheaper per
  config. It means nothing across tasks, so only warm-start records of this task are used.

The default (``features=None``) is ``"tvm"`` when the model needs it or when the warm start holds
records of other tasks (the only way they can help), else ``"encoding"``; see ``DEFAULT_FEATURES``.

The warm start goes through a :class:`~autosearch.cost_models.feature_store.FeatureStore` (``feature_store=``, by
default the user's cache directory): the first scorer that needs a record's features computes them, and
the other scorers of the run (the tuner makes one per task) and later runs read them, so a warm start is
featurised once, not once per task. Features of new configs are kept in memory per config, so re-scoring
a population costs only the prediction. New configs are featurised by ``n_jobs`` threads: TVM releases
the GIL while it replays a trace and runs the postprocessors, which are most of the cost, so two threads
come close to halving it, with identical features. The tuner measures between asks, not during them, so
the threads do not share cores with a timing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosearch.cost_models.feature_store import FeatureStore, as_store
from autosearch.cost_models.features import (
    ASM_WIDTH,
    LOOP_WIDTH,
    SEQUENCE_KINDS,
    TaskFeaturizer,
    build_dataset,
    encode,
    pad_columns,
    pool,
    read_logs,
    stack_per_store,
)
from autosearch.cost_models.trace_tokens import sequence_input, trace_tokens
from autosearch.frontend.target import host_cores
from autosearch.records import LogContents
from autosearch.types import Config, MeasureResult, Record

log = logging.getLogger(__name__)

_VECTOR_WIDTH = {"loop": LOOP_WIDTH, "asm": ASM_WIDTH, "loop+asm": LOOP_WIDTH + ASM_WIDTH}  # one vector per config
_PROGRAM_ONLY = ("per_store", "program", *SEQUENCE_KINDS)  # kinds that need the applied schedule (features="tvm")

FEATURE_SETS = ("tvm", "encoding")
# Without warm-start records of other tasks the default is the decision encoding. Program features rank a
# task's own configs better (tests/cost_models/test_guidance.py trains xgb-rank on 20 records of a task and
# ranks the other 20: the loop features beat the encoding there), but each candidate then costs an apply and an
# extraction, about a thousand times the encoding, and annealing's default walk scores thousands of
# candidates per ask: each ask would take minutes where measuring its batch takes seconds. Pass
# features="tvm" when the strategy scores a few hundred candidates per batch (optuna's pool) or when a
# measurement is slow (a remote device).
DEFAULT_FEATURES = "encoding"
# Configs whose loop features a scorer computes with TVM's RewriteLayout in full, without it and with it confined to
# the weights (DecisionSpace.apply_for_features) before it featurises the task's candidates the cheapest way that
# agreed on every probe: the postprocessor is most of an apply; it changes no loop feature of NCHW or AMX
# convolutions, while on NHWC ones the weights' rewrite changes the strides the features read and a per-channel
# vector's rewrite changes them only where its new layout pads (docs/cost-models.md). At one difference a way is out.
LAYOUT_PROBES = 8
# The fewest configs a featurising call must hold for its configs to serve as probes: a probe costs its config's
# apply and features once or twice more, repaid only over the candidate pools that follow (a strategy ranks 16 per
# config it picks). A smaller call (a task's known schedules, ordered before its first trial; a measured batch)
# featurises in full and leaves the choice open, so a task that never ranks a pool never pays for it.
PROBE_BATCH = 16
# configs whose features are kept (LRU; measured configs are always kept): a per-store matrix is ~2 KB,
# a Program holds a scheduled IRModule (tens of KB), so fewer of those
_CACHE_SIZE = {"program": 1024}
_DEFAULT_CACHE_SIZE = 8192


@dataclass
class ScorerStats:
    """Where the scorer's time goes (seconds), for reports and for choosing ``features``."""

    featurised: int = 0
    featurise_secs: float = 0.0
    predicted: int = 0
    predict_secs: float = 0.0
    fits: int = 0
    fit_secs: float = 0.0
    warm_featurised: int = 0  # warm-start records featurised by this scorer
    warm_cached: int = 0  # warm-start records whose features came from the feature store
    warm_secs: float = 0.0  # loading the warm start: reading, featurising and storing it

    @property
    def secs_per_config(self) -> float:
        return self.featurise_secs / max(1, self.featurised)


@dataclass(frozen=True)
class _Example:
    """One training example: its features, the task's FLOPs, its latency (s) and its task key."""

    item: Any
    flops: float
    latency: float
    task_key: str


def _split_warm(warm_start: Any) -> tuple[list[LogContents], list[Record]]:
    """Warm-start items -> (logs with task headers, bare records)."""
    if isinstance(warm_start, str | os.PathLike | LogContents):
        warm_start = [warm_start]
    contents: list[LogContents] = []
    loose: list[Record] = []
    for item in warm_start:
        if isinstance(item, LogContents):
            contents.append(item)
        elif isinstance(item, str | os.PathLike):
            contents.extend(read_logs([os.fspath(item)]))
        elif isinstance(item, Record):
            loose.append(item)
        else:
            raise TypeError(f"warm_start takes log paths, LogContents or Records, not {type(item).__name__}")
    return contents, loose


class ModelScorer:
    """Scores configs of one task with a cost model that learns from the task's measurements.

    ``warm_start`` items may be tuning-log paths, ``LogContents`` (records of any task with a header
    in that log are used), or ``Record`` objects (only records of this task: a bare record carries
    no task header, so records of other tasks cannot be featurised and are skipped with a warning).
    Untrained (fewer than ``min_records`` examples), ``score`` returns seeded random scores, as
    MetaSchedule's cost model does during its warm-up. ``n_jobs`` threads featurise new configs
    (``None``: one per core this process may use, at most 4: beyond that the Python part of the
    features holds the GIL). ``feature_store``: where the warm start's program features are read from
    and added to: a :class:`FeatureStore` (share one between scorers), a cache directory, or ``None``
    for the default directory (``feature_store.default_cache_dir``).
    """

    def __init__(self, model, space, task, *, seed: int = 0, warm_start: Sequence[Any] = (),
                 features: str | None = None, min_records: int = 8, n_jobs: int | None = None,
                 feature_store: FeatureStore | str | os.PathLike | None = None) -> None:
        self.model = model
        self.space = space
        self.task = task
        self.seed = seed
        self.min_records = min_records
        self.n_jobs = max(1, n_jobs if n_jobs is not None else min(4, host_cores()))
        model_kind = getattr(model, "input_kind", "pooled")
        contents, loose = _split_warm(warm_start)
        if features is None and model_kind == "encoding":  # xgb@encoding: the model's own choice
            features = "encoding"
        if features is None:
            other_tasks = any(r.task_key != task.workload_key for c in contents for r in c.trials() if r.ok)
            # a pre-trained model learnt on program features of other tasks: it needs them from the start
            needs_program = model_kind in _PROGRAM_ONLY or getattr(model, "pretrained", False)
            features = "tvm" if needs_program or other_tasks else DEFAULT_FEATURES
        if features not in FEATURE_SETS:
            raise ValueError(f"features must be one of {FEATURE_SETS}, not {features!r}")
        if features == "encoding" and model_kind in _PROGRAM_ONLY:
            raise ValueError(f"{type(model).__name__} needs program features (features='tvm')")
        if features == "tvm" and model_kind == "encoding":
            raise ValueError(f"{type(model).__name__} was made for decision encodings (features='encoding')")
        self.features = features
        self.input_kind = "encoding" if features == "encoding" else model_kind
        self.stats = ScorerStats()
        self.fitted = bool(getattr(model, "pretrained", False))  # ranks before any fit of its own
        self._rng = np.random.default_rng(seed)
        self._featurizer = TaskFeaturizer(task) if features == "tvm" else None
        self._store = as_store(feature_store) if features == "tvm" else None
        self._cache: OrderedDict[Config, Any] = OrderedDict()
        # how much of RewriteLayout this task's candidates are featurised with (DecisionSpace.apply_for_features):
        # None while LAYOUT_PROBES decide
        self.layout_rewrite: str | None = None if self.input_kind == "loop" else "all"
        # the cheaper ways no probe has refuted yet
        self._layout_open = list(space.layout_rewrites[1:]) if self.layout_rewrite is None else []
        self._layout_agreed = 0
        self._layout_lock = threading.Lock()
        self._measured: dict[Config, float] = {}  # this task's valid measurements: latency (s)
        self._items: dict[Config, Any] = {}  # their features
        self._warm: list[_Example] = []
        self._load_warm(contents, loose)
        if len(self._warm) >= self.min_records:
            self._refit()

    # ------------------------------------------------------------------ features
    def _featurise(self, configs: Sequence[Config]) -> list[Any]:
        """Features of each config (None if it cannot be applied), from the cache when possible."""
        missing = [c for c in dict.fromkeys(configs) if c not in self._cache and c not in self._items]
        if missing:
            start = time.perf_counter()
            if self.features == "encoding":
                found = {c: encode(self.space, c) for c in missing}
            else:
                found = self._program_features(missing)
            self.stats.featurised += len(missing)
            self.stats.featurise_secs += time.perf_counter() - start
            for c, item in found.items():
                self._cache[c] = item
        out = []
        for c in configs:
            if c in self._items:
                out.append(self._items[c])
            else:
                self._cache.move_to_end(c)
                out.append(self._cache[c])
        # evict only after reading: a call with more configs than the cache holds must still get them all
        while len(self._cache) > _CACHE_SIZE.get(self.input_kind, _DEFAULT_CACHE_SIZE):
            self._cache.popitem(last=False)
        return out

    def _program_features(self, configs: Sequence[Config]) -> dict[Config, Any]:
        probe = len(configs) >= PROBE_BATCH
        if self.n_jobs > 1 and len(configs) > 1:
            with ThreadPoolExecutor(min(self.n_jobs, len(configs))) as pool:
                done = list(pool.map(lambda c: self._config_item(c, probe=probe), configs))
        else:
            done = [self._config_item(c, probe=probe) for c in configs]
        found: dict[Config, Any] = {c: None for c in configs}
        for config, (effective, item) in zip(configs, done):
            if item is None:
                continue
            found[config] = item
            # update() gets the *effective* config; when TVM moved a compute location, that config may not
            # pass space.apply's membership check again, so keep its features under that key as well
            found.setdefault(effective, item)
        return found

    def _config_item(self, config: Config, *, probe: bool) -> tuple[Config, Any]:
        """(effective config, model input) of one config; (config, None) if it cannot be applied. Where the loop
        features do not see all of TVM's RewriteLayout (:data:`LAYOUT_PROBES`), the config is applied with the share
        they see (the weights' rewrite, or none); a config that the rest of RewriteLayout would refuse is then scored,
        and measured as ``invalid_config`` if picked. Undecided, a config applied in full is a probe when ``probe``
        (:data:`PROBE_BATCH`)."""
        assert self._featurizer is not None
        rewrite = self.layout_rewrite
        if rewrite is None or rewrite == "all":
            applied = self.space.apply(config)
        else:
            applied = self.space.apply_for_features(config, rewrite=rewrite)
        if not applied.ok:
            return config, None
        if self.input_kind in SEQUENCE_KINDS:  # (joined vector or None, trace tokens)
            joined = SEQUENCE_KINDS[self.input_kind]
            tokens = trace_tokens(applied.trace_json(), self.task.flops, self.task.args)
            return applied.config, (self._mod_items([applied.mod], joined)[0] if joined else None, tokens)
        item = self._mod_items([applied.mod])[0]
        if rewrite is None and probe:
            self._probe_layout(config, item)
        return applied.config, item

    def _probe_layout(self, config: Config, item: np.ndarray) -> None:
        """Compare ``item`` (the loop features of ``config`` applied in full) with those of the config applied with
        each cheaper share of RewriteLayout still open; a way that differs is out. Decide once :data:`LAYOUT_PROBES`
        configs were compared, or when no way is left: the cheapest way left, else in full."""
        assert self._featurizer is not None
        agreed = []
        for rewrite in list(self._layout_open):
            cheaper = self.space.apply_for_features(config, rewrite=rewrite)
            if cheaper.ok and np.array_equal(self._mod_items([cheaper.mod])[0], item):
                agreed.append(rewrite)
        with self._layout_lock:
            if self.layout_rewrite is not None:
                return
            self._layout_open = [r for r in self._layout_open if r in agreed]
            self._layout_agreed += 1
            if not self._layout_open or self._layout_agreed >= LAYOUT_PROBES:
                self.layout_rewrite = self._layout_open[-1] if self._layout_open else "all"
                log.debug("%s: candidates featurised with RewriteLayout on %s", self.task.name,
                          {"all": "every layout-free buffer", "weights": "the weights alone",
                           "none": "nothing"}[self.layout_rewrite])

    def _mod_items(self, mods: Sequence[Any], kind: str | None = None) -> list[Any]:
        """What the model's input (or ``kind``) is made of, per scheduled module of this task (see ``_X``). Loop and
        assembly features read the module; only TVM's extractors get it wrapped in a schedule (a schedule made
        around every candidate was a large part of featurising a Winograd one, where nothing read it)."""
        featurizer = self._featurizer
        assert featurizer is not None
        kind = kind or self.input_kind
        if kind == "loop":
            return featurizer.loop_of(mods)
        if kind == "asm":
            return featurizer.asm_of(mods)
        if kind == "loop+asm":
            return [np.concatenate(v) for v in zip(featurizer.loop_of(mods), featurizer.asm_of(mods))]
        schedules = [featurizer.schedule_from_mod(m) for m in mods]
        if kind == "program":
            return featurizer.programs(schedules)
        if kind == "pooled+loop":
            return list(zip(featurizer.per_store(schedules), featurizer.loop_of(mods)))
        return featurizer.per_store(schedules)

    def _dataset_items(self, ds) -> list[Any]:
        kind = self.input_kind
        if kind == "program":
            return list(ds.programs)
        if kind in _VECTOR_WIDTH:
            return list(ds.X(kind))
        if kind == "pooled+loop":
            return list(zip(ds.per_store, ds.loop))
        if kind in SEQUENCE_KINDS:
            joined = SEQUENCE_KINDS[kind]
            return list(zip(ds.X(joined) if joined else [None] * len(ds), ds.tokens))
        return list(ds.per_store)

    def _X(self, items: Sequence[Any], flops: Sequence[float]) -> np.ndarray:
        if self.input_kind in _VECTOR_WIDTH:
            width = _VECTOR_WIDTH[self.input_kind]
            return np.stack(list(items)) if items else np.zeros((0, width), dtype=np.float32)
        if self.input_kind == "pooled+loop":
            return np.hstack([pool([m for m, _ in items], np.asarray(flops)),
                              np.stack([v for _, v in items]).reshape(len(items), LOOP_WIDTH)])
        if self.input_kind == "pooled":
            return pool(list(items), np.asarray(flops))
        if self.input_kind == "per_store":
            return stack_per_store(list(items))
        if self.input_kind == "encoding":
            return pad_columns(list(items), self.space.encoding_width)
        if self.input_kind in SEQUENCE_KINDS:
            vectors = np.stack([v for v, _ in items]) if SEQUENCE_KINDS[self.input_kind] and items else None
            return sequence_input([t for _, t in items], vectors)
        out = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):
            out[i] = item
        return out

    # ------------------------------------------------------------------ warm start
    def _load_warm(self, contents: list[LogContents], loose: list[Record]) -> None:
        own = self.task.workload_key
        foreign = sum(1 for r in loose if r.task_key != own)
        if foreign:
            log.warning("warm start: skipping %d records of other tasks given without their log's task "
                        "headers (pass the log path or LogContents instead)", foreign)
        own_records = [r for r in loose if r.task_key == own and r.ok]
        start = time.perf_counter()
        if self.features == "encoding":
            own_records += [r for c in contents for r in c.trials(own) if r.ok]
            skipped = sum(1 for c in contents for r in c.trials() if r.ok and r.task_key != own)
            if skipped:
                log.info("warm start: decision encodings do not transfer across tasks; using %d records of "
                         "this task, skipping %d of other tasks", len(own_records), skipped)
            for r in own_records:
                item = encode(self.space, r.config)
                if item is not None:
                    self._warm.append(_Example(item, self.task.flops, r.latency, own))
            self.stats.warm_featurised = len(own_records)
        else:
            logs = list(contents)
            if own_records:  # bare records of this task: this task's header lets them share the code path
                logs.insert(0, LogContents(path="<warm-start records>", tasks={own: self.task.to_json()},
                                           records=own_records))
            if logs:
                ds = build_dataset(logs, kinds=(self.input_kind,), store=self._store)
                for i, item in enumerate(self._dataset_items(ds)):
                    key = ds.task_keys[ds.groups[i]]
                    self._warm.append(_Example(item, float(ds.flops[i]), float(ds.latency[i]), key))
                self.stats.warm_featurised, self.stats.warm_cached = ds.featurised, ds.cached
        self.stats.warm_secs = time.perf_counter() - start
        if self._warm:
            n_tasks = len({e.task_key for e in self._warm})
            log.info("warm start: %d records of %d tasks (%d featurised, %d from the feature cache, %.1f s)",
                     len(self._warm), n_tasks, self.stats.warm_featurised, self.stats.warm_cached,
                     self.stats.warm_secs)

    # ------------------------------------------------------------------ learning
    def _refit(self) -> None:
        own = self.task.workload_key
        examples = list(self._warm) + [
            _Example(self._items[c], self.task.flops, latency, own)
            for c, latency in self._measured.items()
            if c in self._items
        ]
        if len(examples) < self.min_records:
            return
        keys = list(dict.fromkeys([own] + [e.task_key for e in examples]))
        groups = np.asarray([keys.index(e.task_key) for e in examples])
        latency = np.asarray([e.latency for e in examples])
        y = np.zeros(len(examples))
        for g in np.unique(groups):
            sel = groups == g
            y[sel] = latency[sel].min() / latency[sel]
        X = self._X([e.item for e in examples], [e.flops for e in examples])
        start = time.perf_counter()
        self.model.fit(X, y, groups)
        self.stats.fits += 1
        self.stats.fit_secs += time.perf_counter() - start
        self.fitted = True

    @property
    def n_train(self) -> int:
        """Examples the model learns from: warm start plus this task's valid measurements."""
        return len(self._warm) + len(self._measured)

    # ------------------------------------------------------------------ ConfigScorer
    def score(self, configs: Sequence[Config]) -> np.ndarray:
        """Predicted goodness (higher = faster). Configs that cannot be applied score below every other
        config of the call; untrained, the scores are seeded uniform random numbers."""
        if not configs:
            return np.zeros(0)
        if not self.fitted:
            return self._rng.random(len(configs))
        items = self._featurise(configs)
        valid = [i for i, item in enumerate(items) if item is not None]
        out = np.full(len(configs), np.nan)
        if valid:
            start = time.perf_counter()
            X = self._X([items[i] for i in valid], [self.task.flops] * len(valid))
            out[valid] = self.model.predict(X)
            self.stats.predicted += len(valid)
            self.stats.predict_secs += time.perf_counter() - start
        floor = float(np.nanmin(out)) - 1.0 if valid else 0.0
        return np.where(np.isnan(out), floor, out)

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Add a measured batch (failed results are not learned from) and refit on everything."""
        if len(configs) != len(results):
            raise ValueError(f"{len(configs)} configs but {len(results)} results")
        fresh = []
        for config, result in zip(configs, results):
            if not result.ok:
                continue
            self._measured[config] = min(result.median, self._measured.get(config, np.inf))
            if config not in self._items:
                fresh.append(config)
        if not fresh:
            return
        for config, item in zip(fresh, self._featurise(fresh)):
            if item is None:  # measured, yet not applicable now: cannot be featurised, so not learned
                self._measured.pop(config, None)
            else:
                self._items[config] = item
                self._cache.pop(config, None)
        self._refit()


__all__ = ["DEFAULT_FEATURES", "FEATURE_SETS", "ModelScorer", "ScorerStats"]
