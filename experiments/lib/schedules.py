"""What a schedule does, in a line: the loop nest of a scheduled kernel's main computation and where the other
blocks sit in it, so two methods' best schedules of one task can be set side by side (the study's "why does
MetaSchedule win this task").

A schedule is described from the module its trace produces, not from the trace's decisions: the loops TVM
actually generated, after the postprocessors fused the parallel loops and chose the vector loop and the unroll
step, are what decide the speed, and two traces of different sketches cannot be compared decision by decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_KINDS = {1: "parallel", 2: "vector", 3: "unrolled"}  # tirx.ForKind values; 0 serial, 4 thread-bound
UNROLL = "pragma_auto_unroll_max_step"


@dataclass(frozen=True)
class Loop:
    name: str
    extent: int
    kind: str = "serial"


@dataclass
class BlockNest:
    """A block and the loops around it, outermost first."""

    name: str
    loops: list[Loop]
    unroll: int | None = None  # the auto-unroll step annotated on its loops, if any


@dataclass
class ScheduleSummary:
    """The main block (the one under the most loops: the convolution's update) and the others, by name."""

    main: BlockNest
    others: list[BlockNest] = field(default_factory=list)

    @property
    def parallel(self) -> int:
        """Iterations of the main block's parallel loops (1: not parallel)."""
        out = 1
        for loop in self.main.loops:
            out *= loop.extent if loop.kind == "parallel" else 1
        return out

    @property
    def vector(self) -> int:
        """The main block's vector loop extent (1: not vectorised)."""
        return next((loop.extent for loop in reversed(self.main.loops) if loop.kind == "vector"), 1)

    def placement(self, block: BlockNest) -> str:
        """Where ``block`` runs relative to the main block: under which of its loops (the innermost one they
        share), or at the root."""
        shared = 0
        for mine, theirs in zip(self.main.loops, block.loops):
            if mine.name != theirs.name:
                break
            shared += 1
        return f"under {short(self.main.loops[shared - 1].name)}" if shared else "at root"

    def nest(self) -> str:
        """The main block's loops, outermost first, loops of extent 1 left out: ``name extent`` with ``P`` for
        parallel, ``V`` vector, ``U`` unrolled."""
        marks = {"parallel": "P ", "vector": "V ", "unrolled": "U "}
        return " / ".join(f"{marks.get(loop.kind, '')}{short(loop.name)} {loop.extent}"
                          for loop in self.main.loops if loop.extent > 1) or "(no loops)"

    def describe(self) -> dict[str, str]:
        """The columns of a side-by-side table."""
        others = [b for b in self.others if not b.name.endswith("_init")]
        return {"parallel": str(self.parallel), "vector": str(self.vector),
                "unroll": str(self.main.unroll or 0), "loop nest": self.nest(),
                "other blocks": "; ".join(f"{b.name} {self.placement(b)}" for b in others) or "-"}


def short(name: str) -> str:
    """A fused loop's name is the names of all it fused: ``fused`` says enough."""
    return "fused" if "fused" in name else name


def block_nests(func) -> list[BlockNest]:
    """Every block of a PrimFunc (the root left out) with the loops around it, in program order."""
    from tvm import tirx
    from tvm.s_tir import SBlockRealize

    out: list[BlockNest] = []

    def walk(stmt: Any, loops: list[Any]) -> None:
        if isinstance(stmt, tirx.For):
            walk(stmt.body, [*loops, stmt])
        elif isinstance(stmt, SBlockRealize):
            block = stmt.block
            if block.name_hint != "root":
                steps = [int(loop.annotations[UNROLL]) for loop in loops if UNROLL in loop.annotations]
                out.append(BlockNest(str(block.name_hint), [_loop(loop) for loop in loops],
                                     max(steps) if steps else None))
            walk(block.body, loops)
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                walk(s, loops)
        elif isinstance(stmt, tirx.IfThenElse):
            walk(stmt.then_case, loops)
            if stmt.else_case is not None:
                walk(stmt.else_case, loops)
        elif hasattr(stmt, "body"):
            walk(stmt.body, loops)

    walk(func.body, [])
    return out


def _loop(loop: Any) -> Loop:
    return Loop(str(loop.loop_var.name), int(loop.extent), _KINDS.get(int(loop.kind), "serial"))


def summarize(mod) -> ScheduleSummary:
    """The summary of a scheduled module's ``main`` (ties for the main block go to the first in program order;
    the layout-rewrite copies of the weights, ``*_global``, are left out: they run once, before inference)."""
    nests = [b for b in block_nests(mod["main"]) if not b.name.endswith("_global")]
    if not nests:
        raise ValueError("the module has no blocks")
    main = max(nests, key=lambda b: len(b.loops))
    return ScheduleSummary(main, [b for b in nests if b is not main])


__all__ = ["BlockNest", "Loop", "ScheduleSummary", "block_nests", "short", "summarize"]
