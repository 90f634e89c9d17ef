"""The study's configuration file (TOML): methods x tasks x seeds x budgets, checked once, as typed records.

::

    [study]
    name = "study"              # results in experiments/results/NAME/, tables in experiments/results/NAME.*
    seeds = [0, 1, 2]
    budgets = [16, 32, 64]      # read off one run per (method, task, seed) of max(budgets) trials
    batch = 16                  # trials per batch, for every method (MetaSchedule: num_trials_per_iter)
    retime_rounds = 3           # fresh measuring processes that re-time every method's best configs
    reference = "metaschedule"  # the method win rates and the target (its best at max(budgets)) refer to
    readme = true               # whether --aggregate --readme may write README's study block
    smoke = false               # a functional check: its tables say their numbers mean nothing
    tasks = ["tiny-yolov2:1x32x104x104->1x64x104x104@3x3/direct", ...]   # see experiments/lib/tasks.py

    [[method]]
    name = "optuna-tpe"
    strategy = "optuna"          # any registered strategy
    options = { sampler = "tpe" }
    cost_model = "auto"          # as run --cost-model: auto, none, xgb, pretrained, a directory, ...

    [[method]]
    name = "metaschedule+droplet"
    kind = "metaschedule"        # ms.tune_tir on the same design space and evaluator
    post_optimization = true     # then Droplet Search ...
    search_trials = 32           # ... after this many trials of the evolutionary search (default: half the budget)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from experiments.lib.tasks import TaskSpec

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package (pip install tomli)
    import tomli as tomllib

KINDS = ("autosearch", "metaschedule")


class ConfigError(ValueError):
    """A configuration the study cannot run; the message is one line for the user."""


@dataclass(frozen=True)
class Method:
    """One way of tuning a task: an autosearch strategy (with options and a cost model) or a MetaSchedule peer."""

    name: str
    kind: str = "autosearch"
    strategy: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    cost_model: str = "none"
    post_optimization: bool = False
    search_trials: int = 0  # metaschedule + droplet: evolutionary trials before Droplet takes over

    @property
    def peer(self) -> bool:
        return self.kind == "metaschedule"


@dataclass(frozen=True)
class StudyConfig:
    name: str
    path: str
    tasks: tuple[TaskSpec, ...]
    methods: tuple[Method, ...]
    seeds: tuple[int, ...]
    budgets: tuple[int, ...]
    batch: int = 16
    retime_rounds: int = 3
    reference: str = "metaschedule"
    readme: bool = False
    smoke: bool = False

    @property
    def max_budget(self) -> int:
        return max(self.budgets)

    def method(self, name: str) -> Method:
        return next(m for m in self.methods if m.name == name)


def _method(raw: dict[str, Any], budget: int) -> Method:
    known = {"name", "kind", "strategy", "options", "cost_model", "post_optimization", "search_trials"}
    name = raw.get("name")
    if not name or not isinstance(name, str) or "/" in name:
        raise ConfigError(f"every [[method]] needs a name without '/': got {name!r}")
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"method {name!r}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    kind = raw.get("kind", "autosearch")
    if kind not in KINDS:
        raise ConfigError(f"method {name!r}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if kind == "autosearch":
        from autosearch.errors import UserError
        from autosearch.search.strategy import parse_options

        if not raw.get("strategy"):
            raise ConfigError(f"method {name!r}: an autosearch method needs a strategy")
        try:
            options = parse_options(raw["strategy"], raw.get("options", {}))
        except UserError as exc:
            raise ConfigError(f"method {name!r}: {exc}") from exc
        return Method(name=name, strategy=raw["strategy"], options=options,
                      cost_model=str(raw.get("cost_model", "none")))
    post = bool(raw.get("post_optimization", False))
    search = int(raw.get("search_trials", budget // 2 if post else budget))
    if not 1 <= search <= budget:
        raise ConfigError(f"method {name!r}: search_trials must be between 1 and the largest budget ({budget})")
    return Method(name=name, kind=kind, post_optimization=post, search_trials=search)


def load_config(path: str) -> StudyConfig:
    """Read and check a study file; :class:`ConfigError` with one line for anything wrong in it."""
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    study = raw.get("study", {})
    budgets = tuple(sorted(int(b) for b in study.get("budgets", (16, 32, 64))))
    if not budgets or budgets[0] < 1:
        raise ConfigError(f"{path}: budgets must be positive trial counts")
    try:
        tasks = tuple(TaskSpec.parse(t) for t in study.get("tasks", ()))
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if not tasks:
        raise ConfigError(f"{path}: [study] tasks is empty")
    if len({t.slug for t in tasks}) != len(tasks):
        raise ConfigError(f"{path}: a task is listed twice")
    methods = tuple(_method(m, budgets[-1]) for m in raw.get("method", ()))
    if not methods:
        raise ConfigError(f"{path}: no [[method]]")
    if len({m.name for m in methods}) != len(methods):
        raise ConfigError(f"{path}: two methods share a name")
    reference = str(study.get("reference", "metaschedule"))
    if reference not in {m.name for m in methods}:
        raise ConfigError(f"{path}: the reference method {reference!r} is not among the methods")
    seeds = tuple(int(s) for s in study.get("seeds", (0,)))
    name = str(study.get("name") or os.path.splitext(os.path.basename(path))[0])
    batch, rounds = int(study.get("batch", 16)), int(study.get("retime_rounds", 3))
    if batch < 1 or rounds < 1 or not seeds:
        raise ConfigError(f"{path}: batch and retime_rounds must be at least 1, and seeds not empty")
    return StudyConfig(name=name, path=os.path.abspath(path), tasks=tasks, methods=methods, seeds=seeds,
                       budgets=budgets, batch=batch, retime_rounds=rounds, reference=reference,
                       readme=bool(study.get("readme", False)), smoke=bool(study.get("smoke", False)))
