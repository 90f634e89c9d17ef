"""Known schedules: the best configs other machines measured for the same tasks, measured first on this one.

A task's workload key is the structural hash of its TensorIR, so the same layer of the same model (a built-in
model, or anybody's ONNX file with that layer's shapes and epilogue) has the same key on every machine, and a
config of its decision space replays on any CPU whose space holds it. How well a schedule transfers was measured
(docs/results.md): the configs of one task rank alike on an AMD EPYC and an Intel Xeon (pairwise 0.90 against a
re-timing ceiling of 0.92 on one machine), so the other family's best few are a strong first batch. TVM had this
for AutoTVM as TopHub (pre-tuned logs per device); MetaSchedule seeds its evolutionary search with a database's
best records the same way (``init_measured_ratio``). Here they are measured before the strategy's first ask and
handed to it as trials measured before it existed (:meth:`~autosearch.search.strategy.Strategy.resume`), so every
strategy starts from them and none needs to know where they came from; they count against the budget like any
trial and are logged with the strategy name :data:`SOURCE`.

A task whose own key is unknown borrows the known configs of the same layer at the nearest other shape (a user's
export at another image size or batch), re-fitted to its extents (:mod:`autosearch.search.resized`): each key's
task (name, argument shapes, lowering) is kept beside its configs for that.

The shipped set (``known_schedules.jsonl.gz`` beside this module) is written by ``experiments/known_schedules.py``
from tuning logs of the development machines; ``run --known-schedules none`` leaves it out (a study comparing
strategies by the measurements they need does), and a tuning log or database path uses that instead.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autosearch.errors import UserError
from autosearch.search.resized import layer_key, shape_distance
from autosearch.tensor_units.cpu import family_of_mcpu
from autosearch.types import Config, Record

SOURCE = "known"  # the strategy name of the trials measured from known schedules (their log records)
SHIPPED = os.path.join(os.path.dirname(__file__), "known_schedules.jsonl.gz")
PER_CPU = 3  # configs kept per task and measuring CPU: the best few, as the ranks of two CPUs agree most there
RESIZED = 2 * PER_CPU  # configs a task borrows from its layer at other shapes: the nearest shape's best few
FORMAT = 1


@dataclass(frozen=True)
class KnownSchedule:
    """One config of a task as another machine measured it."""

    config: Config
    seconds: float  # its median there
    cpu: str  # that machine's LLVM CPU name (the target's ``mcpu``)


class KnownSchedules:
    """Per workload key, the best configs of each CPU that measured the task, fastest first; and per key, where
    known, the task itself (``name``, ``args``, ``lowering`` as a log's task record holds them), which finds its
    layer for a task of another shape (:meth:`for_layer`)."""

    def __init__(self, by_key: Mapping[str, Sequence[KnownSchedule]], *, tasks: Mapping[str, Mapping] | None = None,
                 source: str = "") -> None:
        self.by_key = {key: tuple(entries) for key, entries in by_key.items()}
        self.tasks = {key: {"name": str(t["name"]), "args": [[list(s), str(d)] for s, d in t["args"]],
                            "lowering": dict(t.get("lowering") or {})}
                      for key, t in (tasks or {}).items() if key in self.by_key}
        self.source = source
        self._layers: dict[tuple, list[str]] | None = None  # layer_key -> keys, built on first use

    # ------------------------------------------------------------------ building
    @classmethod
    def from_records(cls, records: Iterable[Record], *, per_cpu: int = PER_CPU, exclude_cpus: Sequence[str] = (),
                     tasks: Mapping[str, Mapping] | None = None, source: str = "") -> KnownSchedules:
        """The ``per_cpu`` fastest distinct configs of each (task, CPU) among the valid timings in ``records``
        (trials and re-timings; a config timed more than once counts with its median of medians). A crashed,
        hung or wrong kernel is never known: only ``ok`` timings count, and a config that ever failed on a CPU
        is left out for that CPU. ``tasks``: the logs' task records by key (:attr:`LogContents.tasks`)."""
        timings: dict[tuple[str, str], dict[Config, list[float]]] = {}
        failed: set[tuple[str, str, Config]] = set()
        for rec in records:
            if rec.kind not in ("trial", "retime") or rec.config is None:
                continue
            cpu = rec.built_for
            if not cpu or cpu in exclude_cpus or rec.stood_in:  # another CPU's timings of code built for this one
                continue
            if not rec.result.ok:
                failed.add((rec.task_key, cpu, rec.config))
                continue
            timings.setdefault((rec.task_key, cpu), {}).setdefault(rec.config, []).append(rec.result.median)
        by_key: dict[str, list[KnownSchedule]] = {}
        for (key, cpu), configs in sorted(timings.items()):
            ranked = sorted((sorted(t)[len(t) // 2], json.dumps(c.to_json()), c) for c, t in configs.items()
                            if (key, cpu, c) not in failed)
            by_key.setdefault(key, []).extend(KnownSchedule(c, s, cpu) for s, _, c in ranked[:per_cpu])
        return cls(by_key, tasks=tasks, source=source)

    # ------------------------------------------------------------------ files
    def write(self, path: str) -> None:
        """One JSON line per task (gzipped if ``path`` ends in ``.gz``): its key, its known configs and, where
        known, the task (name, argument shapes, lowering)."""
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "wt", encoding="utf-8") as fh:
            for key in sorted(self.by_key):
                line = {"v": FORMAT, "key": key, "known": [
                    {"cpu": e.cpu, "seconds": e.seconds, "config": e.config.to_json()} for e in self.by_key[key]]}
                if key in self.tasks:
                    line["task"] = self.tasks[key]
                fh.write(json.dumps(line, sort_keys=True) + "\n")

    @classmethod
    def read(cls, path: str) -> KnownSchedules:
        """A file :meth:`write` wrote, or a tuning log or MetaSchedule database directory (its best configs)."""
        if not os.path.exists(path):
            raise UserError(f"known schedules not found: {path}")
        if os.path.isdir(path) or not _is_known_file(path):
            from autosearch.frontend.database_files import read_records

            contents = read_records(path)
            return cls.from_records(contents.records, tasks=contents.tasks, source=path)
        by_key: dict[str, list[KnownSchedule]] = {}
        tasks: dict[str, Mapping] = {}
        opener = gzip.open if path.endswith(".gz") else open
        where = [0]  # the line being read, for the error
        try:
            with opener(path, "rt", encoding="utf-8") as fh:
                for line in fh:
                    where[0] += 1
                    obj = json.loads(line)
                    by_key[str(obj["key"])] = [KnownSchedule(Config.from_json(e["config"]), float(e["seconds"]),
                                                             str(e["cpu"])) for e in obj["known"]]
                    if "task" in obj:
                        tasks[str(obj["key"])] = obj["task"]
            known = cls(by_key, tasks=tasks, source=path)
        except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{path}:{where[0]}: not a known-schedules file ({type(exc).__name__}: {exc})") from exc
        return known

    # ------------------------------------------------------------------ use
    def cpus(self) -> list[str]:
        """The CPUs whose measurements are known, in order of first appearance."""
        return list(dict.fromkeys(e.cpu for entries in self.by_key.values() for e in entries))

    def for_task(self, key: str, *, host_cpu: str, fits=lambda config: True) -> list[Config]:
        """The known configs of the task ``key`` in the order to measure them: rank by rank across the CPUs that
        measured it (each CPU's best before any CPU's second), the host's own CPU first, then its family's, then
        the others; each config once, and only those ``fits`` accepts (the task's space here can replay)."""
        entries = self.by_key.get(key, ())
        cpus = _host_first(dict.fromkeys(e.cpu for e in entries), host_cpu)
        ranked = {cpu: [e.config for e in entries if e.cpu == cpu] for cpu in cpus}
        out: list[Config] = []
        for rank in range(max((len(v) for v in ranked.values()), default=0)):
            for cpu in cpus:
                if rank < len(ranked[cpu]):
                    config = ranked[cpu][rank]
                    if config not in out and fits(config):
                        out.append(config)
        return out

    def layer_sources(self, name: str, args: Sequence, lowering: Mapping) -> list[str]:
        """The keys of known tasks of the layer ``name``/``args``/``lowering`` at other shapes
        (:func:`~autosearch.search.resized.layer_key`), nearest shape first; none of them with these shapes."""
        if self._layers is None:
            self._layers = {}
            for key, task in self.tasks.items():
                layer = layer_key(task["name"], task["args"], task["lowering"])
                if layer is not None:
                    self._layers.setdefault(layer, []).append(key)
        layer = layer_key(name, args, lowering)
        shapes = [[list(s), str(d)] for s, d in args]
        keys = [k for k in self._layers.get(layer, ()) if self.tasks[k]["args"] != shapes] if layer else []
        return sorted(keys, key=lambda k: (shape_distance(args, self.tasks[k]["args"]), k))

    def for_layer(self, name: str, args: Sequence, lowering: Mapping, *, host_cpu: str,
                  refit: Callable[[Config], Config | None], fits=lambda config: True, limit: int = RESIZED
                  ) -> list[Config]:
        """For a task with no known schedules of its own: the known configs of its layer at other shapes
        (:meth:`layer_sources`), each made a config of this task by ``refit`` (None: it does not fit), nearest shape
        first and, within a shape, in :meth:`for_task`'s order; each config once, only those ``fits`` accepts, at
        most ``limit``."""
        out: list[Config] = []
        for key in self.layer_sources(name, args, lowering):
            for config in self.for_task(key, host_cpu=host_cpu):
                fitted = refit(config)
                if fitted is not None and fitted not in out and fits(fitted):
                    out.append(fitted)
                    if len(out) >= limit:
                        return out
        return out

    def describe(self, keys: Iterable[str], *, host_cpu: str = "", ranked: bool = False,
                 tasks: Iterable[Any] = ()) -> str:
        """One line for a run's header: how many of the tasks ``keys`` have known schedules, and from where, the
        CPUs in the order their configs are measured (:meth:`for_task`), or, ``ranked`` by a pre-trained cost
        model, in the order :func:`by_prediction` gives them; and how many of ``tasks`` (objects with
        ``workload_key``, ``name``, ``args`` and ``lowering``) with none of their own borrow their layer's at
        another shape (:meth:`for_layer`)."""
        keys = list(keys)
        covered = [k for k in keys if self.by_key.get(k)]
        resized = sum(1 for t in tasks if not self.by_key.get(t.workload_key)
                      and self.layer_sources(t.name, t.args, t.lowering))
        cpus = _host_first(dict.fromkeys(e.cpu for k in covered for e in self.by_key[k]), host_cpu)
        borrowed = (f"{resized} {'task borrows' if resized == 1 else 'tasks borrow'} the known configs of the "
                    "same layer at another shape, re-fitted to theirs")
        if not covered:
            return (f"none of the {len(keys)} tasks is among {self.source or 'them'}"
                    + (f"; {borrowed}" if resized else ""))
        where = ", ".join(f"{family_of_mcpu(c)} {c}{' (this CPU)' if c == host_cpu else ''}" for c in cpus)
        order = ("as the cost model ranks them, the first CPU's best among the first two" if ranked
                 else "in that order")
        return (f"{len(covered)} of {len(keys)} tasks measured before on {where}: their best configs are measured "
                f"first, {order}" + (f"; {borrowed}" if resized else ""))


def by_score(configs: Sequence[Any], scores: Sequence[float]) -> list[Any]:
    """``configs`` highest score first; equal scores keep the given order."""
    return [configs[i] for i in sorted(range(len(configs)), key=lambda i: (-float(scores[i]), i))]


def by_prediction(configs: Sequence[Config], scores: Sequence[float]) -> list[Config]:
    """``configs`` in the order :meth:`KnownSchedules.for_task` gives them, measured instead as a pre-trained cost
    model ranks them (``scores``, higher first; equal scores keep the given order), except that the given first,
    the host's own best or its nearest CPU's, goes second if the model did not rank it first.

    Why: on a slow CPU a short run gives most tasks only their first few trials, and where this CPU's own records
    came from such runs its own best is often a poor kernel; the model, which ranks every CPU's bests together,
    picks a faster first more often. But a model can also rank first a config that is slow on this CPU's units,
    so the nearest CPU's best stays among the first two, which a task's probe measures
    (``experiments/known_order.py`` compares the orders on real timings)."""
    ranked = by_score(configs, scores)
    first = ranked[:1] + [c for c in configs[:1] if c not in ranked[:1]]
    return first + [c for c in ranked if c not in first]


def _host_first(cpus: Iterable[str], host_cpu: str) -> list[str]:
    """``cpus`` in the order their configs are measured on ``host_cpu``: itself, its family, the others."""
    host_family = family_of_mcpu(host_cpu)
    return sorted(cpus, key=lambda c: (c != host_cpu, family_of_mcpu(c) != host_family, c))


def _is_known_file(path: str) -> bool:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            first = json.loads(fh.readline() or "{}")
    except (OSError, ValueError, EOFError):
        return False
    return isinstance(first, dict) and "known" in first and "key" in first


def load(spec: str | None) -> KnownSchedules | None:
    """``shipped`` (the set autosearch ships; None if this installation has none), ``none``/None, or a path."""
    if spec in (None, "", "none"):
        return None
    if spec == "shipped":
        return KnownSchedules.read(SHIPPED) if os.path.exists(SHIPPED) else None
    return KnownSchedules.read(spec)
