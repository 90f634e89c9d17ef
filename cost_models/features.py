"""Features of measured schedules: TVM's per-store program features, pooled vectors, decision encodings.

Feature sets, as kinds of model input (``INPUT_KINDS``):

- ``loop`` (the default of the tabular models): :mod:`cost_models.loop_features`, a model of what the
  CPU does with the schedule (vector loop, unrolled body, accesses kept in registers, an instruction
  and cache-traffic estimate), read off the scheduled TensorIR. On the 13-task YOLO dataset it ranks
  held-out tasks 0.79 right against 0.72 for the same XGBoost on ``pooled``.
- ``per_store``: MetaSchedule's ``PerStoreFeature`` (the extractor its ``XGBModel`` uses), one
  164-wide row per buffer store of the scheduled program (1-3 stores for a fused conv2d). Stacked
  into a 3-D array (records x stores x 164) padded with NaN rows, so a model can tell padding from
  a real store: the sum-pooling MLP masks them out.
- ``pooled``: sum, max and mean over the stores plus log2 FLOPs of the task, a fixed-length vector
  for tabular models (TenSet pools the same way for its tree models).
- ``pooled+loop``: both, side by side.
- ``asm`` / ``loop+asm``: :mod:`cost_models.asm_features`, the instruction mix of the compiled kernel's
  hot loops (FMA lanes per cycle, spills, shuffles, gathers) read off its x86-64 assembly; one LLVM
  build per schedule (0.4-1 s), for the best accuracy: 0.84 held-out pairwise with ``loop+asm`` (18 tasks).
- ``encoding``: :meth:`DecisionSpace.encode` of the config, padded with zeros to a common width.
  It needs no trace replay (microseconds per config), but only means something within one task.

``program`` is the fourth input kind, for MetaSchedule's own ``XGBModel`` (which featurises itself):
an object array of :class:`Program` (the task's TuneContext and a ``MeasureCandidate``).

A record's schedule is rebuilt from its log line alone: the task from the log's task header
(``TuningTask.from_json``), the schedule by replaying the logged trace JSON with
``Trace.apply_json_to_schedule`` on a fresh ``Schedule(task.mod)``. Replaying the postprocessor part of
the trace gives the same program (and features) as ``DecisionSpace.apply``.

Cost, on the committed dataset (tiny-YOLOv2 conv2d tasks, 2 shared cores): 11-20 ms per record for
replay + ``PerStoreFeature`` (``FeatureDataset.secs_per_record``), plus ~3 ms for the loop features
(``loop_secs_per_record``); for a config, ``DecisionSpace.apply`` + extraction, 17-27 ms. The decision
encoding costs ~0.02 ms.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch.records import Config, LogContents, Record
from cost_models.asm_features import WIDTH as ASM_WIDTH
from cost_models.asm_features import asm_features
from cost_models.loop_features import WIDTH as LOOP_WIDTH
from cost_models.loop_features import Machine, loop_features

log = logging.getLogger(__name__)

N_STORE_FEATURES = 164  # PerStoreFeature() with its defaults (5 buffers per store, 10 curve samples)
POOLED_WIDTH = 3 * N_STORE_FEATURES + 1
INPUT_KINDS = ("loop", "pooled", "pooled+loop", "asm", "loop+asm", "per_store", "encoding", "program")
# fixed-length vectors: any regressor takes them
TABULAR_KINDS = ("loop", "pooled", "pooled+loop", "asm", "loop+asm", "encoding")
_SCHEDULE_SEED = 1_234_567_891  # as autosearch.space: every sampled decision is replayed explicitly


# ---------------------------------------------------------------------------------------------- TVM side
@dataclass(frozen=True)
class Program:
    """One scheduled program ready for MetaSchedule's cost-model API (what ``tvm-xgb`` consumes)."""

    context: Any  # ms.TuneContext of the task (its mod is the unscheduled workload)
    candidate: Any  # ms.MeasureCandidate(sch, args_info)
    task_key: str
    features: np.ndarray | None = None  # its PerStoreFeature matrix, when already extracted


class TaskFeaturizer:
    """Per-store features of schedules of one task, through MetaSchedule's own extractor.

    Holds the task's ``TuneContext`` (the extractor reads the target from it) and argument info, so
    each schedule costs one trace replay (~3 ms) plus one extraction (~2 ms) for a conv2d here.
    """

    def __init__(self, task) -> None:
        from tvm.s_tir import meta_schedule as ms

        from autosearch.tvm_compat import import_tensor_intrinsics

        target = task.target
        import_tensor_intrinsics(str(target.kind.name), str(dict(target.export()).get("mtriple", "")))
        self.task = task
        self.context = ms.TuneContext(mod=task.mod, target=target, num_threads=1, rand_state=_SCHEDULE_SEED)
        self.args_info = ms.arg_info.ArgInfo.from_entry_func(task.mod, remove_preproc=True)
        self.extractor = ms.feature_extractor.PerStoreFeature()
        self.machine = Machine.from_target(target)

    def schedule_from_trace(self, trace_json: Any):
        """Replay a logged trace (postprocessors included) on a fresh schedule of the task."""
        from tvm.s_tir import Schedule
        from tvm.s_tir.schedule import Trace

        sch = Schedule(self.task.mod, seed=_SCHEDULE_SEED, debug_mask=0)
        Trace.apply_json_to_schedule(trace_json, sch)
        return sch

    def schedule_from_mod(self, mod):
        """A schedule wrapping an already scheduled module (``Applied.mod``): extraction reads only its IR."""
        from tvm.s_tir import Schedule

        return Schedule(mod, seed=_SCHEDULE_SEED, debug_mask=0)

    def candidates(self, schedules: Sequence[Any]) -> list[Any]:
        from tvm.s_tir import meta_schedule as ms

        return [ms.MeasureCandidate(sch, self.args_info) for sch in schedules]

    def programs(self, schedules: Sequence[Any]) -> list[Program]:
        return [Program(self.context, c, self.task.workload_key) for c in self.candidates(schedules)]

    def loop(self, schedules: Sequence[Any]) -> list[np.ndarray]:
        """One loop-feature vector (``loop_features.WIDTH``) per schedule."""
        return [loop_features(sch.mod, self.task.flops, self.machine) for sch in schedules]

    def asm(self, schedules: Sequence[Any]) -> list[np.ndarray]:
        """One assembly-feature vector (``asm_features.WIDTH``) per schedule: one LLVM build each."""
        return asm_features([sch.mod for sch in schedules], self.task.target)

    def per_store(self, schedules: Sequence[Any]) -> list[np.ndarray]:
        """One (stores x 164) float32 matrix per schedule."""
        if not schedules:
            return []
        tensors = self.extractor.extract_from(self.context, self.candidates(schedules))
        return [t.numpy().astype(np.float32).reshape(-1, N_STORE_FEATURES) for t in tensors]


# ---------------------------------------------------------------------------------------------- arrays
def stack_per_store(matrices: Sequence[np.ndarray], n_stores: int | None = None) -> np.ndarray:
    """(records x stores x 164), padding rows NaN: the per-store input of the sum-pooling MLP."""
    width = max([m.shape[0] for m in matrices] + [n_stores or 1])
    out = np.full((len(matrices), width, N_STORE_FEATURES), np.nan, dtype=np.float32)
    for i, m in enumerate(matrices):
        out[i, : m.shape[0]] = m
    return out


def store_mask(X: np.ndarray) -> np.ndarray:
    """Which rows of a stacked per-store array are real stores (not NaN padding)."""
    return ~np.isnan(X[..., 0])


def pool(matrices: Sequence[np.ndarray] | np.ndarray, flops: Sequence[float] | np.ndarray) -> np.ndarray:
    """Sum, max and mean over stores, then log2 FLOPs: (records x 493), the tabular models' input.

    Accepts a list of per-record matrices or a stacked NaN-padded array.
    """
    if isinstance(matrices, np.ndarray) and matrices.ndim == 3:
        matrices = [m[store_mask(m[None])[0]] for m in matrices]
    out = np.zeros((len(matrices), POOLED_WIDTH), dtype=np.float32)
    for i, m in enumerate(matrices):
        if m.shape[0]:
            out[i, :N_STORE_FEATURES] = m.sum(axis=0)
            out[i, N_STORE_FEATURES:2 * N_STORE_FEATURES] = m.max(axis=0)
            out[i, 2 * N_STORE_FEATURES:3 * N_STORE_FEATURES] = m.mean(axis=0)
    out[:, -1] = np.log2(np.maximum(np.asarray(flops, dtype=np.float64), 1.0))
    return out


def pad_columns(rows: Sequence[np.ndarray], width: int | None = None) -> np.ndarray:
    """Stack 1-D vectors of different lengths (decision encodings of different tasks), zero padded."""
    width = max([len(r) for r in rows] + [width or 0])
    out = np.zeros((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def normalised_throughput(latencies: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per group: best latency / latency (1.0 = fastest measured kernel of its task)."""
    latencies = np.asarray(latencies, dtype=np.float64)
    y = np.zeros_like(latencies)
    for g in np.unique(groups):
        sel = groups == g
        y[sel] = latencies[sel].min() / latencies[sel]
    return y


# ---------------------------------------------------------------------------------------------- datasets
@dataclass
class FeatureDataset:
    """Featurised valid trial records of one or more logs, one row per record, in log order.

    ``X(kind)`` gives the input of a model of that kind; ``y`` is normalised throughput per task.
    """

    task_keys: list[str]  # distinct tasks, in order of first appearance
    task_names: dict[str, str]
    groups: np.ndarray  # task index into task_keys, per record
    latency: np.ndarray  # seconds (median of repeats)
    flops: np.ndarray
    configs: list[Config | None]
    per_store: list[np.ndarray]
    encoding: list[np.ndarray | None]
    programs: list[Program | None] = field(default_factory=list)
    loop: list[np.ndarray] = field(default_factory=list)  # loop-feature vectors, when a kind needs them
    asm: list[np.ndarray] = field(default_factory=list)  # assembly-feature vectors, when a kind needs them
    extract_secs: float = 0.0  # wall time of trace replay (+ PerStoreFeature when built), all records
    loop_secs: float = 0.0  # wall time of the loop features, all records
    asm_secs: float = 0.0  # wall time of the assembly features (builds included), all records
    replay_failures: int = 0

    def __len__(self) -> int:
        return len(self.latency)

    @property
    def y(self) -> np.ndarray:
        return normalised_throughput(self.latency, self.groups)

    @property
    def secs_per_record(self) -> float:
        return self.extract_secs / max(1, len(self) + self.replay_failures)

    @property
    def loop_secs_per_record(self) -> float:
        return self.loop_secs / max(1, len(self))

    @property
    def asm_secs_per_record(self) -> float:
        return self.asm_secs / max(1, len(self))

    def X(self, kind: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Model input of ``kind`` (one of ``INPUT_KINDS``) for all rows, or for ``rows``."""
        idx = np.arange(len(self)) if rows is None else np.asarray(rows)
        if kind in ("loop", "pooled+loop", "loop+asm") and not self.loop:
            raise ValueError("dataset was built without the loop features")
        if kind in ("asm", "loop+asm") and not self.asm:
            raise ValueError("dataset was built without the assembly features")
        if kind in ("pooled", "pooled+loop", "per_store") and not self.per_store:
            raise ValueError("dataset was built without TVM's per-store features")
        if kind == "loop":
            return np.stack([self.loop[i] for i in idx]) if len(idx) else np.zeros((0, LOOP_WIDTH), np.float32)
        if kind == "pooled":
            return pool([self.per_store[i] for i in idx], self.flops[idx])
        if kind == "pooled+loop":
            return np.hstack([self.X("pooled", idx), self.X("loop", idx)])
        if kind == "asm":
            return np.stack([self.asm[i] for i in idx]) if len(idx) else np.zeros((0, ASM_WIDTH), np.float32)
        if kind == "loop+asm":
            return np.hstack([self.X("loop", idx), self.X("asm", idx)])
        if kind == "per_store":
            width = max(m.shape[0] for m in self.per_store)
            return stack_per_store([self.per_store[i] for i in idx], n_stores=width)
        if kind == "encoding":
            if any(self.encoding[i] is None for i in idx):
                raise ValueError("decision encodings need configs and the task's DecisionSpace")
            width = max(len(e) for e in self.encoding if e is not None)
            return pad_columns([self.encoding[i] for i in idx], width)  # type: ignore[misc]
        if kind == "program":
            if not self.programs:
                raise ValueError("dataset was built without programs")
            out = np.empty(len(idx), dtype=object)
            for j, i in enumerate(idx):
                out[j] = self.programs[i]
            return out
        raise ValueError(f"unknown input kind {kind!r}; one of {INPUT_KINDS}")


def encode(space, config: Config | None) -> np.ndarray | None:
    """``space.encode(config)``, or None when the config does not fit the space's shape.

    Not ``space.contains``: an *effective* config may hold a compute location that is legal only
    with its own tiles (TVM snapped it there), outside the choices listed for the sketch's tiles.
    """
    if config is None or not 0 <= config.sketch < len(space.sketches):
        return None
    if len(config.values) != len(space.sketches[config.sketch].decisions):
        return None
    return space.encode(config)


def valid_trials(contents: LogContents) -> list[Record]:
    """Trial records usable for learning: ok (finite latency) and with a trace."""
    return [r for r in contents.trials() if r.ok and r.trace is not None and math.isfinite(r.latency)]


def build_dataset(
    logs: Iterable[LogContents],
    *,
    kinds: Iterable[str] = INPUT_KINDS,
    on_progress: Callable[[int, int], None] | None = None,
) -> FeatureDataset:
    """Featurise every valid trial of the logs (records whose task header is missing are skipped), with
    what the model input ``kinds`` need (``FeatureDataset.X``), and only that:

    ``PerStoreFeature`` (~10 ms per record) for ``pooled``, ``pooled+loop``, ``per_store`` and
    ``program`` (the replayed schedules, for models that featurise themselves: ``tvm-xgb``); the loop
    features (~3 ms) for ``loop``, ``pooled+loop`` and ``loop+asm``; an LLVM build (0.4-1 s, on all
    cores) for ``asm`` and ``loop+asm``; each task's DecisionSpace (~0.2-1 s per task) for
    ``encoding``. Every kind pays for replaying the traces (~15-25 ms per record).
    ``on_progress(records_done, records_total)`` is called after each task's records.
    """
    from autosearch.space import DecisionSpace
    from autosearch.task import TuningTask

    kinds = set(kinds)
    if unknown := kinds - set(INPUT_KINDS):
        raise ValueError(f"unknown input kinds {sorted(unknown)}; one of {INPUT_KINDS}")
    keep_programs = "program" in kinds
    encoding = "encoding" in kinds
    want_per_store = bool(kinds & {"pooled", "pooled+loop", "per_store", "program"})
    loop = bool(kinds & {"loop", "pooled+loop", "loop+asm"})
    assembly = bool(kinds & {"asm", "loop+asm"})

    task_keys: list[str] = []
    names: dict[str, str] = {}
    groups: list[int] = []
    latency: list[float] = []
    flops: list[float] = []
    configs: list[Config | None] = []
    per_store: list[np.ndarray] = []
    encodings: list[np.ndarray | None] = []
    programs: list[Program | None] = []
    loops: list[np.ndarray] = []
    asms: list[np.ndarray] = []
    failures = 0
    spent = loop_spent = asm_spent = 0.0
    featurizers: dict[str, TaskFeaturizer] = {}
    spaces: dict[str, Any] = {}
    grouped: list[tuple[LogContents, dict[str, list[Record]]]] = []
    for contents in logs:
        by_task: dict[str, list[Record]] = {}
        for rec in valid_trials(contents):
            by_task.setdefault(rec.task_key, []).append(rec)
        grouped.append((contents, by_task))
    total = sum(len(records) for _, by_task in grouped for records in by_task.values())
    done = 0
    for contents, by_task in grouped:
        for key, records in by_task.items():
            done += len(records)
            header = contents.tasks.get(key)
            if header is None:
                log.warning("%s: no task header for %s, skipping its %d records", contents.path, key,
                            len(records))
                if on_progress is not None:
                    on_progress(done, total)
                continue
            if key not in featurizers:
                featurizers[key] = TaskFeaturizer(TuningTask.from_json(header))
                if encoding:
                    task = featurizers[key].task
                    spaces[key] = DecisionSpace(task.mod, task.target)
            feat = featurizers[key]
            start = time.perf_counter()
            schedules, kept = [], []
            for rec in records:
                try:
                    schedules.append(feat.schedule_from_trace(rec.trace))
                    kept.append(rec)
                except Exception as exc:  # noqa: BLE001 - TVM raises many types for a trace it cannot replay
                    failures += 1
                    log.warning("cannot replay a trace of %s: %s", rec.task_name, str(exc).splitlines()[-1:])
            matrices = feat.per_store(schedules) if want_per_store else [None] * len(schedules)
            spent += time.perf_counter() - start
            if loop:
                start = time.perf_counter()
                loops.extend(feat.loop(schedules))
                loop_spent += time.perf_counter() - start
            if assembly:
                start = time.perf_counter()
                asms.extend(feat.asm(schedules))
                secs = time.perf_counter() - start
                asm_spent += secs
                log.info("assembly features of %s: %d builds, %.1f s", records[0].task_name, len(schedules), secs)
            if key not in task_keys:
                task_keys.append(key)
                names[key] = records[0].task_name
            for rec, sch, m in zip(kept, schedules, matrices):
                groups.append(task_keys.index(key))
                latency.append(rec.latency)
                flops.append(rec.flops or feat.task.flops)
                configs.append(rec.config)
                if m is not None:
                    per_store.append(m)
                space = spaces.get(key)
                encodings.append(encode(space, rec.config) if space is not None else None)
                if keep_programs:  # with its features: tvm-xgb then skips re-extracting them every fold
                    programs.append(Program(feat.context, feat.candidates([sch])[0], key, features=m))
            if on_progress is not None:
                on_progress(done, total)
    return FeatureDataset(
        task_keys=task_keys, task_names=names, groups=np.asarray(groups, dtype=np.int64),
        latency=np.asarray(latency, dtype=np.float64), flops=np.asarray(flops, dtype=np.float64),
        configs=configs, per_store=per_store, encoding=encodings, programs=programs, loop=loops, asm=asms,
        extract_secs=spent, loop_secs=loop_spent, asm_secs=asm_spent, replay_failures=failures,
    )


def read_logs(paths: Sequence[str]) -> list[LogContents]:
    """Tuning logs or TVM JSONDatabase directories (``autosearch.export.read_records`` tells them apart)."""
    from autosearch.export import read_records

    return [read_records(path) for path in paths]


__all__ = [
    "ASM_WIDTH", "FeatureDataset", "INPUT_KINDS", "LOOP_WIDTH", "N_STORE_FEATURES", "POOLED_WIDTH", "Program",
    "TABULAR_KINDS", "TaskFeaturizer",
    "build_dataset", "encode", "normalised_throughput", "pad_columns", "pool", "read_logs",
    "stack_per_store", "store_mask", "valid_trials",
]
