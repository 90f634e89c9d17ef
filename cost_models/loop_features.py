"""Loop-nest features: what a CPU will do with a scheduled kernel, read off its TensorIR.

TVM's ``PerStoreFeature`` describes each buffer store with counts (bytes touched, reuse distance,
arithmetic intensity curve): general, but blind to what decides speed on a CPU after LLVM. These
features model the machine instead, for each leaf block of the scheduled (post-processed) PrimFunc:

- **the unrolled body**: the innermost loops TVM's auto-unroll pragma (or LLVM's full unroll of a few
  constant steps) turns into straight-line code, around the vector loop;
- **the vector loop**: the loop TVM vectorised, or the one LLVM's loop vectoriser will take (the
  innermost loop left whose accesses are unit-stride or interleaved by 2 and unguarded); how many
  native vector operations one operation needs (``<26 x float>`` = 16 + 8 + 2 lanes: 3);
- **each access of the body**, by how the lanes touch it: contiguous, broadcast, interleaved, or
  scattered (a gather / scatter, or a load under ``if_then_else`` such as inlined padding, which
  LLVM cannot speculate and builds lane by lane); accesses invariant in the innermost loops stay in
  registers (LICM) and cost once per iteration of the first loop that moves them, while they add
  to the live vector registers (over ``vector_registers - 4``: spills);
- **an instruction estimate**: body runs x (arithmetic + loads + stores + spills + loop overhead), per
  nest and summed over nests (a nest that is not parallel counts ``cores`` times);
- **caches**: data touched by one execution of each loop level, and the traffic into a cache of each
  size (loaded once per iteration of the loop just outside the largest level that fits);
- **the register tile** of reductions (accumulators live across the innermost reduction loop),
  parallel extent and imbalance over the target's cores, unroll budget;
- **a block tensorised onto a bf16 unit** (an AMX tile multiply, the AVX512-BF16 dot product,
  ``autosearch.tensor_units``): its body is a call, opaque to the analysis above, so it is read off the
  block's operands instead (the ``A``, ``B``, ``C`` regions its intrinsic matches): the unit, calls and their
  parallel split, the call's GEMM shape (M, N, K), accumulators per call (tiles or vectors) and operand
  loads per unit operation (the reuse the accumulator shape buys), the unit operations, operand bytes and
  cache traffic over the loops around the calls.

Sizes are log2 ratios to the task's FLOPs, so a 1x1 convolution and a 3x3 one share a scale; the
whole vector is ``sign(x) log2(1 + |x|)`` (tree models do not care; scaled regressors do).

What they buy over pooled ``PerStoreFeature`` for each model, held out, is in README (Results: cost
models; ``experiments/results/compare_models*.md``); the instruction estimate alone, with no learning,
already orders configs better than chance (``tests/cost_models/test_loop_features.py``). Extraction is pure
Python over the TIR, with index expressions compiled to tuples once, and cheaper per schedule than
``PerStoreFeature`` with its candidate wrapping.

How each effect was found: reading the assembly of kernels the pooled model misranked (vinsertps
chains from guarded padding loads, gathers from LLVM-vectorised strided loops, accumulators reloaded
when a spatial loop separates two reduction loops).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from tvm.tirx import ForKind, IterVar

from autosearch.cost_models._scaling import signed_log

# Bump when the features of a schedule change (a new effect, a changed estimate, renamed or reordered
# names): cached features (autosearch.cost_models.feature_store) of an older version are then recomputed.
VERSION = 2  # 2: blocks tensorised onto a bf16 unit described (they were read as their body's config stores)
LLVM_FULL_UNROLL = 8  # LLVM fully unrolls inner loops of a few constant steps even without TVM's pragma
CACHE_LEVELS = ("reg", "l1", "l2", "l3")


@dataclass(frozen=True)
class Machine:
    """What the features assume of the CPU: vector width, cores, registers, cache sizes (bytes)."""

    vector_bits: int = 512
    cores: int = 2
    vector_registers: int = 32
    caches: tuple[int, ...] = (2048, 32 * 1024, 1024 * 1024, 16 * 1024 * 1024)  # registers, L1d, L2, L3

    def lanes(self, dtype_bits: int = 32) -> int:
        return max(1, self.vector_bits // max(8, dtype_bits))

    @classmethod
    def from_target(cls, target) -> Machine:
        """Vector width of the target's CPU; cores from ``num-cores``; x86 registers and typical cache sizes (the
        features are ratios: exact sizes matter little).

        On x86 the width is the widest vector ISA the target's CPU and ``mattr`` have (AVX-512: 512 bits and 32
        registers, AVX: 256 and 16, else 128): TVM's ``llvm_get_vector_width`` says 512 for every x86-64 CPU, an
        AVX2-only Zen 3 or Haswell too, and the features of their schedules (lanes a vector fills, registers
        live) were then those of a CPU they are not. Other ISAs: as LLVM says."""
        from autosearch.frontend.target import target_num_cores

        bits = 128
        try:
            from tvm.target import codegen

            if str(dict(target.export()).get("mtriple", "") or codegen.llvm_get_system_triple()).startswith(
                    ("x86_64", "i386", "i686")):
                bits = next((width for width, feature in ((512, "avx512f"), (256, "avx"))
                             if codegen.llvm_cpu_has_features(feature, target)), 128)
            else:
                bits = int(codegen.llvm_get_vector_width(target)) or 128
        except Exception:  # noqa: BLE001 - a non-LLVM target (cuda): keep a conservative width
            pass
        regs = 32 if bits >= 512 else 16
        return cls(vector_bits=bits, cores=max(1, target_num_cores(target)), vector_registers=regs)


@dataclass
class Loop:
    var: int  # the loop variable's key (``var_key``)
    extent: int
    kind: ForKind
    unroll_max: int = 0  # pragma_auto_unroll_max_step on this loop (0 = none)


@dataclass
class Access:
    name: str  # the buffer's
    shape: tuple[int, ...]
    indices: list  # compiled index expressions over block vars (``compile_index``)
    write: bool
    nbytes: int
    guarded: bool = False  # inside if_then_else: a load that may not run (padding), not speculated

    @classmethod
    def of(cls, buffer, indices, *, write: bool, guarded: bool = False) -> Access:
        return cls(str(buffer.name), tuple(int(s) for s in buffer.shape), [compile_index(ix) for ix in indices],
                   write, max(1, buffer.dtype.bits // 8), guarded)


@dataclass
class Nest:
    name: str
    loops: list[Loop]
    bindings: list  # (block var key, compiled value over loop vars / outer block vars, iter type)
    accesses: list[Access]
    ops: int  # arithmetic operations on loaded data per innermost iteration
    reduce_loops: set[int] = field(default_factory=set)  # loops that drive a reduction block var
    const_ops: int = 0  # operations on indices and constants alone (folded when their loops are unrolled)
    const_loops: set[int] = field(default_factory=set)  # loops that change what those operations read
    unit: str = ""  # a tensorised block: the unit its intrinsic runs on (``TENSOR_UNITS``); "" for a loop body
    gemm: tuple[int, int, int] = (0, 0, 0)  # a tensorised block: M, N, K of one call

    _envs: dict = field(default_factory=dict, repr=False, compare=False)  # env() by its ranges

    def env(self, ranges: dict) -> dict:
        """Intervals of the loop vars in ``ranges`` (others 0) extended with the block vars' intervals.

        Kept per ranges, read-only: the analysis asks for the same few ranges once per access and per loop, and
        the block vars' intervals (a fused loop's floordiv / floormod chains) were most of the extraction."""
        key = frozenset(ranges.items())
        env = self._envs.get(key)
        if env is None:
            env = dict(ranges)
            for var, value, _ in self.bindings:
                env[var] = interval(value, env)
            self._envs[key] = env
        return env


# ------------------------------------------------------------------ expressions
# Index expressions are compiled once into tuples of plain ints ("v", var) / ("c", value) / (op, a, b),
# variables keyed by their object handle: evaluating them then costs no calls into TVM (which dominated the
# extraction time before).
_ARITH = ("Add", "Sub", "Mul", "Min", "Max", "FloorDiv", "Div", "FloorMod", "Mod")


def var_key(var) -> int:
    return int(var.__chandle__())


def compile_index(expr) -> tuple:
    """A TIR index expression as nested tuples (what :func:`interval` evaluates)."""
    t = type(expr).__name__
    if t == "Var":
        return ("v", var_key(expr))
    if t == "IntImm":
        return ("c", int(expr.value))
    if t in _ARITH:
        return (t, compile_index(expr.a), compile_index(expr.b))
    if t == "Cast":
        return compile_index(expr.value)
    if t == "Select":
        return ("Select", compile_index(expr.true_value), compile_index(expr.false_value))
    if t == "Call" and len(expr.args) == 3:  # if_then_else(cond, a, b)
        return ("Select", compile_index(expr.args[1]), compile_index(expr.args[2]))
    return ("c", 0)


def interval(expr: tuple, env: dict) -> tuple[int, int]:
    """Integer range [lo, hi] of a compiled index expression, each variable ranging over ``env[key]`` =
    (lo, hi) (variables not in ``env`` are 0). Exact for the affine indices of tiled loops; floordiv /
    floormod (fused loops) by interval arithmetic."""
    op = expr[0]
    if op == "v":
        return env.get(expr[1], (0, 0))
    if op == "c":
        return expr[1], expr[1]
    if op == "r":  # a range of constants: an operand region's extent (a tensorised block's A, B, C)
        return expr[1], expr[2]
    a, b = interval(expr[1], env), interval(expr[2], env)
    if op == "Add":
        return a[0] + b[0], a[1] + b[1]
    if op == "Sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "Mul":
        c = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return min(c), max(c)
    if op == "Min":
        return min(a[0], b[0]), min(a[1], b[1])
    if op == "Max":
        return max(a[0], b[0]), max(a[1], b[1])
    if op == "Select":
        return min(a[0], b[0]), max(a[1], b[1])
    if b[0] != b[1] or b[0] <= 0:  # division by a non-constant: keep the dividend's range
        return a
    c = b[0]
    if op in ("FloorDiv", "Div"):
        return a[0] // c, a[1] // c
    if a[1] - a[0] + 1 >= c or a[0] // c != a[1] // c:
        return 0, c - 1
    return a[0] % c, a[1] % c


_OPS = {"Add", "Sub", "Mul", "Div", "FloorDiv", "FloorMod", "Mod", "Min", "Max", "Select", "LT", "LE", "GT",
        "GE", "EQ", "NE", "And", "Or", "Not"}


# The operands of the common expression nodes, in the order of _CHILD_ATTRS (what any other node is searched for):
# on Winograd's select chains, six look-ups per node were most of the walk.
_CHILD_ATTRS = ("a", "b", "value", "condition", "true_value", "false_value")
_CHILDREN: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "EQ", "NE", "LT", "LE",
                     "GT", "GE", "And", "Or"), ("a", "b")),
    "Not": ("a",), "Cast": ("value",), "Select": ("condition", "true_value", "false_value"),
    "IntImm": (), "FloatImm": (), "StringImm": (),
}


def _collect(expr, loads: list, counter: list, guarded: bool = False, const_vars: set | None = None) -> bool:
    """Collect the (load, guarded) pairs of an expression and count its operations; returns whether it
    reads a buffer. ``counter[0]`` counts operations on loaded data, ``counter[1]`` those on loop indices and
    constants alone (``const_vars`` gets their variables): Winograd's transform matrices are such chains of
    selects, 36 deep, that LLVM folds to constants once the loops they depend on are unrolled."""
    t = type(expr).__name__
    if t in ("BufferLoad", "TensorLoad"):  # TensorLoad: TVM 0.27's load, its buffer in ``source``
        loads.append((expr, guarded))
        return True
    if t == "Var":
        if const_vars is not None:
            const_vars.add(var_key(expr))
        return False
    reads = False
    if t == "Call":
        is_guard = getattr(expr.op, "name", "") == "prim.if_then_else"
        for i, a in enumerate(expr.args):
            reads |= _collect(a, loads, counter, guarded or (is_guard and i > 0), const_vars)
    elif t in _CHILDREN:
        for attr in _CHILDREN[t]:
            reads |= _collect(getattr(expr, attr), loads, counter, guarded, const_vars)
    else:
        for attr in _CHILD_ATTRS:
            sub = getattr(expr, attr, None)
            if sub is not None and not isinstance(sub, (int, float, str)) and hasattr(sub, "ty"):
                reads |= _collect(sub, loads, counter, guarded, const_vars)
    if t in _OPS or t == "Call":
        counter[0 if reads else 1] += 1
    return reads


# ------------------------------------------------------------------ walking TIR
def nests(func) -> list[Nest]:
    """Every leaf block of a scheduled PrimFunc with the loops around it, outermost first."""
    out: list[Nest] = []
    _visit(func.body, [], [], out)
    return out


def _visit(stmt, loops: list[Loop], bindings: list, out: list[Nest]) -> None:
    t = type(stmt).__name__
    if t == "SBlockRealize":
        block = stmt.block
        if "meta_schedule.layout_rewrite_preproc" in block.annotations:
            return  # the weight prepack: done once at compile time, not timed
        inner = bindings + [(var_key(iv.var), compile_index(value), int(iv.iter_type))
                            for iv, value in zip(block.iter_vars, stmt.iter_values)]
        unit = _tensor_unit(block)
        if unit:
            out.append(_tensor_nest(block, unit, loops, inner))
            return
        if type(block.body).__name__ == "BufferStore":
            out.append(_nest(block, block.body, loops, inner))
        else:
            _visit(block.body, loops, inner, out)
        return
    if t == "For":
        unroll = int(stmt.annotations.get("pragma_auto_unroll_max_step", 0)) if stmt.annotations else 0
        loop = Loop(var_key(stmt.loop_var), int(stmt.extent), ForKind(int(stmt.kind)), unroll)
        _visit(stmt.body, loops + [loop], bindings, out)
        return
    if t == "SeqStmt":
        for s in stmt.seq:
            _visit(s, loops, bindings, out)
        return
    if t == "IfThenElse":
        _visit(stmt.then_case, loops, bindings, out)
        if stmt.else_case is not None:
            _visit(stmt.else_case, loops, bindings, out)
        return
    body = getattr(stmt, "body", None)
    if body is not None:
        _visit(body, loops, bindings, out)


def _nest(block, store, loops, bindings) -> Nest:
    loads: list = []
    counter = [0, 0]
    const_vars: set = set()
    _collect(store.value, loads, counter, const_vars=const_vars)
    accesses = [Access.of(store.buffer, list(store.indices), write=True)]
    seen = {(accesses[0].name, str(accesses[0].indices))}
    for ld, guarded in loads:
        acc = Access.of(ld.buffer if hasattr(ld, "buffer") else ld.source, list(ld.indices), write=False,
                        guarded=guarded)
        key = (acc.name, str(acc.indices))
        if key not in seen:
            seen.add(key)
            accesses.append(acc)
    nest = Nest(block.name_hint, list(loops), bindings, accesses, counter[0], const_ops=counter[1])
    nest.reduce_loops = _loops_changing(nest, {var for var, _, kind in bindings if kind == IterVar.CommReduce})
    if nest.const_ops:
        nest.const_loops = _loops_changing(nest, const_vars)
    return nest


# The units a tensorised block runs on: the accumulator's shape (rows x fp32 columns: an AMX tile, a zmm register
# of 16 lanes), the reduction one unit operation covers (tdpbf16ps: a 64-byte tile row, 32 bf16 values of K;
# vdpbf16ps: a pair), and the id the features give the unit (0: no tensorised block)
TENSOR_UNITS = {"amx": (16, 16, 32, 2.0), "dpbf16": (1, 16, 2, 1.0)}
_TDPBF16PS = "llvm.x86.tdpbf16ps"
_DPBF16_SYMBOL = "autosearch_dpbf16"  # autosearch.tensor_units.dpbf16.symbol's prefix: the micro-kernel


def _tensor_unit(block) -> str:
    """The unit (``TENSOR_UNITS``) of a block tensorised onto a bf16 intrinsic, else "": its operands are matched
    as A, B, C (``autosearch.tensor_units.block``'s description) and its body calls the unit."""
    if {str(m.buffer.name) for m in block.match_buffers} != {"A", "B", "C"}:
        return ""
    calls: list[tuple[str, str]] = []
    _calls(block.body, calls)
    if any(op == "tirx.call_extern" and name.startswith(_DPBF16_SYMBOL) for op, name in calls):
        return "dpbf16"
    if any(op == "tirx.call_llvm_intrin" and name == _tdpbf16ps_id() for op, name in calls):
        return "amx"
    return ""


@functools.cache
def _tdpbf16ps_id() -> str:
    """LLVM's id of ``tdpbf16ps`` (what a ``call_llvm_intrin`` names), looked up once per process."""
    from tvm.target import codegen

    return str(codegen.llvm_lookup_intrinsic_id(_TDPBF16PS))


def _calls(stmt, out: list[tuple[str, str]]) -> None:
    """(op, first argument) of every call statement under ``stmt``."""
    t = type(stmt).__name__
    if t == "Evaluate":
        v = stmt.value
        if type(v).__name__ == "Call" and len(v.args):
            first = v.args[0]
            out.append((str(getattr(v.op, "name", "")), str(getattr(first, "value", first))))
        return
    if t == "SeqStmt":
        for s in stmt.seq:
            _calls(s, out)
        return
    for attr in ("body", "then_case", "else_case"):
        sub = getattr(stmt, attr, None)
        if sub is not None:
            _calls(sub, out)


def _tensor_nest(block, unit: str, loops, bindings) -> Nest:
    """A tensorised block as a nest of its calls: one iteration per call, its accesses the operand regions
    (minimum indices plus the region's extent as a constant range), its GEMM shape from their sizes."""
    regions = {str(m.buffer.name): m.source for m in block.match_buffers}
    accesses, sizes = [], {}
    for name in ("C", "A", "B"):  # the write first, as a loop body's store
        region = regions[name]
        buffer = region.source
        extents = [int(r.extent) for r in region.region]
        sizes[name] = int(np.prod(extents))
        indices = [("Add", compile_index(r.min), ("r", 0, e - 1)) for r, e in zip(region.region, extents)]
        accesses.append(Access(str(buffer.name), tuple(int(d) for d in buffer.shape), indices, name == "C",
                               max(1, buffer.dtype.bits // 8)))
    n = max(1, int(regions["C"].region[-1].extent))  # output channels: C's innermost dimension
    gemm = (max(1, sizes["C"] // n), n, max(1, sizes["B"] // n))
    nest = Nest(block.name_hint, list(loops), bindings, accesses, 2 * gemm[0] * gemm[1] * gemm[2], unit=unit,
                gemm=gemm)
    nest.reduce_loops = _loops_changing(nest, {var for var, _, kind in bindings if kind == IterVar.CommReduce})
    return nest


def _loops_changing(nest: Nest, variables: set) -> set[int]:
    """The loops (indices, extent > 1) whose stepping changes any of ``variables`` (loop or block vars)."""
    zero = nest.env({})
    out = set()
    for i, loop in enumerate(nest.loops):
        if loop.extent > 1:
            env = nest.env({loop.var: (1, 1)})
            if any(env.get(var) != zero.get(var) for var in variables):
                out.add(i)
    return out


# ------------------------------------------------------------------ per-nest analysis
def _flat(nest: Nest, acc: Access, ranges: dict) -> tuple[int, int]:
    """Range of the row-major flat offset of ``acc`` with the loops in ``ranges`` ranging."""
    env = nest.env(ranges)
    shape = acc.shape
    lo = hi = 0
    mult = 1
    for d in range(len(shape) - 1, -1, -1):
        a, b = interval(acc.indices[d], env)
        lo += a * mult
        hi += b * mult
        mult *= shape[d]
    return lo, hi


def _footprint(nest: Nest, acc: Access, ranges: dict) -> float:
    env = nest.env(ranges)
    shape = acc.shape
    spans = []
    for d, ix in enumerate(acc.indices):
        lo, hi = interval(ix, env)
        spans.append(min(hi - lo + 1, shape[d]) if d < len(shape) else hi - lo + 1)
    return float(math.prod(spans))


def _step(nest: Nest, acc: Access, loop: Loop) -> int:
    """Elements between the addresses of ``acc`` at ``loop`` = 0 and 1 (others 0)."""
    return abs(_flat(nest, acc, {loop.var: (1, 1)})[0] - _flat(nest, acc, {})[0])


def _moves(nest: Nest, acc: Access, loop: Loop) -> bool:
    """Does the address of ``acc`` change when ``loop`` steps (others fixed at 0)?"""
    return _step(nest, acc, loop) != 0


def vector_pieces(v: int, lanes: int) -> int:
    """Native vector operations for one operation on ``v`` lanes (LLVM splits <26 x float> as 16+8+2)."""
    if v <= 1:
        return 1
    full, rest = divmod(v, lanes)
    return full + bin(rest).count("1")


def _access_kind(nest: Nest, acc: Access, vloop: Loop | None) -> str:
    """How the lanes of the vectorised loop touch ``acc``: scalar (no vector loop), broadcast,
    contiguous, or scattered (a gather / scatter, or a guarded load LLVM cannot speculate)."""
    if vloop is None:
        return "scalar"
    lo, hi = _flat(nest, acc, {vloop.var: (0, vloop.extent - 1)})
    if hi == lo:
        return "broadcast"
    if acc.guarded:
        return "scattered"
    step = _flat(nest, acc, {vloop.var: (1, 1)})[0] - _flat(nest, acc, {})[0]
    return "contiguous" if hi - lo + 1 == vloop.extent and step == 1 else "scattered"


def _cache_traffic(nest: Nest, machine: Machine, trips_outside: np.ndarray) -> dict[str, float]:
    """Bytes the nest touches, and the traffic into each cache level: the data touched by one execution of
    the loops k..n-1 is loaded once per iteration of the loops outside them, k the outermost level that fits."""
    loops = nest.loops
    n = len(loops)
    by_buffer: dict[str, list[Access]] = {}
    for acc in nest.accesses:
        by_buffer.setdefault(acc.name, []).append(acc)

    def total_bytes(k: int) -> float:
        ranges = {lp.var: (0, lp.extent - 1) for lp in loops[k:]}
        return sum(max(_footprint(nest, a, ranges) for a in accs) * accs[0].nbytes for accs in by_buffer.values())

    totals = [total_bytes(k) for k in range(n + 1)]
    out = {"bytes_touched": totals[0]}
    for name, cap in zip(CACHE_LEVELS, machine.caches):
        k = next((k for k in range(n + 1) if totals[k] <= cap), n)
        out[f"traffic_{name}"] = totals[0] if k == 0 else trips_outside[k - 1] * totals[k - 1]
    return out


def _parallel(loops: list[Loop], ext: np.ndarray, trips_outside: np.ndarray, cores: int) -> dict[str, float]:
    """Parallel extent, the busiest core's share over the even one, and the trips outside the parallel loop."""
    par = [j for j, lp in enumerate(loops) if lp.kind == ForKind.PARALLEL]
    p = float(np.prod(ext[par])) if par else 1.0
    return {"parallel": p, "par_imbalance": math.ceil(p / cores) * cores / p if p >= 1 else float(cores),
            "par_outer_trips": float(trips_outside[par[0]] if par else trips_outside[-1])}


def analyse_tensor(nest: Nest, machine: Machine) -> dict[str, float]:
    """The features of a tensorised block (raw values; keys are ``TENSOR_KEYS``): one iteration per call."""
    rows, cols, kstep, unit_id = TENSOR_UNITS[nest.unit]
    ext = np.array([max(1, lp.extent) for lp in nest.loops], dtype=np.float64)
    trips_outside = np.concatenate([[1.0], np.cumprod(ext)])  # trips_outside[-1]: the calls
    calls = float(trips_outside[-1])
    m, n, k = nest.gemm
    acc_m, acc_n = max(1.0, math.ceil(m / rows)), max(1.0, math.ceil(n / cols))
    steps = max(1.0, k / kstep)  # unit operations along the reduction, per accumulator
    feats = {"unit": unit_id, "calls": calls, "M": float(m), "N": float(n), "K": float(k),
             "accumulators": acc_m * acc_n, "loads_per_op": (acc_m + acc_n) / (acc_m * acc_n),
             "unit_ops": calls * acc_m * acc_n * steps, "operand_loads": calls * (acc_m + acc_n) * steps,
             "acc_stores": calls * acc_m * acc_n, "reduce_calls": float(np.prod([ext[j] for j in nest.reduce_loops]))
             if nest.reduce_loops else 1.0}
    for acc, name in zip(nest.accesses, ("C", "A", "B")):
        feats[f"bytes_{name}"] = calls * _footprint(nest, acc, {}) * acc.nbytes
    feats.update(_cache_traffic(nest, machine, trips_outside))
    feats.update(_parallel(nest.loops, ext, trips_outside, machine.cores))
    return feats


def analyse(nest: Nest, machine: Machine) -> dict[str, float]:
    """The features of one leaf block (raw values: counts, elements, bytes); keys are ``NEST_KEYS``."""
    cores = machine.cores
    loops = nest.loops
    n = len(loops)
    ext = np.array([max(1, lp.extent) for lp in loops], dtype=np.float64)
    iters = float(np.prod(ext)) if n else 1.0
    trips_outside = np.concatenate([[1.0], np.cumprod(ext)])  # trips_outside[k] = product of ext[:k]
    feats: dict[str, float] = {"iters": iters, "ops": nest.ops * iters}

    feats.update(_cache_traffic(nest, machine, trips_outside))

    # ---- the vector loop and the unrolled body (the straight-line code LLVM schedules)
    vec = [j for j, lp in enumerate(loops) if lp.kind == ForKind.VECTORIZED]
    vloop = loops[vec[-1]] if vec else None
    lanes = machine.lanes(nest.accesses[0].nbytes * 8)
    v = float(vloop.extent) if vloop else 1.0
    pieces = vector_pieces(int(v), lanes)
    budget = max((lp.unroll_max for lp in loops), default=0)
    body_steps, first_unrolled = 1.0, n
    for j in range(n - 1, -1, -1):
        if loops[j].kind == ForKind.VECTORIZED:
            first_unrolled = j
            continue
        if ext[j] == 1:
            first_unrolled = j
            continue
        if body_steps * ext[j] > max(budget, LLVM_FULL_UNROLL):
            break
        body_steps *= ext[j]
        first_unrolled = j
    unrolled = loops[first_unrolled:]
    # the innermost loop that stays a loop, and how often the unrolled body runs
    real = [j for j in range(first_unrolled) if ext[j] > 1]
    jstar = loops[real[-1]] if real else None
    implicit = 0.0
    if vloop is None and jstar is not None and _step(nest, nest.accesses[0], jstar) == 1 and all(
            _step(nest, a, jstar) in (0, 1, 2) and not a.guarded for a in nest.accesses[1:]):
        # LLVM's loop vectoriser takes the innermost loop left when its accesses are unit-stride (or
        # interleaved by 2) and unguarded; it runs one register of lanes at a time
        vloop = jstar
        v = float(min(lanes, jstar.extent))
        pieces = vector_pieces(int(v), lanes)
        implicit = v
        real = [j for j in real if loops[j] is not jstar]
        jstar = loops[real[-1]] if real else None
    body_runs = iters / (body_steps * v)
    body_ranges = {lp.var: (0, lp.extent - 1) for lp in unrolled}
    if implicit:
        body_ranges[vloop.var] = (0, int(v) - 1)
    kinds = [_access_kind(nest, a, vloop) for a in nest.accesses]
    if implicit:
        kinds = ["interleaved" if k == "scattered" else k for k in kinds]
    loads = stores = scattered = 0.0
    live = 0.0  # vector registers the body keeps live across j* (accumulators, hoisted operands)
    for acc, kind in zip(nest.accesses, kinds):
        fp = _footprint(nest, acc, body_ranges)  # distinct elements the body touches
        if kind == "contiguous":
            ops = fp / v * pieces
        elif kind == "broadcast":
            ops = fp / 1.0  # one broadcast load per distinct element (over the non-vector loops)
        elif kind == "interleaved":
            ops = 2.0 * fp / v * pieces
        elif kind == "scattered":
            ops = 2.0 * fp  # a scalar load (or store) and an insert (or extract) per lane
            scattered += ops
        else:
            ops = fp
        # LICM keeps an access invariant in the innermost loops in a register: it runs once per
        # iteration of the first loop (outward from j*) that moves it
        reuse = 1.0
        for j in reversed(real):
            if _moves(nest, acc, loops[j]):
                break
            reuse *= ext[j]
        if reuse > 1:
            live += ops
            ops = ops / reuse
        if acc.write:
            stores += ops
        else:
            loads += ops
    spill = max(0.0, live - (machine.vector_registers - 4))
    # operations on indices and constants: folded where every loop that changes them is unrolled, else run
    # (LICM-hoisted) once per iteration of the innermost remaining loop that changes them, per unrolled copy
    const = 0.0
    runtime = [j for j in nest.const_loops if j < first_unrolled]
    if runtime:
        copies = float(np.prod([ext[j] for j in nest.const_loops if j >= first_unrolled]))
        const = nest.const_ops * trips_outside[max(runtime) + 1] * copies
    arith = nest.ops * body_steps * (pieces if vloop else 1.0)
    feats["vec_len"] = v
    feats["vec_implicit"] = implicit
    feats["vec_pieces_per_register"] = pieces / max(1.0, v / lanes)
    feats["vec_lanes_used"] = min(v, lanes) / lanes
    feats["body_steps"] = body_steps
    feats["body_runs"] = body_runs
    feats["body_live_vectors"] = live
    feats["est_arith"] = body_runs * arith
    feats["est_loads"] = body_runs * loads
    feats["est_stores"] = body_runs * stores
    feats["est_scattered"] = body_runs * scattered
    feats["est_spills"] = body_runs * spill * 2
    feats["est_loop_overhead"] = body_runs * 3.0
    feats["est_const"] = const
    feats["est_total"] = body_runs * (arith + loads + stores + spill * 2 + 3.0) + const
    feats["vec_write"] = {"contiguous": 1.0, "broadcast": 0.5, "scattered": -1.0}.get(kinds[0], 0.0)
    feats["vec_reads_scattered"] = float(sum(k == "scattered" for k in kinds[1:]))
    feats["vec_reads_contiguous"] = float(sum(k == "contiguous" for k in kinds[1:]))
    feats["guarded_loads"] = float(sum(a.guarded for a in nest.accesses))

    # ---- reductions: the register tile
    red = sorted(nest.reduce_loops)
    out = nest.accesses[0]
    if red:
        last = red[-1]
        ranges = {lp.var: (0, lp.extent - 1) for lp in loops[last + 1:]}
        acc_elems = _footprint(nest, out, ranges)
        feats["accumulators"] = acc_elems
        feats["acc_vectors"] = acc_elems / max(1.0, min(v, lanes))
        feats["acc_in_registers"] = float(jstar is not None and not _moves(nest, out, jstar) and spill == 0)
        feats["reduce_inner_ext"] = float(ext[last])
        feats["is_reduction"] = 1.0
    else:
        for key in ("accumulators", "acc_vectors", "acc_in_registers", "reduce_inner_ext", "is_reduction"):
            feats[key] = 0.0

    # ---- parallelism
    feats.update(_parallel(loops, ext, trips_outside, cores))
    feats["unroll_max"] = float(budget)
    return feats


def _lg(x: float) -> float:
    return math.log2(max(float(x), 1e-9))


NEST_KEYS = (
    "iters", "ops", "bytes_touched", *(f"traffic_{c}" for c in CACHE_LEVELS),
    "vec_len", "vec_implicit", "vec_pieces_per_register", "vec_lanes_used", "body_steps", "body_runs",
    "body_live_vectors", "est_arith", "est_loads", "est_stores", "est_scattered", "est_spills",
    "est_loop_overhead", "est_const", "est_total", "vec_write", "vec_reads_scattered", "vec_reads_contiguous",
    "guarded_loads", "accumulators", "acc_vectors", "acc_in_registers", "reduce_inner_ext", "is_reduction",
    "parallel", "par_imbalance", "par_outer_trips", "unroll_max",
)
_SUMMED = ("est_total", "est_arith", "est_loads", "est_stores", "est_scattered", "est_spills",
           "est_loop_overhead", "est_const", *(f"traffic_{c}" for c in CACHE_LEVELS), "iters")
_PER_FLOP = {"iters", "ops", "bytes_touched", "body_runs"}  # besides est_* and traffic_*: log2 per FLOP
_MAIN = ("vec_len", "acc_vectors", "acc_in_registers", "parallel", "par_imbalance", "body_live_vectors",
         "vec_write", "unroll_max")
TENSOR_KEYS = (
    "unit", "calls", "M", "N", "K", "accumulators", "loads_per_op", "unit_ops", "operand_loads", "acc_stores",
    "reduce_calls", "bytes_C", "bytes_A", "bytes_B", "bytes_touched", *(f"traffic_{c}" for c in CACHE_LEVELS),
    "parallel", "par_imbalance", "par_outer_trips",
)
_TENSOR_PER_FLOP = {"calls", "unit_ops", "operand_loads", "acc_stores", "bytes_C", "bytes_A", "bytes_B",
                    "bytes_touched", *(f"traffic_{c}" for c in CACHE_LEVELS)}
_TENSOR_LOG2 = {"M", "N", "K", "accumulators", "reduce_calls", "par_outer_trips"}
FEATURE_NAMES: tuple[str, ...] = (
    *(f"all_{k}" for k in _SUMMED),
    *(f"n{rank}_{k}" for rank in range(2) for k in ("share", *NEST_KEYS)),
    *(f"main_{k}" for k in _MAIN),
    "n_nests", "log2_flops",
    *(f"tensor_{k}" for k in TENSOR_KEYS),
)
WIDTH = len(FEATURE_NAMES)


def _per_flop(key: str) -> bool:
    return key in _PER_FLOP or key.startswith(("est_", "traffic_"))


def schedule_features(mod, flops: float, machine: Machine | None = None) -> dict[str, float]:
    """Named features of a scheduled module (``FEATURE_NAMES``): instruction and traffic estimates summed
    over nests, the two costliest nests in full, the main (reduction) nest's key facts."""
    machine = machine or Machine()
    cores = machine.cores
    found = nests(mod["main"])
    per = [analyse(nest, machine) for nest in found if not nest.unit]
    feats = dict.fromkeys(FEATURE_NAMES, 0.0)
    f = max(float(flops), 1.0)
    feats["log2_flops"] = _lg(f)
    tensor = [analyse_tensor(nest, machine) for nest in found if nest.unit]
    if tensor:  # the tensorised GEMM (one per task: the conv's); its FLOPs are most of the task's
        t = max(tensor, key=lambda x: x["unit_ops"])
        for key in TENSOR_KEYS:
            feats[f"tensor_{key}"] = (_lg(t[key] / f) if key in _TENSOR_PER_FLOP
                                      else _lg(t[key]) if key in _TENSOR_LOG2 else float(t[key]))
    if not per:
        return feats

    def weight(x: dict[str, float]) -> float:
        """Share of a nest's instructions on the busiest core: ceil(jobs / cores) / jobs."""
        return x["par_imbalance"] / cores

    for key in _SUMMED:
        feats[f"all_{key}"] = _lg(sum(x[key] * weight(x) for x in per) / f)
    total = max(1e-9, sum(x["est_total"] * weight(x) for x in per))
    ranked = sorted(per, key=lambda x: -x["est_total"] * weight(x))
    for rank, x in enumerate(ranked[:2]):
        feats[f"n{rank}_share"] = x["est_total"] * weight(x) / total
        for key in NEST_KEYS:
            feats[f"n{rank}_{key}"] = _lg(x[key] / f) if _per_flop(key) else float(x[key])
    main = max(per, key=lambda x: (x["is_reduction"], x["ops"]))
    for key in _MAIN:
        feats[f"main_{key}"] = float(main[key])
    feats["n_nests"] = float(len(per))
    return feats


def loop_features(mod, flops: float, machine: Machine | None = None) -> np.ndarray:
    """The model input: ``schedule_features`` in ``FEATURE_NAMES`` order, signed-log scaled (float32)."""
    feats = schedule_features(mod, flops, machine)
    return signed_log(np.asarray([feats[k] for k in FEATURE_NAMES], dtype=np.float64)).astype(np.float32)


__all__ = ["FEATURE_NAMES", "Machine", "NEST_KEYS", "TENSOR_KEYS", "TENSOR_UNITS", "WIDTH", "analyse",
           "analyse_tensor", "loop_features", "nests", "schedule_features", "vector_pieces"]
