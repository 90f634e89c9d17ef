"""Sibling tasks: one layer's loop nest fused with different epilogues, and the configs they lend each other.

A model runs the same convolution in several places, and TVM's fusion makes a task of each distinct epilogue:
YOLOv8n's C2f bottleneck convolves twice at one geometry, the first fused with its SiLU and a cast, the second with
a residual add as well, and the heads repeat a geometry with and without the activation. Their workload keys
differ, so known schedules, the log and the cost model's records treat them as strangers, yet their design spaces
are the same loop nest with a different tail: a config of one replays on the other (its perfect tiles multiply to
the same extents) and the two rank configs alike, the epilogue adding the same pass over the output to every
schedule. In a run that gives each task a handful of trials (a model of a hundred tasks and more, or a slow CPU),
each sibling searches alone with its own handful.

Here a task's batch starts with the best config of a sibling that is ahead of it (:func:`lent`; one per batch, a
trial like any other, logged with the strategy name :data:`SOURCE`): a layer's best schedule found under either
epilogue is tried under the other. The strategy is not told of it (it did not ask), but the
cost model learns from it, and a strategy that later asks for it gets its result without a second measurement.
Siblings are found by the arguments the loop nest reads and writes (the first, the second and the output: data,
weights, result) and the name's operator (:func:`sibling_key`), then confirmed by the space itself
(:meth:`~autosearch.search.space.DecisionSpace.replayable`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from autosearch.types import Config

if TYPE_CHECKING:
    from autosearch.frontend.task import TuningTask
    from autosearch.search.scheduler import TaskState

SOURCE = "sibling"  # the strategy name of the trials a sibling lent (their log records)

_EPILOGUE = re.compile(r"_(add|subtract|multiply|divide|fast_sigmoid|sigmoid|cast|clip|relu|tanh|fast_tanh|"
                       r"maximum|minimum|prepacked)\d*")


def sibling_key(task: TuningTask) -> tuple | None:
    """What siblings share: the operator (the name without its epilogue and numbering), its lowering's layout and
    algorithm, the shapes of its data and result and its weights' shape and type. The data's and the result's
    types may differ (an fp32 input where the producer's epilogue did not cast to bf16, an fp32 result where a
    residual add follows): the loop nest is the same. None for a task of fewer than three arguments."""
    return key_of(task.name, task.args, task.lowering)


def key_of(name: str, args: Sequence, lowering: Mapping) -> tuple | None:
    """:func:`sibling_key` from a task's fields, as a log's task record holds them (lists where a task has
    tuples), so a log is grouped without rebuilding its tasks' TensorIR."""
    if len(args) < 3:
        return None
    head = _EPILOGUE.split(name, maxsplit=1)[0]
    operator = re.sub(r"\d+", "", head)
    return (operator, str(lowering.get("algorithm", "")), tuple(lowering.get("layouts", ())),
            str(lowering.get("layout", "")), tuple(args[0][0]), (tuple(args[1][0]), args[1][1]), tuple(args[-1][0]))


def group(states: Sequence[TaskState]) -> dict[int, list[TaskState]]:
    """For each task (by ``id`` of its state), the other tasks of ``states`` with its :func:`sibling_key`."""
    by_key: dict[tuple, list[TaskState]] = {}
    for state in states:
        key = sibling_key(state.task)
        if key is not None:
            by_key.setdefault(key, []).append(state)
    return {id(s): [o for o in members if o is not s] for members in by_key.values() if len(members) > 1
            for s in members}


def best_config(state: TaskState) -> Config | None:
    """The config of ``state``'s fastest valid measurement, or None."""
    ok = [(r.median, c) for c, r in state.measured.items() if r.ok]
    return min(ok, key=lambda pair: pair[0])[1] if ok else None


def _untuned(state: TaskState) -> float | None:
    baseline = state.baseline
    return baseline.median if baseline is not None and baseline.ok and baseline.median > 0 else None


def lent(state: TaskState, siblings: Sequence[TaskState]) -> Config | None:
    """The one config a sibling lends ``state`` now: the best config of the sibling furthest ahead of ``state``,
    when ``state`` has neither measured nor asked for it and its space replays it; None when no sibling is ahead.
    Ahead is judged by the best latency over the task's untuned kernel's, as a residual add costs every schedule
    of one sibling the same extra pass that the other never makes; by the latency alone where an untuned timing
    is missing (a failed one, a task not yet set up)."""
    if state.space is None:
        return None
    members = [state, *siblings]
    untuned = [_untuned(s) for s in members]
    scale = dict(zip(map(id, members), untuned)) if all(untuned) else {id(s): 1.0 for s in members}

    def relative(s: TaskState) -> float:
        return s.best_latency / scale[id(s)]

    own = relative(state)
    for other in sorted(siblings, key=relative):
        if relative(other) >= own:
            return None
        config = best_config(other)
        if (config is not None and config not in state.measured and config not in state.asked
                and state.space.replayable(config)):
            return config
    return None
