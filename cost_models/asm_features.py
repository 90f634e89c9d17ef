"""Assembly features: the instruction mix of a compiled kernel's hot loops, read off LLVM's x86-64 assembly.

The loop features (:mod:`autosearch.cost_models.loop_features`) predict what LLVM will make of a schedule; these
read what it made. Each schedule is compiled (``tvm.compile`` for the task's target, the build the
measurement would do) and its assembly parsed:

- **loops** are the backward branches of each function (a jump to a label at or above it); an
  innermost loop contains no other one;
- **the hot loops** are the two innermost loops with the most float32 FMA lanes per iteration (a
  ``vfmadd...ps`` on zmm is 16 lanes, ymm 8, xmm 4, a scalar ``...ss`` 1), for a conv2d the
  reduction loop around the register tile;
- **per hot loop**: instructions, FMA lanes per instruction and per cycle on a generic wide x86 core
  (``ISSUE`` instructions, ``LOADS`` loads, ``STORES`` stores and ``FP_PIPES`` vector arithmetic
  operations per cycle: Zen 4/5 and Golden Cove class), and per FMA: loads, stores, stack accesses
  (spills and reloads), broadcasts, shuffles (``vinsertps``/``vperm``/``vshuf``... chains where LLVM
  builds a vector lane by lane), plus gathers, the share of scalar and of zmm FMAs, loop control;
- **the whole module**: the same mix, and how many loops and innermost loops hold FMAs (a kernel
  whose compute is split over many loops spends more time outside its best one).

What it adds: SLP-vectorised or scalarised bodies, spills, shuffles and gathers are facts of the
compiled code, which the loop features can only predict; what that buys held out (``asm``, ``loop+asm``
against ``loop``) is in README (Results: cost models).

Cost: one LLVM build per schedule, about two orders of magnitude more than the loop features (README's
feature table), spread over ``workers`` threads. That suits comparing models on measured records (their
features are cached, :mod:`autosearch.cost_models.feature_store`) and guiding search on a device whose measurements
are slow, not scoring thousands of candidates a batch on a fast one. x86-64 targets only: other ISAs'
mnemonics are not parsed (a clear error).
"""

from __future__ import annotations

import os
import platform
import re
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from autosearch.cost_models._scaling import signed_log
from autosearch.errors import UserError

# Bump when the features of an assembly text change, or the program compiled for a schedule: cached features
# (autosearch.cost_models.feature_store) of an older version are then recomputed. 2: the kernel as a trial builds it.
VERSION = 2
ISSUE, LOADS, STORES, FP_PIPES = 6, 3, 2, 2  # per cycle, a generic wide x86-64 core
HOT_LOOPS = 2
_LANES = {"fma_s": 1, "fma_xmm": 4, "fma_ymm": 8, "fma_zmm": 16}  # float32 lanes per FMA instruction
_LABEL = re.compile(r"^([.\w$]+):")
_JUMP = re.compile(r"^j\w*\s+([.\w$]+)$")
_SHUFFLE = ("perm", "shuf", "insert", "extract", "unpck", "blend", "palign", "expand", "compress")
_FP_ARITH = ("add", "sub", "mul", "max", "min", "div")
_CONTROL = ("cmp", "test", "inc", "dec")


def is_x86(target) -> bool:
    """The target compiles to x86-64 (its ``mtriple``, or the host when it names none)."""
    triple = str(dict(target.export()).get("mtriple", "") or "")
    arch = triple.split("-")[0] if triple else platform.machine()
    return arch in ("x86_64", "amd64", "AMD64")


def kernel_assembly(mod, target) -> str:
    """The x86-64 assembly of a scheduled PrimFunc module's kernel as a trial times it (a one-line
    ``UserError`` for another ISA): the module the measurement compiles
    (:func:`autosearch.measure.kernels.as_compiled`: the build's rewrites, the weights' layout rewrite split
    off), less that split-off ``prepack``, which runs once when the model loads and is not timed."""
    import tvm

    if not is_x86(target):
        raise UserError(f"assembly features read x86-64 code; target {target} is not x86-64")
    from autosearch.measure.kernels import as_compiled
    from autosearch.tvm_compat import build_context

    compiled, _ = as_compiled(mod)
    with build_context(target.kind.name):
        built = tvm.compile(tvm.IRModule({"main": compiled["main"]}), target=target)
    host = built.mod.imports[0] if built.mod.imports else built.mod
    return host.inspect_source("asm")


def parse(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Instructions (comments, directives and labels dropped) and loops as (first, last) instruction
    index ranges, from the backward branches."""
    instructions: list[str] = []
    labels: dict[str, int] = {}
    loops: list[tuple[int, int]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if m := _LABEL.match(line):
            labels[m.group(1)] = len(instructions)
            continue
        if line.startswith("."):
            continue
        if (m := _JUMP.match(line)) and m.group(1) in labels:  # a label already seen: a backward branch
            loops.append((labels[m.group(1)], len(instructions)))
        instructions.append(line)
    return instructions, loops


def classify(ins: str) -> Counter:
    """What one AT&T-syntax instruction does: FMA by width, vector arithmetic, loads, stores, ..."""
    op, _, args = ins.replace("\t", " ").partition(" ")
    args = re.sub(r"\{[^}]*\}", "", args).strip()  # AVX-512 masks and broadcasts decorations
    out: Counter = Counter(n=1)
    width = next((w for w in ("zmm", "ymm", "xmm") if f"%{w}" in args), "gpr")
    scalar = op.endswith(("ss", "sd"))
    if "fmadd" in op or "fmsub" in op:
        out["fma_s" if scalar else f"fma_{width}"] += 1
    elif op.startswith("v") and width != "gpr" and any(op[1:].startswith(a) for a in _FP_ARITH):
        out["fp_arith"] += 1
    if "broadcast" in op:
        out["broadcast"] += 1
    if "gather" in op:
        out["gather"] += 1
    if width != "gpr" and any(s in op for s in _SHUFFLE):
        out["shuffle"] += 1
    if "(" in args and not op.startswith(("lea", "nop", "prefetch")):
        out["store" if args.endswith(")") else "load"] += 1
        if "%rsp" in args or "%rbp" in args:
            out["stack"] += 1
    if op.startswith("j") or op.startswith(_CONTROL):
        out["control"] += 1
    return out


def _lanes(c: Counter) -> int:
    return sum(c[k] * n for k, n in _LANES.items())


def _mix(c: Counter, prefix: str) -> dict[str, float]:
    n = max(c["n"], 1)
    fma = sum(c[k] for k in _LANES)
    per = max(fma, 1)
    cycles = max(n / ISSUE, c["load"] / LOADS, c["store"] / STORES, (fma + c["fp_arith"]) / FP_PIPES, 1 / ISSUE)
    return {
        f"{prefix}instructions": float(c["n"]), f"{prefix}fma_lanes": float(_lanes(c)),
        f"{prefix}lanes_per_instruction": _lanes(c) / n, f"{prefix}lanes_per_cycle": _lanes(c) / cycles,
        f"{prefix}loads_per_fma": c["load"] / per, f"{prefix}stores_per_fma": c["store"] / per,
        f"{prefix}stack_per_fma": c["stack"] / per, f"{prefix}broadcasts_per_fma": c["broadcast"] / per,
        f"{prefix}shuffles_per_fma": c["shuffle"] / per, f"{prefix}gathers": float(c["gather"]),
        f"{prefix}scalar_fma_share": c["fma_s"] / per, f"{prefix}zmm_fma_share": c["fma_zmm"] / per,
        f"{prefix}control_share": c["control"] / n,
    }


_PREFIXES = tuple(f"hot{i}_" for i in range(HOT_LOOPS)) + ("module_",)
FEATURE_NAMES: tuple[str, ...] = tuple(
    name for p in _PREFIXES for name in _mix(Counter(), p)
) + ("hot0_share_of_lanes", "loops", "innermost_loops", "fma_loops")
WIDTH = len(FEATURE_NAMES)


def assembly_features(text: str) -> dict[str, float]:
    """Named features (``FEATURE_NAMES``) of one module's assembly."""
    instructions, loops = parse(text)
    kinds = [classify(i) for i in instructions]
    innermost = [(a, b) for a, b in loops if not any((c, d) != (a, b) and a <= c and d <= b for c, d in loops)]
    bodies = []
    for a, b in innermost:
        body: Counter = Counter()
        for k in kinds[a:b + 1]:
            body.update(k)
        bodies.append(body)
    bodies.sort(key=lambda c: (_lanes(c), c["n"]), reverse=True)
    module: Counter = Counter()
    for k in kinds:
        module.update(k)
    out: dict[str, float] = {}
    for i in range(HOT_LOOPS):
        out.update(_mix(bodies[i] if i < len(bodies) else Counter(), f"hot{i}_"))
    out.update(_mix(module, "module_"))
    out["hot0_share_of_lanes"] = _lanes(bodies[0]) / max(sum(_lanes(c) for c in bodies), 1) if bodies else 0.0
    out["loops"] = float(len(loops))
    out["innermost_loops"] = float(len(innermost))
    out["fma_loops"] = float(sum(1 for c in bodies if _lanes(c)))
    return out


def asm_vector(text: str) -> np.ndarray:
    """``assembly_features`` as a float32 vector (``WIDTH``), ``sign(x) log2(1 + |x|)`` like the loop features."""
    d = assembly_features(text)
    return signed_log(np.array([d[n] for n in FEATURE_NAMES], dtype=np.float64)).astype(np.float32)


def asm_features(mods: Sequence, target, *, workers: int | None = None) -> list[np.ndarray]:
    """One assembly-feature vector per scheduled module, built on ``workers`` threads (default: the
    machine's cores; TVM's build releases the GIL, so two threads build twice as fast on two cores)."""
    if not mods:
        return []
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(mods) == 1:
        return [asm_vector(kernel_assembly(m, target)) for m in mods]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda m: asm_vector(kernel_assembly(m, target)), mods))


__all__ = ["FEATURE_NAMES", "HOT_LOOPS", "WIDTH", "asm_features", "asm_vector", "assembly_features", "classify",
           "is_x86", "kernel_assembly", "parse"]
