"""Optuna over the decision space, with the parameters each kind of sampler can model.

Two encodings (:mod:`autosearch.strategies.optuna_encodings`), chosen by the sampler:

- TPE and random: ``sketch``, then one categorical parameter per decision of that sketch,
  ``s{k}.{decision}`` (conditional on the sketch). Each parameter vector is exactly one config, so the
  sampler learns only from values that were measured; TPE models conditional spaces.
- GP, CMA-ES, NSGA-II and QMC (``RELATIVE_SAMPLERS``) model only the parameters every trial has; with the
  conditional encoding that is ``sketch`` alone, and every decision would come from their independent
  sampler, at random. They get an ordinal encoding instead: the same numbers in every trial (the union
  of the sketches' decisions), tile factors as log-sizes and unroll / compute location on a line from
  shallow to deep, each suggestion mapped to the nearest legal choice, so nearby numbers are nearby
  schedules. The price: many parameter vectors decode to one config (repeats, answered below).

Driven by ``study.ask()`` / ``study.tell()``, maximising throughput ``1 / median latency`` (1/s, so no
FLOPs are needed; the order is that of GFLOPS). Failed measurements are told as ``TrialState.FAIL``, not
as made-up values. Optuna may suggest a config asked before: that trial is told the known value (or
FAIL) — or, if the first one is still being measured, told when it is — and Optuna is asked again; after
``max_retries`` repeats in a row an unasked neighbour of the repeat is enqueued instead, so the
loop never gets a config twice and the study holds every measured config as a trial.

Samplers (option ``sampler``): ``tpe`` (default; multivariate, ``group=True`` so it models each
sketch's decisions jointly, constant liar for batches); ``gp`` (Optuna's Gaussian process, batches by
q-expected improvement over the running trials; needs PyTorch, which autosearch does not install; each
suggestion fits the GP and searches its acquisition function, far slower than TPE, still small next to
building and timing a kernel); ``cmaes`` (CMA-ES; it starts once
``n_startup_trials`` trials finished ok, from the best of them by Optuna's warm start when there are at
least ten, else from the centre of the space); ``qmc`` (a scrambled Sobol sequence over every decision:
space-filling, it learns nothing); ``nsga2`` (genetic: crossover and mutation of its parents'
parameters; ``n_startup_trials`` is its population size); ``random``.

With ``storage`` (e.g. ``sqlite:///study.db``) the study is stored and reloaded (``load_if_exists``),
one study per task, named by the ``task_id`` the tuning loop passes (task name + key; ``:ordinal``
appended for the ordinal encoding, whose trials a conditional study could not model), so
optuna-dashboard shows the search; configs already in a reloaded study are never asked again (trials
a crashed run left RUNNING stay so: with constant liar they count as bad). On SQLite every parameter and
attribute is a committed write: a fraction of a second per trial, small next to building and timing a kernel.
A resumed run (``resume``) adds the logged trials to the study as finished trials (``add_trials``,
with the same distributions as suggested ones, each config at its own point of the encoding), so the
sampler models them from the first ask (CMA-ES: starts from the best of them).

With a cost model, a share ``model_share`` of every batch (once ``n_startup_trials`` configs were
measured ok, or from the first batch when the scorer already ranks: pre-trained or warm-started) is
picked by the model from ``pool_size`` candidates (mutations of the best measured configs and random
configs), greedily by score and at least two decisions apart; those are enqueued
(``study.enqueue_trial``) and asked, so they are ordinary trials with real results. The rest of the
batch is Optuna's own suggestions, unranked. No trial is ever told a predicted value: a study holds
measurements only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.trial import Trial, TrialState

from autosearch.errors import UserError, install_hint
from autosearch.search.cost_model import ConfigScorer
from autosearch.search.space import DecisionSpace, config_key, pick_diverse
from autosearch.search.strategy import Option
from autosearch.strategies.optuna_encodings import CategoricalEncoding, Encoding, OrdinalEncoding
from autosearch.types import Config, MeasureResult

log = logging.getLogger(__name__)

# Candidates the model ranks per config it picks, up to ``pool_size``: a task's first batches pick one or
# two configs, and ranking a full pool for them (every candidate applied and featurised) cost more than
# measuring them did.
CANDIDATES_PER_PICK = 16

SAMPLERS: tuple[str, ...] = ("tpe", "random", "qmc", "cmaes", "nsga2", "gp")
# Samplers that model only the parameters every trial has (Optuna's intersection search space): they get
# the ordinal encoding
RELATIVE_SAMPLERS: frozenset[str] = frozenset({"gp", "cmaes", "qmc", "nsga2"})
# Optuna's CMA-ES warm start takes the best tenth of its source trials: it needs at least ten
CMAES_WARM_START_MIN = 10

OPTIONS: dict[str, Option] = {
    "sampler": Option(
        "Optuna sampler: tpe, gp, cmaes and nsga2 learn from the results; qmc spreads the trials; random",
        "tpe",
        str,
        SAMPLERS,
    ),
    "n_startup_trials": Option(
        "random trials before the sampler models the results (nsga2: population size)", 10, int
    ),
    "storage": Option("Optuna storage URL, e.g. sqlite:///study.db (empty: in memory)", "", str),
    "model_share": Option("with a cost model: share of each batch picked by the model", 0.5, float),
    "pool_size": Option("with a cost model: candidates the model ranks per batch, at most 16 per pick", 128, int),
    "max_retries": Option("repeated suggestions in a row before a neighbour is enqueued instead", 10, int),
}

_ATTR_CONFIG = "config"


def _quiet_optuna() -> None:
    """Optuna logs every trial at INFO; a tuning run makes thousands of them."""
    if optuna.logging.get_verbosity() <= optuna.logging.INFO:
        optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_sampler(
    name: str, *, seed: int, n_startup_trials: int = 10, source_trials: Sequence[optuna.trial.FrozenTrial] = ()
) -> optuna.samplers.BaseSampler:
    """An Optuna sampler by name; ``UserError`` for unknown names or a missing optional dependency.

    ``source_trials`` (cmaes only, at least :data:`CMAES_WARM_START_MIN` finished ones): where CMA-ES starts,
    Optuna's warm start (the mean and spread of their best tenth) instead of the centre of the space."""
    if name not in SAMPLERS:
        raise UserError(f"unknown optuna sampler {name!r}; valid samplers: {', '.join(SAMPLERS)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            return optuna.samplers.TPESampler(
                multivariate=True,
                group=True,
                constant_liar=True,
                n_startup_trials=n_startup_trials,
                seed=seed,
            )
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "qmc":
            return optuna.samplers.QMCSampler(
                scramble=True, seed=seed, warn_independent_sampling=False, warn_asynchronous_seeding=False
            )
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(
                seed=seed, n_startup_trials=n_startup_trials, warn_independent_sampling=False,
                source_trials=list(source_trials) or None,
            )
        if name == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(2, n_startup_trials))
        # gp
        missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
        if missing:
            raise UserError(f"optuna sampler 'gp' needs {' and '.join(missing)}, not installed here "
                            f"({install_hint(*missing)}); or use sampler=tpe")
        return optuna.samplers.GPSampler(
            seed=seed, n_startup_trials=n_startup_trials, warn_independent_sampling=False
        )


def _throughput(result: MeasureResult) -> float | None:
    """What the study maximises: 1 / median latency (1/s); None for a failure."""
    return 1.0 / result.median if result.ok and result.median > 0 else None


def _result_attrs(result: MeasureResult) -> dict[str, Any]:
    """The user attributes a measured trial carries: its status, and its latency (s) if it ran."""
    attrs: dict[str, Any] = {"status": result.status.value}
    if _throughput(result) is not None:
        attrs["latency_s"] = result.median
    return attrs


class OptunaSearch:
    """Optuna's ask/tell over the decision space, in the encoding its sampler can model (module docstring)."""

    def __init__(
        self,
        space: DecisionSpace,
        *,
        seed: int,
        cost_model: ConfigScorer | None = None,
        task_id: str = "",
        sampler: str = OPTIONS["sampler"].default,
        n_startup_trials: int = OPTIONS["n_startup_trials"].default,
        storage: str = OPTIONS["storage"].default,
        model_share: float = OPTIONS["model_share"].default,
        pool_size: int = OPTIONS["pool_size"].default,
        max_retries: int = OPTIONS["max_retries"].default,
    ) -> None:
        _quiet_optuna()
        self.space = space
        self.cost_model = cost_model
        self.n_startup_trials = n_startup_trials
        self.model_share = min(1.0, max(0.0, model_share))
        self.pool_size = max(1, pool_size)
        self.max_retries = max(1, max_retries)
        self._rng = np.random.default_rng(seed)
        self._seed = seed
        self._cmaes_start_pending = sampler == "cmaes"
        self.encoding: Encoding = (OrdinalEncoding if sampler in RELATIVE_SAMPLERS else CategoricalEncoding)(space)
        self.study = optuna.create_study(
            direction="maximize",
            sampler=make_sampler(sampler, seed=seed, n_startup_trials=n_startup_trials),
            storage=storage or None,
            study_name=self._study_name(task_id) if storage else None,
            load_if_exists=bool(storage),
        )
        self._running: dict[Config, Trial] = {}  # asked, waiting for its result
        self._repeats: dict[Config, list[Trial]] = {}  # repeated suggestions of a running config
        self._known: dict[Config, float | None] = {}  # told: throughput (1/s), None for a failure
        self._load_existing()

    # ------------------------------------------------------------------ study <-> configs
    def _study_name(self, task_id: str) -> str:
        """``task_id``, else a hash of the space; ``:ordinal`` appended for the ordinal encoding, since a study
        whose trials mix the two encodings has no parameter common to all but ``sketch`` to model."""
        if not task_id:
            desc = json.dumps(self.encoding.describe()).encode()
            return "autosearch-" + hashlib.blake2b(desc, digest_size=6).hexdigest()
        return task_id if isinstance(self.encoding, CategoricalEncoding) else f"{task_id}:{self.encoding.name}"

    def _load_existing(self) -> None:
        """Configs a reloaded study already measured: never ask them again, answer repeats from them."""
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            raw = trial.user_attrs.get(_ATTR_CONFIG)
            if raw is None:
                continue
            config = Config.from_json(json.loads(raw))
            if self.space.contains(config):
                self._known[config] = trial.value if trial.state == TrialState.COMPLETE else None
        if self._known:
            log.info("optuna: study %s holds %d measured configs", self.study.study_name, len(self._known))

    def _suggest(self, trial: Trial) -> Config:
        return self.encoding.suggest(trial)

    def _finished_trial(self, config: Config, result: MeasureResult) -> optuna.trial.FrozenTrial:
        """A measured config as a finished trial, with the distributions ``_suggest`` uses."""
        value = _throughput(result)
        return optuna.trial.create_trial(
            state=TrialState.FAIL if value is None else TrialState.COMPLETE, value=value,
            params=self.params(config), distributions=self.encoding.distributions(config),
            user_attrs={_ATTR_CONFIG: config_key(config), "source": "resume", **_result_attrs(result)},
        )

    def params(self, config: Config) -> dict[str, Any]:
        """The Optuna parameters of a config (for ``enqueue_trial``)."""
        return self.encoding.params(config)

    def _asked(self, config: Config) -> bool:
        return config in self._known or config in self._running

    def _tell_trial(self, trial: Trial, value: float | None) -> None:
        if value is None:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.study.tell(trial, value)

    # ------------------------------------------------------------------ ask / tell
    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        if n <= 0:
            return out
        self._warm_start_cmaes()
        if self.cost_model is not None and (self._n_ok() >= self.n_startup_trials or self._model_ready()):
            for config in self._model_picks(round(self.model_share * n)):
                taken = self._ask_enqueued(config, source="cost_model")
                if taken is not None:
                    out.append(taken)
        repeats = 0
        while len(out) < n:
            trial = self.study.ask()
            suggested = self._suggest(trial)
            taken = self._take(trial, suggested)
            if taken is not None:
                out.append(taken)
                repeats = 0
                continue
            repeats += 1
            if repeats >= self.max_retries:
                fresh = self._fresh_near(suggested)
                taken = None if fresh is None else self._ask_enqueued(fresh, source="neighbour")
                if taken is None:
                    log.info("optuna: no unasked config found; returning %d of %d", len(out), n)
                    break
                out.append(taken)
                repeats = 0
        return out

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for config, result in zip(configs, results):
            trial = self._running.pop(config, None)
            if trial is None:
                log.warning("optuna: told a config it did not ask for or already told: %s", config)
                continue
            value = _throughput(result)
            self._known[config] = value
            for key, attr in _result_attrs(result).items():
                trial.set_user_attr(key, attr)
            self._tell_trial(trial, value)
            for repeat in self._repeats.pop(config, []):
                self._tell_trial(repeat, value)

    def resume(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Logged trials become finished trials of the study (unless a reloaded study holds them already),
        so the sampler learns from them; a config outside the space's choices is only never asked."""
        trials = []
        for config, result in zip(configs, results):
            if self._asked(config):
                continue
            self._known[config] = _throughput(result)
            if self.space.contains(config):
                trials.append(self._finished_trial(config, result))
        self.study.add_trials(trials)

    # ------------------------------------------------------------------ helpers
    def _warm_start_cmaes(self) -> None:
        """When CMA-ES is about to start (``n_startup_trials`` finished ok, resumed ones included), start it
        from the best of them rather than from the centre of the space, which would throw their results away.

        Optuna's ``CmaEsSampler`` takes its warm-start trials in its constructor, so the sampler is replaced
        once, by one seeded from the strategy's seed, but not with it: its random fallback would replay the
        start-up trials' configs. A study that already holds CMA-ES's state (reloaded from storage)
        goes on from that state: Optuna restores it before it looks at the warm-start trials."""
        if not self._cmaes_start_pending:
            return
        finished = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(finished) < self.n_startup_trials:
            return
        self._cmaes_start_pending = False
        if len(finished) >= CMAES_WARM_START_MIN:
            self.study.sampler = make_sampler(
                "cmaes", seed=self._seed + 1, n_startup_trials=self.n_startup_trials, source_trials=finished
            )

    def _model_ready(self) -> bool:
        """A scorer that ranks before this task's first measurement (pre-trained, or warm-started on other
        tasks): its picks need no start-up trials."""
        return bool(getattr(self.cost_model, "fitted", False))

    def _n_ok(self) -> int:
        return sum(v is not None for v in self._known.values())

    def _ask_enqueued(self, config: Config, *, source: str) -> Config | None:
        """Enqueue a chosen config and ask it, so it becomes an ordinary trial of the study.

        Returns the config the trial got: ``config``, unless the study held an older waiting trial (a
        reloaded study, or another process); that one is taken as a suggestion like any other.
        """
        self.study.enqueue_trial(self.params(config), user_attrs={"source": source})
        trial = self.study.ask()
        return self._take(trial, self._suggest(trial))

    def _take(self, trial: Trial, config: Config) -> Config | None:
        """Register a new trial's config; a repeat is answered (or parked) and gives None."""
        if not self._asked(config):
            trial.set_user_attr(_ATTR_CONFIG, config_key(config))
            self._running[config] = trial
            return config
        trial.set_user_attr("repeat", True)
        if config in self._known:
            self._tell_trial(trial, self._known[config])
        else:
            self._repeats.setdefault(config, []).append(trial)
        return None

    def _fresh_near(self, config: Config) -> Config | None:
        """An unasked config near ``config`` (1-4 mutations), else an unasked random one."""
        for distance in (1, 1, 2, 2, 3, 4):
            candidate = config
            for _ in range(distance):
                candidate = self.space.mutate(candidate, self._rng)
            if not self._asked(candidate):
                return candidate
        for _ in range(100):
            candidate = self.space.sample(self._rng)
            if not self._asked(candidate):
                return candidate
        return None

    def _model_picks(self, n: int) -> list[Config]:
        """The n best-scored of a pool of unasked candidates, at least two decisions apart when possible."""
        if n <= 0:
            return []
        assert self.cost_model is not None
        # mutated from the best known configs the encoding can express: a resumed log also holds configs as TVM
        # applied them, whose compute location may be legal only with their own tiles (outside the choices)
        ok = sorted((c for c, v in self._known.items() if v is not None and self.space.contains(c)),
                    key=lambda c: -self._known[c])[:8]
        size = min(self.pool_size, CANDIDATES_PER_PICK * n)
        pool: dict[Config, None] = {}
        for i in range(size * 4):
            if len(pool) >= size:
                break
            if i % 2 == 0 and ok:
                candidate = ok[(i // 2) % len(ok)]
                for _ in range(1 + int(self._rng.integers(2))):
                    candidate = self.space.mutate(candidate, self._rng)
            else:
                candidate = self.space.sample(self._rng)
            if not self._asked(candidate):
                pool[candidate] = None
        candidates = list(pool)
        if not candidates:
            return []
        scores = np.asarray(self.cost_model.score(candidates), dtype=np.float64)
        order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")
        return pick_diverse([candidates[int(i)] for i in order], n)


# --cost-model auto guides it: the model ranks a pool of ``pool_size`` candidates per batch, a second or two
AUTO_GUIDANCE = True
