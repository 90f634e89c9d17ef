"""The decision space of a task: MetaSchedule's own design space as a vector of decisions.

MetaSchedule generates a few *sketches* per task (``PostOrderApply`` with the target's default
schedule rules). Each sketch's trace holds sampling instructions (``SamplePerfectTile``,
``SampleCategorical``, ``SampleComputeLocation``); fixing every one of them fixes the schedule. A
:class:`Config` is the sketch index plus one value per sampling instruction, so any optimiser can
drive TVM's space without knowing TVM.

Replaying a trace with other decisions is what MetaSchedule's own mutators do; the postprocessors
(``RewriteParallelVectorizeUnroll``, ``RewriteReductionBlock``, ...) then turn the sketch into
something buildable. TVM snaps an illegal compute location to the nearest legal one, so
:meth:`DecisionSpace.apply` reads the *effective* decisions back from the applied trace.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from autosearch.types import Config, Decision

if TYPE_CHECKING:
    from autosearch.search.sketch_store import SketchStore

log = logging.getLogger(__name__)

# A fixed, large seed: every sampling decision is set explicitly, and small seeds are degenerate.
_SCHEDULE_SEED = 1_234_567_891
_MAX_LOCATION_PROBE = 64
# configs whose applied schedule a space keeps (LRU): a guided strategy's scorer applies a few hundred candidates per
# batch to featurise them, and the batch it then measures is among the last of them
RECENT_APPLIED = 256
# how much of TVM's RewriteLayout DecisionSpace.apply_for_features runs, most faithful first
LAYOUT_REWRITES = ("all", "weights", "none")


@lru_cache(maxsize=4096)
def perfect_tilings(extent: int, n: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered n-factorisation of ``extent`` whose innermost factor is <= ``max_innermost``.

    These are exactly the values ``SamplePerfectTile(n, max_innermost_factor)`` may take.
    """
    if n == 1:
        return ((extent,),) if extent <= max_innermost or max_innermost <= 0 else ()
    out: list[tuple[int, ...]] = []
    for inner in _divisors(extent):
        if max_innermost > 0 and inner > max_innermost:
            continue
        for head in _all_factorisations(extent // inner, n - 1):
            out.append(head + (inner,))
    return tuple(sorted(out))


@lru_cache(maxsize=4096)
def _all_factorisations(extent: int, n: int) -> tuple[tuple[int, ...], ...]:
    if n == 1:
        return ((extent,),)
    return tuple(
        (d,) + rest for d in _divisors(extent) for rest in _all_factorisations(extent // d, n - 1)
    )


@lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


@dataclass(frozen=True)
class Sketch:
    """One design-space schedule: its trace and the decisions it leaves open."""

    index: int
    trace: Any = field(repr=False)  # tvm.s_tir.schedule.Trace (without postprocessors)
    decisions: tuple[Decision, ...]
    default: tuple[Any, ...]  # the decisions MetaSchedule sampled for it

    @property
    def log10_size(self) -> float:
        return sum(math.log10(max(1, len(d.choices))) for d in self.decisions)

    @cached_property
    def partitions_loops(self) -> bool:
        """Whether the trace partitions a loop (our concatenation sketches, :mod:`autosearch.search.data_movement`).
        TVM's ``RewriteLayout`` cannot parse a partitioned loop's bounds (it raises where the task has constant
        inputs to lay out, a decode head's anchors), so such a sketch is post-processed without it: its constants
        keep their layout, the kernel is checked like any other."""
        return any(inst.kind.name == "LoopPartition" for inst in self.trace.insts)


@dataclass(frozen=True)
class Applied:
    """The outcome of applying a config: a buildable module, or why there is none."""

    config: Config  # the effective config (compute locations as TVM actually placed them)
    mod: Any = None  # tvm.IRModule, scheduled and post-processed
    trace: Any = field(default=None, repr=False)  # the full trace, postprocessors included
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    def trace_json(self) -> Any:
        """The trace as plain JSON (TVM's own format), replayable by :func:`replay`."""
        from autosearch.tvm_compat import to_plain_json

        return to_plain_json(self.trace.as_json(remove_postproc=False))


def replay(mod, trace_json: Any):
    """The schedule of ``mod`` a logged trace describes (TVM's JSON, postprocessors included: a log record's
    ``trace``, :meth:`Applied.trace_json`), replayed on a fresh schedule as TVM replays a database record. Every
    sampled decision is in the trace, so the seed changes nothing; no IR check after each step (the trace was
    checked when it was applied). A trace tensorised onto a bf16 unit names intrinsics this process may not have
    registered yet (each accumulator shape has its own), so they are registered first."""
    import json

    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.tensor_units.intrinsics import register_for

    register_for(trace_json if isinstance(trace_json, str) else json.dumps(trace_json))
    sch = Schedule(mod, seed=_SCHEDULE_SEED, debug_mask=0)
    Trace.apply_json_to_schedule(trace_json, sch)
    return sch


def _short(kind: str) -> str:
    return {"SamplePerfectTile": "tile", "SampleCategorical": "cat", "SampleComputeLocation": "loc"}.get(kind, kind)


def _to_python(decision: Any) -> Any:
    """TVM decision (IntImm / Array of IntImm) -> int or tuple of ints."""
    if isinstance(decision, int):
        return decision
    if hasattr(decision, "value"):
        return int(decision.value)
    return tuple(int(getattr(d, "value", d)) for d in decision)


class DecisionSpace:
    """MetaSchedule's design space of one task, as named decisions with their legal choices.

    Built from the same space generator, schedule rules and postprocessors ``ms.tune_tir`` uses for
    the target, so every comparison with TVM's own tuner searches the same space. One addition: a task
    that only moves data (no reduction block) on a CPU gets one more sketch after TVM's,
    :func:`autosearch.search.data_movement.blocked_copy_sketch`, since TVM's single schedule for it can lose
    to the naive loop nest; so does a softmax, :func:`autosearch.tensor_units.softmax.softmax_sketch`, whose reductions
    TVM's sketches leave scalar (over the last axis vectors of each row, over another vectors along the last); and
    a concatenation along its last axis one more, :func:`autosearch.search.data_movement.partitioned_concat_sketch`,
    and one along another axis (a decode head's) one more,
    :func:`autosearch.search.data_movement.partitioned_axis_concat_sketch`; a task whose output, not a
    concatenation itself, chooses its source by an outer index (an NMS-free head's anchor-major boxes and scores) one
    more, :func:`autosearch.search.data_movement.partitioned_choice_sketch`; an axis concatenation that also chooses
    its source along its last axis (a decode head's levels) one more,
    :func:`autosearch.search.data_movement.partitioned_levels_sketch`.
    Each sketch of ours without decisions (the column softmax's, the concatenations', the choice's, the levels') is
    measured first (:attr:`measure_first`).

    ``store``: a :class:`~autosearch.search.sketch_store.SketchStore` the sketches are read from when an earlier
    set-up of the same module, target and seed kept them there, and kept in otherwise (None: built, not kept).
    """

    def __init__(self, mod, target, *, seed: int = 0, store: SketchStore | None = None) -> None:
        from tvm.s_tir import meta_schedule as ms

        from autosearch.search.data_movement import (
            blocked_copy_sketch,
            partitioned_axis_concat_sketch,
            partitioned_choice_sketch,
            partitioned_concat_sketch,
            partitioned_levels_sketch,
        )
        from autosearch.tensor_units.sketch import bf16_sketches
        from autosearch.tensor_units.softmax import softmax_sketch
        from autosearch.tvm_compat import import_tensor_intrinsics, register_pool_rules

        import_tensor_intrinsics(str(target.kind.name), str(dict(target.export()).get("mtriple", "")))
        register_pool_rules([str(key) for key in target.keys])
        self.mod = mod
        self.target = target
        self._ctx = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator=ms.space_generator.PostOrderApply(),
            rand_state=_SCHEDULE_SEED + seed,
            num_threads=1,
        )
        self._postprocs = list(self._ctx.space_generator.postprocs)
        self._postprocs_without_layout = [p for p in self._postprocs if not isinstance(p, ms.postproc.RewriteLayout)]
        self._recent: OrderedDict[Config, Applied] = OrderedDict()
        self._recent_lock = threading.Lock()  # a scorer applies on threads
        # the unscheduled schedules applies start from a copy of (_fresh_schedule): of the module, and of it with
        # RewriteLayout confined to the weights (apply_for_features)
        self._blanks: dict[str, Any] = {}
        self._blank_lock = threading.Lock()
        key = store.key(mod, target, seed) if store is not None else ""
        kept = self._load(store.get(key)) if store is not None else None
        if kept is not None:
            self.sketches, self.measure_first = kept
            return
        # a bf16 task on a bf16 unit has our own sketches only: TVM's schedule its GEMM in fp32 arithmetic
        schedules = list(bf16_sketches(mod, target, seed=_SCHEDULE_SEED) or self._ctx.generate_design_space())
        ours = len(schedules)  # ours after TVM's: their indices stay, the concatenation's last
        extra = (blocked_copy_sketch(mod, target, seed=_SCHEDULE_SEED)
                 or softmax_sketch(mod, target, seed=_SCHEDULE_SEED))
        concat = partitioned_concat_sketch(mod, target, seed=_SCHEDULE_SEED)
        axis_concat = partitioned_axis_concat_sketch(mod, target, seed=_SCHEDULE_SEED)
        choice = None if axis_concat is not None else partitioned_choice_sketch(mod, target, seed=_SCHEDULE_SEED)
        levels = partitioned_levels_sketch(mod, target, seed=_SCHEDULE_SEED) if axis_concat is not None else None
        schedules += [s for s in (extra, concat, axis_concat, choice, levels) if s is not None]
        axis_index = next((i for i, s in enumerate(schedules) if s is axis_concat), None)
        self.sketches: tuple[Sketch, ...] = tuple(self._make_sketch(i, sch) for i, sch in enumerate(schedules))
        # configs to measure before any search and before the known schedules: each sketch of ours without
        # decisions (one config), and the axis concatenation's with its first tile (its other tiles lose by up to
        # 9x), too good to leave to a short run's chance of drawing them
        self.measure_first: tuple[Config, ...] = tuple(
            self.default(i) for i in range(ours, len(schedules))
            if not self.sketches[i].decisions or i == axis_index)
        if store is not None:
            store.put(key, self._dump())

    # ----------------------------------------------------------------- construction
    def _make_sketch(self, index: int, sch) -> Sketch:
        trace = sch.trace.simplified(remove_postproc=True)
        decisions: list[Decision] = []
        defaults: list[Any] = []
        counts: dict[str, int] = {}
        locations: dict[int, tuple[int, ...]] | None = None  # of every compute-location decision, at the first
        for pos, inst in enumerate(trace.insts):
            kind = inst.kind.name
            if not kind.startswith("Sample"):
                continue
            value = _to_python(trace.decisions[inst])
            short = _short(kind)
            name = f"{short}{counts.get(short, 0)}"
            counts[short] = counts.get(short, 0) + 1
            if kind == "SamplePerfectTile":
                n, max_inner = (int(a) for a in inst.attrs)
                choices: tuple[Any, ...] = perfect_tilings(math.prod(value), n, max_inner)
            elif kind == "SampleCategorical":
                candidates = [int(getattr(c, "value", c)) for c in inst.attrs[0]]
                choices = tuple(range(len(candidates)))
                name = f"{name}[{','.join(map(str, candidates))}]"
            elif kind == "SampleComputeLocation":
                if locations is None:
                    locations = self._legal_locations(trace)
                choices = locations[pos]
            else:
                raise NotImplementedError(f"sampling instruction {kind} is not supported")
            decisions.append(Decision(name=name, kind=kind, choices=choices, position=pos))
            defaults.append(value)
        return Sketch(index=index, trace=trace, decisions=tuple(decisions), default=tuple(defaults))

    def _legal_locations(self, trace) -> dict[int, tuple[int, ...]]:
        """Compute locations TVM accepts for each ``SampleComputeLocation`` of ``trace`` (by its position), with
        the sketch's own tiles and its own decisions before it.

        TVM has no API that lists them; ``sample_compute_location(decision=k)`` snaps an illegal k down to
        the largest legal location below it (``-1``, the root, when there is none), so probing enumerates
        them. Walking down from the top, each probe lands on the next legal location: as many probes as there
        are locations, where probing every k took :data:`_MAX_LOCATION_PROBE` (most of a model's set-up). A
        probe only reads the schedule (sampling with a decision changes neither its IR nor its random state), so
        all of a sketch's are taken in one replay of its trace, on the schedule being replayed: no copy per probe,
        no replay per decision. What is left is mostly the probes themselves (TVM checks every candidate loop in
        each).
        """
        found: dict[int, set[int]] = {}
        positions = [pos for pos, inst in enumerate(trace.insts) if inst.kind.name == "SampleComputeLocation"]
        sch = self._fresh_schedule()

        def snapped(block, k: int) -> int:
            sch.sample_compute_location(block, decision=k)
            return _to_python(sch.trace.decisions[sch.trace.insts[-1]])

        def probe(inst, inputs, attrs, decision):
            if inst.kind.name != "SampleComputeLocation":
                return decision
            pos = next(p for p in positions if inst.same_as(trace.insts[p]))
            locations = found.setdefault(pos, set())
            k = _MAX_LOCATION_PROBE - 1
            while k >= -2:
                legal = snapped(inputs[0], k)
                locations.add(legal)
                if legal > k:  # -2 asked where the block cannot be inlined: the root
                    break
                k = legal - 1
            return decision

        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=probe)
        return {pos: tuple(sorted(locations)) for pos, locations in found.items()}

    def _dump(self) -> dict[str, Any]:
        """The sketches and :attr:`measure_first` as JSON values (:class:`~.sketch_store.SketchStore`)."""
        from autosearch.tvm_compat import to_plain_json

        return {  # tuples (tiles, choices) as they are: JSON writes them as arrays, _load reads them back as tuples
            "sketches": [{"trace": to_plain_json(s.trace.as_json(remove_postproc=True)),
                          "decisions": [[d.name, d.kind, d.choices, d.position] for d in s.decisions],
                          "default": s.default} for s in self.sketches],
            "measure_first": [c.to_json() for c in self.measure_first],
        }

    def _load(self, value: Any) -> tuple[tuple[Sketch, ...], tuple[Config, ...]] | None:
        """Sketches and :attr:`measure_first` from :meth:`_dump`'s values, each trace replayed once on this module
        (a TVM trace has no constructor from JSON); None (build them afresh) when there are none or any trace does
        not replay to sampling instructions where its decisions say (with a warning: a cache file written by hand or
        damaged; the key holds everything else a space depends on)."""
        if value is None:
            return None
        from tvm.s_tir.schedule import Trace

        from autosearch.tensor_units.intrinsics import register_for

        def kept(value: Any) -> Any:
            return tuple(kept(v) for v in value) if isinstance(value, list) else value

        try:
            sketches = []
            for index, entry in enumerate(value["sketches"]):
                register_for(json.dumps(entry["trace"]))
                sch = self._fresh_schedule()
                Trace.apply_json_to_schedule(entry["trace"], sch)
                trace = sch.trace
                decisions = tuple(Decision(name=name, kind=kind, choices=kept(choices), position=int(position))
                                  for name, kind, choices, position in entry["decisions"])
                if any(trace.insts[d.position].kind.name != d.kind for d in decisions):
                    raise ValueError("a decision is not at a sampling instruction of its kind in the trace")
                sketches.append(Sketch(index=index, trace=trace, decisions=decisions, default=kept(entry["default"])))
            return tuple(sketches), tuple(Config.from_json(c) for c in value["measure_first"])
        except Exception as exc:  # a trace this TVM cannot replay, a malformed entry: build afresh
            lines = str(exc).strip().splitlines()
            log.warning("cached sketches do not replay (%s: %s): building the design space afresh",
                        type(exc).__name__, lines[-1] if lines else "")
            return None

    # ----------------------------------------------------------------- queries
    def size(self) -> float:
        """Number of configurations (sum over sketches of the product of choice counts)."""
        return float(sum(10 ** s.log10_size for s in self.sketches))

    def log10_size(self) -> float:
        return math.log10(max(1.0, self.size()))

    def decisions(self, sketch: int) -> tuple[Decision, ...]:
        return self.sketches[sketch].decisions

    def default(self, sketch: int = 0) -> Config:
        """The config MetaSchedule itself sampled for a sketch."""
        return Config(sketch, self.sketches[sketch].default)

    def contains(self, config: Config) -> bool:
        if not 0 <= config.sketch < len(self.sketches):
            return False
        decisions = self.sketches[config.sketch].decisions
        return len(decisions) == len(config.values) and all(
            v in d.choice_set for d, v in zip(decisions, config.values)
        )

    def replayable(self, config: Config) -> bool:
        """Like :meth:`contains`, but any compute location >= -2 passes: TVM checks and snaps it on
        replay, and an effective config may hold a location that is legal only with its own tiles."""
        if not 0 <= config.sketch < len(self.sketches):
            return False
        decisions = self.sketches[config.sketch].decisions
        return len(decisions) == len(config.values) and all(
            (isinstance(v, int) and v >= -2) if d.kind == "SampleComputeLocation" else v in d.choice_set
            for d, v in zip(decisions, config.values)
        )

    def sample(self, rng: np.random.Generator) -> Config:
        """A uniformly random sketch, then a uniformly random legal choice per decision."""
        sketch = self.sketches[int(rng.integers(len(self.sketches)))]
        return Config(sketch.index, tuple(d.choices[int(rng.integers(len(d.choices)))] for d in sketch.decisions))

    def sample_applied(self, rng: np.random.Generator, n: int) -> list[Applied]:
        """``n`` random configs that apply (benchmarks and tests measure these)."""
        out: list[Applied] = []
        while len(out) < n:
            applied = self.apply(self.sample(rng))
            if applied.ok:
                out.append(applied)
        return out

    def mutate(self, config: Config, rng: np.random.Generator) -> Config:
        """One random neighbour (one decision changed), without listing them all."""
        decisions = self.sketches[config.sketch].decisions
        open_ = [i for i, d in enumerate(decisions) if len(d.choices) > 1]
        if not open_:
            return config
        i = open_[int(rng.integers(len(open_)))]
        others = [c for c in decisions[i].choices if c != config.values[i]]
        return config.replace(i, others[int(rng.integers(len(others)))])

    # ----------------------------------------------------------------- encoding
    @property
    def encoding_width(self) -> int:
        return len(self.sketches) + sum(
            sum(len(d.choices[0]) if d.kind == "SamplePerfectTile" else 1 for d in s.decisions)
            for s in self.sketches
        )

    def encode(self, config: Config) -> np.ndarray:
        """A fixed-length numeric vector: sketch one-hot, then log2 tile factors / indices per sketch."""
        out = np.zeros(self.encoding_width, dtype=np.float32)
        out[config.sketch] = 1.0
        offset = len(self.sketches)
        for s in self.sketches:
            for j, d in enumerate(s.decisions):
                width = len(d.choices[0]) if d.kind == "SamplePerfectTile" else 1
                if s.index == config.sketch:
                    value = config.values[j]
                    if d.kind == "SamplePerfectTile":
                        out[offset:offset + width] = np.log2(np.asarray(value, dtype=np.float32))
                    else:
                        out[offset] = float(value) + (3.0 if d.kind == "SampleComputeLocation" else 0.0)
                offset += width
        return out

    # ----------------------------------------------------------------- apply
    def apply(self, config: Config) -> Applied:
        """Replay the sketch with ``config``'s decisions, then run the postprocessors.

        Never raises for a bad config: the reason is in ``Applied.error`` (status ``invalid_config``). The last
        :data:`RECENT_APPLIED` outcomes are kept: a guided run applies each candidate to featurise it, then the
        tuner applies the ones it measures again to build them, and an apply is deterministic (every decision
        given, a fixed seed) and costs as much as featurising, so the second is a look-up.
        """
        with self._recent_lock:
            applied = self._recent.get(config)
            if applied is not None:
                self._recent.move_to_end(config)
                return applied
        applied = self._apply(config)
        with self._recent_lock:
            self._recent[config] = applied
            while len(self._recent) > RECENT_APPLIED:
                self._recent.popitem(last=False)
        return applied

    @property
    def layout_rewrites(self) -> tuple[str, ...]:
        """The ``rewrite`` arguments of :meth:`apply_for_features` that differ here, most faithful first: ``"all"``,
        ``"weights"`` where the task has layout-free vectors beside its weights, ``"none"``."""
        return tuple(r for r in LAYOUT_REWRITES if r != "weights" or self._weights_only_mod is not None)

    @cached_property
    def _weights_only_mod(self):
        """The module with only its weights layout-free (:func:`_weights_only`), made when a scorer first asks: most
        spaces are never featurised that way."""
        return _weights_only(self.mod)

    def apply_for_features(self, config: Config, *, rewrite: str) -> Applied:
        """``config`` applied for its features alone, with less of TVM's ``RewriteLayout`` postprocessor, which lays
        each layout-free buffer out in the order the tiles read it (a block prepacked at compile time) and is most
        of an apply: about half on a direct convolution, two thirds on a Winograd one.

        ``rewrite="none"`` leaves it out; ``"weights"`` lays out only the layout-free buffers of two or more
        non-unit dimensions (the weights), not the per-channel vectors beside them (a bias, a batch norm's
        scale and shift), each of which costs a rewrite of the whole function and moves no loop; ``"all"`` is
        :meth:`apply`. For featurising where the features do not see the difference
        (:class:`autosearch.cost_models.guidance.ModelScorer` checks); not kept, and never to be built."""
        if rewrite not in LAYOUT_REWRITES:
            raise ValueError(f"rewrite must be one of {', '.join(map(repr, LAYOUT_REWRITES))}, not {rewrite!r}")
        if rewrite == "weights" and self._weights_only_mod is None:
            rewrite = "all"
        return self._apply(config, rewrite=rewrite)

    def _fresh_schedule(self, of: str = "module"):
        """A schedule of the unscheduled module (``of="weights"``: of it with only its weights layout-free): a copy
        of one made once. Making one analyses the whole PrimFunc, which on a Winograd task was a large part of
        each apply; a copy reuses that analysis. Copying forks the original's random state, so copies are made one
        at a time; the state draws nothing in an apply, whose every decision is given (docs/results.md,
        "Featurising a candidate")."""
        from tvm.s_tir import Schedule

        with self._blank_lock:
            blank = self._blanks.get(of)
            if blank is None:
                mod = self._weights_only_mod if of == "weights" else self.mod
                blank = self._blanks[of] = Schedule(mod, seed=_SCHEDULE_SEED, debug_mask=0)
            return blank.copy()

    def _apply(self, config: Config, *, rewrite: str = "all") -> Applied:
        if not self.replayable(config):
            return Applied(config=config, error=f"config is not in this space: {config}")
        sketch = self.sketches[config.sketch]
        cursor = iter(config.values)  # sampling instructions replay in trace order

        def provide(inst, inputs, attrs, decision):
            if inst.kind.name.startswith("Sample"):
                value = next(cursor)
                return list(value) if isinstance(value, tuple) else value
            return decision

        try:
            sch = self._fresh_schedule("weights" if rewrite == "weights" else "module")
            sketch.trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provide)
            effective = Config(
                config.sketch,
                tuple(
                    _to_python(sch.trace.decisions[inst])
                    for inst in sch.trace.insts
                    if inst.kind.name.startswith("Sample")
                ),
            )
            sch.enter_postproc()
            without_layout = rewrite == "none" or sketch.partitions_loops
            for postproc in self._postprocs_without_layout if without_layout else self._postprocs:
                if not postproc.apply(sch):
                    return Applied(config=effective, error=f"postprocessor {type(postproc).__name__} rejected it")
        except Exception as exc:  # TVM raises ScheduleError / TVMError with long texts
            text = str(exc).strip().splitlines()
            return Applied(config=config, error=f"{type(exc).__name__}: {text[-1] if text else ''}"[:500])
        return Applied(config=effective, mod=sch.mod, trace=sch.trace)

    def __repr__(self) -> str:
        return f"DecisionSpace(sketches={len(self.sketches)}, log10_size={self.log10_size():.1f})"


def _weights_only(mod):
    """``mod`` with TVM's ``layout_free_buffers`` narrowed to the parameters of two or more non-unit dimensions, or
    None when that leaves it as it is. Only ``RewriteLayout`` reads the attribute: a schedule of the narrowed module
    replays every sketch as one of ``mod`` does, and its rewrite lays out the weights alone."""
    from tvm import IRModule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    if not any(gv.name_hint == "main" for gv in mod.get_global_vars()):
        return None
    func = mod["main"]
    if func.attrs is None or "layout_free_buffers" not in func.attrs:
        return None
    shapes = [tuple(int(n) for n in a.shape) for a in ArgInfo.from_entry_func(mod, remove_preproc=False)]
    if len(shapes) != len(func.params):  # a parameter that is no buffer: the indices would not be the arguments'
        return None
    free = [int(i) for i in func.attrs["layout_free_buffers"]]
    weights = [i for i in free if sum(1 for n in shapes[i] if n > 1) >= 2]
    if len(weights) == len(free):
        return None
    return IRModule({"main": func.with_attr("layout_free_buffers", weights)})


def config_key(config: Config) -> str:
    """A stable string key for a config (used for de-duplication and Optuna trial attributes)."""
    return json.dumps(config.to_json(), separators=(",", ":"))


# ---------------------------------------------------------------------------------------------- for strategies
def enumerate_space(space: DecisionSpace) -> list[Config]:
    """Every config of a (small) space, sketch by sketch, in a fixed order."""
    return [
        Config(sketch.index, tuple(values))
        for sketch in space.sketches
        for values in itertools.product(*(d.choices for d in sketch.decisions))
    ]


LISTABLE = 1e6  # configs: a space at most this large is listed when random draws stall on repeats


def draw_unseen(space: DecisionSpace, rng, n: int, seen, taken: set[Config], *,
                max_retries: int) -> tuple[list[Config], bool]:
    """Up to ``n`` random configs in neither ``seen`` nor ``taken`` (each added to ``taken``), and whether the space is
    exhausted. Uniform draws, rejected when already seen, until ``max_retries * n`` misses; then, for a space of at
    most :data:`LISTABLE` configs, a random pick of the ones left (none left: exhausted). The one rule behind the
    strategies' "a random config never asked before"."""
    out: list[Config] = []
    misses = 0
    while len(out) < n and misses < max_retries * n:
        config = space.sample(rng)
        if config in seen or config in taken:
            misses += 1
            continue
        out.append(config)
        taken.add(config)
    if len(out) < n and space.size() <= LISTABLE:
        rest = [c for c in enumerate_space(space) if c not in seen and c not in taken]
        if not rest:
            return out, True
        picks = [rest[int(i)] for i in rng.permutation(len(rest))[: n - len(out)]]
        taken.update(picks)
        out += picks
    return out, False


def hamming(a: Config, b: Config) -> int:
    """Decisions in which two configs differ (configs of different sketches differ in all of them)."""
    if a.sketch != b.sketch:
        return len(a.values) + len(b.values)
    return sum(x != y for x, y in zip(a.values, b.values))


def pick_diverse(ranked: Sequence[Config], n: int, *, min_distance: int = 2) -> list[Config]:
    """The first ``n`` of ``ranked`` (best first), skipping configs within ``min_distance`` decisions of
    one already picked, filled up in rank order when that leaves too few: one model-picked batch should
    not spend the budget on near-copies of one prediction."""
    picked: list[Config] = []
    for c in ranked:
        if len(picked) < n and all(hamming(c, p) >= min_distance for p in picked):
            picked.append(c)
    chosen = set(picked)
    picked += [c for c in ranked if c not in chosen][: max(0, n - len(picked))]
    return picked


__all__ = ["LISTABLE", "Applied", "DecisionSpace", "Sketch", "config_key", "draw_unseen", "enumerate_space", "hamming",
           "perfect_tilings", "pick_diverse"]
