"""Features of measured schedules: TVM's per-store program features, pooled vectors, decision encodings.

Feature sets, as kinds of model input (``INPUT_KINDS``):

- ``loop`` (the default of the tabular models): :mod:`autosearch.cost_models.loop_features`, a model of what the
  CPU does with the schedule (vector loop, unrolled body, accesses kept in registers, an instruction
  and cache-traffic estimate), read off the scheduled TensorIR. A model on them ranks held-out tasks
  better than the same model on ``pooled`` (README, Results: cost models).
- ``per_store``: MetaSchedule's ``PerStoreFeature`` (the extractor its ``XGBModel`` uses), one
  164-wide row per buffer store of the scheduled program (1-3 stores for a fused conv2d). Stacked
  into a 3-D array (records x stores x 164) padded with NaN rows, so a model can tell padding from
  a real store: the sum-pooling MLP masks them out.
- ``pooled``: sum, max and mean over the stores plus log2 FLOPs of the task, a fixed-length vector
  for tabular models (TenSet pools the same way for its tree models).
- ``pooled+loop``: both, side by side.
- ``asm`` / ``loop+asm``: :mod:`autosearch.cost_models.asm_features`, the instruction mix of the compiled kernel's
  hot loops (FMA lanes per cycle, spills, shuffles, gathers) read off its x86-64 assembly; one LLVM
  build per schedule: the costliest features, and with ``loop+asm`` the most accurate (README).
- ``encoding``: :meth:`DecisionSpace.encode` of the config, padded with zeros to a common width.
  It needs no trace replay (microseconds per config), but only means something within one task.
- ``sequence``: the record's trace as tokens, one per instruction (:mod:`autosearch.cost_models.trace_tokens`), for the
  sequence model; no replay either. ``sequence+loop`` and ``sequence+loop+asm`` join the loop (+ assembly)
  features to it: one 2-D array per call, the vector first (``trace_tokens.sequence_input``).

``program`` is the fourth input kind, for MetaSchedule's own ``XGBModel`` (which featurises itself):
an object array of :class:`Program` (the task's TuneContext and a ``MeasureCandidate``).

A record's schedule is rebuilt from its log line alone: the task from the log's task header
(``TuningTask.from_json``), the schedule by replaying the logged trace JSON on a fresh
schedule of ``task.mod`` (:func:`autosearch.search.space.replay`). Replaying the postprocessor part of
the trace gives the same program (and features) as ``DecisionSpace.apply``.

Cost: for a logged record, replaying its trace is most of the cost of the loop features and of
``PerStoreFeature``, and an LLVM build dominates the assembly features; for a config, ``DecisionSpace.apply``
takes the replay's place. The decision encoding needs neither. ``FeatureDataset`` reports the seconds spent
per extractor (``compare-models`` prints them; README's feature table has the figures), and with a
``FeatureStore`` a record is featurised once and read back afterwards (:mod:`autosearch.cost_models.feature_store`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from autosearch.cost_models import SEQUENCE_KINDS, TABULAR_KINDS
from autosearch.cost_models import asm_features as asm_module
from autosearch.cost_models import loop_features as loop_module
from autosearch.cost_models.asm_features import WIDTH as ASM_WIDTH
from autosearch.cost_models.asm_features import asm_features
from autosearch.cost_models.feature_store import FeatureKey, FeatureStore, record_key
from autosearch.cost_models.loop_features import WIDTH as LOOP_WIDTH
from autosearch.cost_models.loop_features import Machine, loop_features
from autosearch.cost_models.trace_tokens import sequence_input, trace_tokens
from autosearch.errors import UserError
from autosearch.ranking import current_retimes, scores
from autosearch.records import LogContents
from autosearch.search.sketch_store import SketchStore
from autosearch.types import Config, Record

log = logging.getLogger(__name__)

N_STORE_FEATURES = 164  # PerStoreFeature() with its defaults (5 buffers per store, 10 curve samples)
# Bump when TaskFeaturizer.per_store changes what it asks of PerStoreFeature (TVM's own version is in every
# cache key anyway): cached per-store features of an older version are then recomputed.
PER_STORE_VERSION = 1
POOLED_WIDTH = 3 * N_STORE_FEATURES + 1
# TABULAR_KINDS (fixed-length vectors: any regressor takes them) and SEQUENCE_KINDS (trace tokens, alone or joined
# with a vector) are named in the package (autosearch.cost_models), with the feature sets a model name may pick
INPUT_KINDS = ("loop", "pooled", "pooled+loop", "asm", "loop+asm", "per_store", "encoding", "program",
               *SEQUENCE_KINDS)
_SCHEDULE_SEED = 1_234_567_891  # as autosearch.search.space: every sampled decision is replayed explicitly


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
    each schedule costs one trace replay plus one extraction, not a new context each.
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
        """Replay a logged trace (postprocessors included) on a fresh schedule of the task
        (:func:`autosearch.search.space.replay`)."""
        from autosearch.search.space import replay

        return replay(self.task.mod, trace_json)

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
        return self.loop_of([sch.mod for sch in schedules])

    def loop_of(self, mods: Sequence[Any]) -> list[np.ndarray]:
        """:meth:`loop` of scheduled modules (``Applied.mod``), with no schedule around them."""
        return [loop_features(mod, self.task.flops, self.machine) for mod in mods]

    def asm(self, schedules: Sequence[Any]) -> list[np.ndarray]:
        """One assembly-feature vector (``asm_features.WIDTH``) per schedule: one LLVM build each."""
        return self.asm_of([sch.mod for sch in schedules])

    def asm_of(self, mods: Sequence[Any]) -> list[np.ndarray]:
        """:meth:`asm` of scheduled modules."""
        return asm_features(list(mods), self.task.target)

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
    latency: np.ndarray  # seconds: the label (``labelled_trials``: the re-timed median, or the trial's own)
    flops: np.ndarray
    configs: list[Config | None]
    per_store: list[np.ndarray]
    encoding: list[np.ndarray | None]
    programs: list[Program | None] = field(default_factory=list)
    loop: list[np.ndarray] = field(default_factory=list)  # loop-feature vectors, when a kind needs them
    tokens: list[np.ndarray] = field(default_factory=list)  # trace tokens, when a sequence kind needs them
    # task key -> the models (networks) the task is a layer of, from the log's task header ("models"; make_dataset
    # writes it); tasks without it are absent
    task_models: dict[str, tuple[str, ...]] = field(default_factory=dict)
    asm: list[np.ndarray] = field(default_factory=list)  # assembly-feature vectors, when a kind needs them
    extract_secs: float = 0.0  # wall time of trace replay (+ PerStoreFeature when built), records replayed
    loop_secs: float = 0.0  # wall time of the loop features, records computed
    asm_secs: float = 0.0  # wall time of the assembly features (builds included), records computed
    replay_failures: int = 0
    featurised: int = 0  # records replayed here (their features, or some of them, computed)
    cached: int = 0  # records whose features all came from the feature store (not replayed)
    computed: dict[str, int] = field(default_factory=dict)  # extractor -> records it ran on

    def __len__(self) -> int:
        return len(self.latency)

    @property
    def y(self) -> np.ndarray:
        return normalised_throughput(self.latency, self.groups)

    @property
    def secs_per_record(self) -> float:
        """Replay (+ PerStoreFeature) seconds per record replayed; 0.0 when the store had every record."""
        return self.extract_secs / max(1, self.featurised + self.replay_failures)

    @property
    def loop_secs_per_record(self) -> float:
        return self.loop_secs / max(1, self.computed.get("loop", 0))

    @property
    def asm_secs_per_record(self) -> float:
        return self.asm_secs / max(1, self.computed.get("asm", 0))

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
        if kind in SEQUENCE_KINDS:
            if not self.tokens:
                raise ValueError("dataset was built without the trace tokens")
            joined = SEQUENCE_KINDS[kind]
            return sequence_input([self.tokens[i] for i in idx], self.X(joined, idx) if joined else None)
        if kind == "program":
            if not self.programs:
                raise ValueError("dataset was built without programs")
            out = np.empty(len(idx), dtype=object)
            for j, i in enumerate(idx):
                out[j] = self.programs[i]
            return out
        raise ValueError(f"unknown input kind {kind!r}; one of {INPUT_KINDS}")


def tabular_kind(name: str, kind: str) -> str:
    """``kind`` if a tabular model (one feature vector per record) can take it, else a one-line UserError."""
    if kind not in TABULAR_KINDS:
        raise UserError(f"cost model {name!r} takes one feature vector per record: its features are one of "
                        f"{', '.join(TABULAR_KINDS)}, not {kind!r}")
    return kind


def vector_width(kind: str) -> int:
    """Width of the feature vector a sequence kind joins to the tokens (0 for ``sequence``)."""
    joined = SEQUENCE_KINDS[kind]
    return {None: 0, "loop": LOOP_WIDTH, "loop+asm": LOOP_WIDTH + ASM_WIDTH}[joined]


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


def labelled_trials(contents: LogContents) -> list[tuple[Record, float]]:
    """The valid trials with the latency (seconds) a model learns from: the label.

    A task whose every valid trial was re-timed in fresh processes after the task's last trial (the re-times
    ``autosearch.ranking.current_retimes`` counts; ``experiments/make_dataset.py --retime-rounds`` makes them)
    is labelled by the re-times: per record the median over rounds of its per-round medians, the rule of
    ``finalists.score``; a record whose kernel failed a re-time is left out. Any other task keeps the trials' own
    timings, for all its records: labels of one task from two kinds of timing (a run re-times only its finalists,
    in a fresh process that times kernels differently from the search's) would order records by how they were
    timed.
    """
    trials = valid_trials(contents)
    retimes: dict[str, list[Record]] = {}
    for rec in contents.records:
        if rec.kind in ("trial", "retime"):
            retimes.setdefault(rec.task_key, []).append(rec)
    labels: dict[str, dict[Config, float]] = {}  # task -> config -> re-timed label (inf: a re-time failed)
    for key, records in retimes.items():
        labels[key] = scores((r.config, r.result) for r in current_retimes(records) if r.config is not None)
    retimed = {key for key, by_config in labels.items()
               if by_config and all(r.config in by_config for r in trials if r.task_key == key)}
    out: list[tuple[Record, float]] = []
    for r in trials:
        if r.task_key not in retimed:
            out.append((r, r.latency))
        elif math.isfinite(label := labels[r.task_key][r.config]):
            out.append((r, label))
    return out


def feature_key(extractor: str, header: dict[str, Any], machine: Machine | None = None) -> FeatureKey:
    """The :class:`FeatureKey` of an extractor's features of one task (its log header): the extractor's version
    and TVM's, and what the extractor reads besides the schedule: the loop features the machine facts and the
    task's FLOPs, the assembly features and ``PerStoreFeature`` the target."""
    import tvm

    version = {"loop": loop_module.VERSION, "asm": asm_module.VERSION, "per_store": PER_STORE_VERSION}[extractor]
    if extractor == "loop":
        if machine is None:
            machine = Machine.from_target(tvm.target.Target(header["target"]))
        facts: dict[str, Any] = {"machine": asdict(machine), "flops": float(header["flops"])}
    else:
        facts = {"target": header["target"]}
    return FeatureKey(extractor, f"{version}/tvm-{tvm.__version__}", header["workload_key"], facts)


def build_dataset(
    logs: Iterable[LogContents],
    *,
    kinds: Iterable[str] = INPUT_KINDS,
    on_progress: Callable[[int, int], None] | None = None,
    store: FeatureStore | None = None,
) -> FeatureDataset:
    """Featurise every valid trial of the logs (records whose task header is missing are skipped), with
    what the model input ``kinds`` need (``FeatureDataset.X``), and only that:

    ``PerStoreFeature`` for ``pooled``, ``pooled+loop``, ``per_store`` and ``program`` (plus the replayed
    schedules themselves for models that featurise on their own: ``tvm-xgb``); the loop features for
    ``loop``, ``pooled+loop``, ``loop+asm`` and the sequence kinds joined with them; an LLVM build per record
    (on all cores) for ``asm`` and ``loop+asm``; each task's DecisionSpace for ``encoding``; the trace tokens
    (no replay) for the sequence kinds. Computing any of the program features first replays the
    record's trace. With a ``store``, features found there are not computed again and the ones computed
    are added to it: a record all of whose features are stored is not even replayed (``program`` needs the
    replayed schedule, so it always replays). ``on_progress(records_done, records_total)`` is called after
    each task's records.
    """
    kinds = set(kinds)
    if unknown := kinds - set(INPUT_KINDS):
        raise ValueError(f"unknown input kinds {sorted(unknown)}; one of {INPUT_KINDS}")
    keep_programs = "program" in kinds
    extractors = [name for name, wanted in (
        ("per_store", bool(kinds & {"pooled", "pooled+loop", "per_store", "program"})),
        ("loop", bool(kinds & {"loop", "pooled+loop", "loop+asm", "sequence+loop", "sequence+loop+asm"})),
        ("asm", bool(kinds & {"asm", "loop+asm", "sequence+loop+asm"})),
    ) if wanted]

    builder = _DatasetBuilder(extractors, keep_programs=keep_programs, encoding="encoding" in kinds, store=store,
                              tokens=bool(kinds & set(SEQUENCE_KINDS)))
    grouped: list[tuple[LogContents, dict[str, list[tuple[Record, float]]]]] = []
    for contents in logs:
        by_task: dict[str, list[tuple[Record, float]]] = {}
        for rec, latency in labelled_trials(contents):
            by_task.setdefault(rec.task_key, []).append((rec, latency))
        grouped.append((contents, by_task))
    total = sum(len(records) for _, by_task in grouped for records in by_task.values())
    done = 0
    for contents, by_task in grouped:
        for key, labelled in by_task.items():
            done += len(labelled)
            header = contents.tasks.get(key)
            if header is None:
                log.warning("%s: no task header for %s, skipping its %d records", contents.path, key,
                            len(labelled))
            else:
                builder.add_task(key, header, [r for r, _ in labelled], [latency for _, latency in labelled])
            if on_progress is not None:
                on_progress(done, total)
    return builder.dataset


class _DatasetBuilder:
    """The rows of a :class:`FeatureDataset`, one task's records at a time (see :func:`build_dataset`)."""

    def __init__(self, extractors: list[str], *, keep_programs: bool, encoding: bool,
                 store: FeatureStore | None, tokens: bool = False) -> None:
        self.extractors = extractors
        self.keep_programs = keep_programs
        self.encoding = encoding
        self.tokens = tokens
        self.store = store
        self.tasks: dict[str, Any] = {}  # key -> TuningTask
        self.featurizers: dict[str, TaskFeaturizer] = {}
        self.spaces: dict[str, Any] = {}  # key -> DecisionSpace, for the encodings
        self.sketches = SketchStore(store.directory) if store is not None else None  # kept in the same cache root
        self.dataset = FeatureDataset(task_keys=[], task_names={}, groups=np.zeros(0, dtype=np.int64),
                                      latency=np.zeros(0), flops=np.zeros(0), configs=[], per_store=[],
                                      encoding=[], computed=dict.fromkeys(extractors, 0))
        self._groups: list[int] = []
        self._latency: list[float] = []
        self._flops: list[float] = []

    def task(self, key: str, header: dict[str, Any]):
        from autosearch.frontend.task import TuningTask

        if key not in self.tasks:
            self.tasks[key] = TuningTask.from_json(header)
        return self.tasks[key]

    def featurizer(self, key: str, header: dict[str, Any]) -> TaskFeaturizer:
        if key not in self.featurizers:
            self.featurizers[key] = TaskFeaturizer(self.task(key, header))
        return self.featurizers[key]

    def space(self, key: str, header: dict[str, Any]):
        from autosearch.search.space import DecisionSpace

        if key not in self.spaces:
            task = self.task(key, header)
            self.spaces[key] = DecisionSpace(task.mod, task.target, store=self.sketches)
        return self.spaces[key]

    def add_task(self, key: str, header: dict[str, Any], records: list[Record], latencies: list[float]) -> None:
        n = len(records)
        found: dict[str, list[Any]] = {e: [None] * n for e in self.extractors}
        file_keys: dict[str, FeatureKey] = {}
        record_keys: list[str] = []
        if self.store is not None and self.extractors:
            machine = self.featurizers[key].machine if key in self.featurizers else None
            record_keys = [record_key(r) for r in records]
            for e in self.extractors:
                file_keys[e] = feature_key(e, header, machine)
                found[e] = self.store.get(file_keys[e], record_keys)
        todo = [i for i in range(n) if self.keep_programs or any(found[e][i] is None for e in self.extractors)]
        schedules = self._replay(key, header, records, todo) if todo else {}
        for e in self.extractors:
            missing = [i for i in schedules if found[e][i] is None]
            if not missing:
                continue
            computed = self._compute(e, self.featurizers[key], [schedules[i] for i in missing])
            for i, value in zip(missing, computed):
                found[e][i] = value
            self.dataset.computed[e] += len(missing)
            if self.store is not None:
                self.store.put(file_keys[e], {record_keys[i]: found[e][i] for i in missing})
            if e == "asm":
                log.info("assembly features of %s: %d builds", records[0].task_name, len(missing))
        keep = [i for i in range(n) if all(found[e][i] is not None for e in self.extractors)
                and (not self.keep_programs or i in schedules)]
        self.dataset.featurised += len(schedules)
        self.dataset.cached += sum(1 for i in keep if i not in schedules)
        self._append(key, header, records, latencies, keep, found, schedules)

    def _replay(self, key: str, header: dict[str, Any], records: list[Record], rows: list[int]) -> dict[int, Any]:
        """Row -> the record's schedule, replayed from its trace (rows whose trace fails are left out)."""
        feat = self.featurizer(key, header)
        start = time.perf_counter()
        schedules = {}
        for i in rows:
            try:
                schedules[i] = feat.schedule_from_trace(records[i].trace)
            except Exception as exc:  # noqa: BLE001 - TVM raises many types for a trace it cannot replay
                self.dataset.replay_failures += 1
                log.warning("cannot replay a trace of %s: %s", records[i].task_name, str(exc).splitlines()[-1:])
        self.dataset.extract_secs += time.perf_counter() - start
        return schedules

    def _compute(self, extractor: str, feat: TaskFeaturizer, schedules: list[Any]) -> list[np.ndarray]:
        start = time.perf_counter()
        out = {"per_store": feat.per_store, "loop": feat.loop, "asm": feat.asm}[extractor](schedules)
        secs = time.perf_counter() - start
        if extractor == "per_store":
            self.dataset.extract_secs += secs
        elif extractor == "loop":
            self.dataset.loop_secs += secs
        else:
            self.dataset.asm_secs += secs
        return out

    def _append(self, key: str, header: dict[str, Any], records: list[Record], latencies: list[float], keep: list[int],
                found: dict[str, list[Any]], schedules: dict[int, Any]) -> None:
        ds = self.dataset
        if not keep:
            return
        if key not in ds.task_keys:
            ds.task_keys.append(key)
            ds.task_names[key] = records[0].task_name
        if header.get("models"):
            ds.task_models[key] = tuple(dict.fromkeys([*ds.task_models.get(key, ()), *header["models"]]))
        space = self.space(key, header) if self.encoding else None
        group = ds.task_keys.index(key)
        for i in keep:
            rec = records[i]
            self._groups.append(group)
            self._latency.append(latencies[i])
            self._flops.append(rec.flops or float(header["flops"]))
            ds.configs.append(rec.config)
            ds.encoding.append(encode(space, rec.config) if space is not None else None)
            if "per_store" in found:
                ds.per_store.append(found["per_store"][i])
            if "loop" in found:
                ds.loop.append(found["loop"][i])
            if "asm" in found:
                ds.asm.append(found["asm"][i])
            if self.tokens:
                ds.tokens.append(trace_tokens(rec.trace, self._flops[-1], header["args"]))
            if self.keep_programs:  # with its features: tvm-xgb then skips re-extracting them every fold
                feat = self.featurizers[key]
                ds.programs.append(Program(feat.context, feat.candidates([schedules[i]])[0], key,
                                           features=found["per_store"][i]))
        ds.groups = np.asarray(self._groups, dtype=np.int64)
        ds.latency = np.asarray(self._latency, dtype=np.float64)
        ds.flops = np.asarray(self._flops, dtype=np.float64)


def read_logs(paths: Sequence[str]) -> list[LogContents]:
    """Tuning logs or TVM JSONDatabase directories (``autosearch.frontend.database_files.read_records`` tells them
    apart)."""
    from autosearch.frontend.database_files import read_records

    return [read_records(path) for path in paths]


__all__ = [
    "ASM_WIDTH", "FeatureDataset", "INPUT_KINDS", "LOOP_WIDTH", "N_STORE_FEATURES", "POOLED_WIDTH", "Program",
    "SEQUENCE_KINDS", "TABULAR_KINDS", "TaskFeaturizer", "tabular_kind", "vector_width",
    "build_dataset", "encode", "feature_key", "labelled_trials", "normalised_throughput", "pad_columns", "pool",
    "read_logs", "stack_per_store", "store_mask", "valid_trials",
]
