"""Known schedules of the same layer at another shape: another machine's config re-fitted to this task's extents.

A task's workload key hashes its shapes, so a user's export at another image size or batch (Ultralytics trains its
oriented-box models at 1024, and exports at any ``imgsz``) finds none of the known schedules measured at 640, though
its layers are the same convolutions over larger feature maps. Such a task borrows the known configs of its layer
at the nearest other shape: same operator and epilogue (the task name without TVM's numbering), same lowering, same
weights, the same number, ranks and types of arguments (:func:`layer_key`). Their design spaces are the same sketches
with other loop extents: every categorical decision and compute location replays as it is, and each tile decision
is re-fitted to the legal tiling of this task's extent nearest the known one (:func:`refit`), the inner factors
weighted most, as they are the vector and register tiles that made the schedule fast and the outer, parallel loops
are what a larger feature map lengthens. What does not fit (another sketch count, another decision structure) is
left out; what fits is measured like any known schedule, as a first guess the search then improves on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autosearch.types import Config

if TYPE_CHECKING:
    from autosearch.search.space import DecisionSpace


def layer_key(name: str, args: Sequence, lowering: Mapping) -> tuple | None:
    """What the same layer has at every shape: the task name without its numbering (operator and epilogue), the
    lowering's algorithm and layouts, the weights' shape and type (the second argument), each argument's rank and
    type, and every other argument's extents relative to the result's (:func:`relative_shape`: the stride, the
    ratio of input to output channels, a broadcast bias). None for a task of fewer than three arguments (no
    weights: a data movement, whose every shape changes). ``args`` as a task has them or as a log's task record
    holds them (lists)."""
    if len(args) < 3:
        return None
    return (re.sub(r"\d+", "", name), str(lowering.get("algorithm", "")), tuple(lowering.get("layouts", ())),
            str(lowering.get("layout", "")), (tuple(args[1][0]), str(args[1][1])),
            tuple((len(shape), str(dtype)) for shape, dtype in args), relative_shape(args))


def relative_shape(args: Sequence) -> tuple:
    """Each argument's extents over the result's, dimension by dimension, for the arguments of the result's rank
    but the weights; 1 where the argument's extent is 1 (it broadcasts, or a batch of one meets a batch of one,
    which at batch 2 is 2 over 2). A stride-2 convolution's input is 2 in each spatial dimension, a stride-1 one's
    1, at any image size or batch: one weight shape can serve both, and their schedules differ, so they are
    different layers here. Ultralytics' image sizes are multiples of 32, so every feature map halves exactly and
    the ratios are exact."""
    result = args[-1][0]
    return tuple(tuple(1.0 if a == 1 else round(a / max(1, r), 3) for a, r in zip(shape, result))
                 for i, (shape, _) in enumerate(args[:-1]) if i != 1 and len(shape) == len(result))


def shape_distance(args: Sequence, other: Sequence) -> float:
    """How far two shapes of one layer are apart: the sum over every argument's dimensions of the absolute log
    ratio of their extents (0 for the same shapes; a batch of 2 against 1 adds log 2 per activation)."""
    return sum(abs(math.log(max(1, a) / max(1, b)))
               for (shape, _), (other_shape, _) in zip(args, other) for a, b in zip(shape, other_shape))


def refit(space: DecisionSpace, config: Config) -> Config | None:
    """``config``, measured on the same layer at another shape, as a config of ``space``: same sketch, every
    categorical decision and compute location as it is, each tiling replaced by the legal tiling of this extent
    nearest it (:func:`nearest_tiling`). None where the sketch or its decisions do not match in number or kind."""
    if not 0 <= config.sketch < len(space.sketches):
        return None
    decisions = space.sketches[config.sketch].decisions
    if len(decisions) != len(config.values):
        return None
    values: list[Any] = []
    for decision, value in zip(decisions, config.values):
        if decision.kind == "SamplePerfectTile":
            if not isinstance(value, tuple) or not decision.choices or len(value) != len(decision.choices[0]):
                return None
            values.append(value if value in decision.choice_set else nearest_tiling(decision.choices, value))
        elif decision.kind == "SampleCategorical":
            if not isinstance(value, int) or value not in decision.choice_set:
                return None
            values.append(value)
        else:  # a compute location: TVM snaps one that is not legal with these tiles on replay
            if not isinstance(value, int):
                return None
            values.append(value)
    return Config(config.sketch, tuple(values))


def nearest_tiling(choices: Sequence[tuple[int, ...]], tiles: tuple[int, ...]) -> tuple[int, ...]:
    """Of the legal tilings ``choices``, the one nearest ``tiles``: least weighted sum of absolute log ratios,
    the i-th factor from the outside weighted i + 1 (the innermost most), ties to the first in ``choices``."""
    def distance(choice: tuple[int, ...]) -> float:
        return sum((i + 1) * abs(math.log(c / t)) for i, (c, t) in enumerate(zip(choice, tiles)))

    return min(choices, key=distance)
