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

The shipped set (``known_schedules.jsonl.gz`` beside this module) is written by ``experiments/known_schedules.py``
from tuning logs of the development machines; ``run --known-schedules none`` leaves it out (a study comparing
strategies by the measurements they need does), and a tuning log or database path uses that instead.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autosearch.errors import UserError
from autosearch.frontend.target import family_of_mcpu
from autosearch.types import Config, Record

SOURCE = "known"  # the strategy name of the trials measured from known schedules (their log records)
SHIPPED = os.path.join(os.path.dirname(__file__), "known_schedules.jsonl.gz")
PER_CPU = 3  # configs kept per task and measuring CPU: the best few, as the ranks of two CPUs agree most there
FORMAT = 1


@dataclass(frozen=True)
class KnownSchedule:
    """One config of a task as another machine measured it."""

    config: Config
    seconds: float  # its median there
    cpu: str  # that machine's LLVM CPU name (the target's ``mcpu``)


class KnownSchedules:
    """Per workload key, the best configs of each CPU that measured the task, fastest first."""

    def __init__(self, by_key: Mapping[str, Sequence[KnownSchedule]], *, source: str = "") -> None:
        self.by_key = {key: tuple(entries) for key, entries in by_key.items()}
        self.source = source

    # ------------------------------------------------------------------ building
    @classmethod
    def from_records(cls, records: Iterable[Record], *, per_cpu: int = PER_CPU,
                     exclude_cpus: Sequence[str] = (), source: str = "") -> KnownSchedules:
        """The ``per_cpu`` fastest distinct configs of each (task, CPU) among the valid timings in ``records``
        (trials and re-timings; a config timed more than once counts with its median of medians). A crashed,
        hung or wrong kernel is never known: only ``ok`` timings count, and a config that ever failed on a CPU
        is left out for that CPU."""
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
        return cls(by_key, source=source)

    # ------------------------------------------------------------------ files
    def write(self, path: str) -> None:
        """One JSON line per task (gzipped if ``path`` ends in ``.gz``): its key and its known configs."""
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "wt", encoding="utf-8") as fh:
            for key in sorted(self.by_key):
                fh.write(json.dumps({"v": FORMAT, "key": key, "known": [
                    {"cpu": e.cpu, "seconds": e.seconds, "config": e.config.to_json()} for e in self.by_key[key]]},
                    sort_keys=True) + "\n")

    @classmethod
    def read(cls, path: str) -> KnownSchedules:
        """A file :meth:`write` wrote, or a tuning log or MetaSchedule database directory (its best configs)."""
        if not os.path.exists(path):
            raise UserError(f"known schedules not found: {path}")
        if os.path.isdir(path) or not _is_known_file(path):
            from autosearch.deploy.database import read_records

            return cls.from_records(read_records(path).records, source=path)
        by_key: dict[str, list[KnownSchedule]] = {}
        opener = gzip.open if path.endswith(".gz") else open
        where = [0]  # the line being read, for the error
        try:
            with opener(path, "rt", encoding="utf-8") as fh:
                for line in fh:
                    where[0] += 1
                    obj = json.loads(line)
                    by_key[str(obj["key"])] = [KnownSchedule(Config.from_json(e["config"]), float(e["seconds"]),
                                                             str(e["cpu"])) for e in obj["known"]]
        except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{path}:{where[0]}: not a known-schedules file ({type(exc).__name__}: {exc})") from exc
        return cls(by_key, source=path)

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

    def describe(self, keys: Iterable[str], *, host_cpu: str = "", ranked: bool = False) -> str:
        """One line for a run's header: how many of the tasks ``keys`` have known schedules, and from where, the
        CPUs in the order their configs are measured (:meth:`for_task`), or, ``ranked`` by a pre-trained cost
        model, in the order :func:`by_prediction` gives them."""
        keys = list(keys)
        covered = [k for k in keys if self.by_key.get(k)]
        cpus = _host_first(dict.fromkeys(e.cpu for k in covered for e in self.by_key[k]), host_cpu)
        if not covered:
            return f"none of the {len(keys)} tasks is among {self.source or 'them'}"
        where = ", ".join(f"{family_of_mcpu(c)} {c}{' (this CPU)' if c == host_cpu else ''}" for c in cpus)
        order = ("as the cost model ranks them, the first CPU's best among the first two" if ranked
                 else "in that order")
        return (f"{len(covered)} of {len(keys)} tasks measured before on {where}: their best configs are measured "
                f"first, {order}")


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
