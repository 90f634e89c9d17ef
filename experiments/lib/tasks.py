"""Naming one conv task of a model stably, across lowerings and layouts, and finding it.

Task indices move when the lowering changes (tasks are ordered by FLOPs x weight; ``--winograd auto`` adds the
winograd alternatives; NHWC fuses other layers), so experiments name a conv task by its layer: the data and
output shapes *in NCHW order whatever the layout* (``1x64x52x52->1x128x52x52``, which also fixes the stride),
the kernel size when two layers share those shapes (``@3x3``, ``@1x1``), and the algorithm (``/direct``,
``/winograd``). A whole spec adds the model and the layout (default NCHW)::

    tiny-yolov2:1x32x104x104->1x64x104x104@3x3/winograd
    yolov8n:NHWC:1x192x40x40->1x128x40x40@1x1

:func:`pick_task` also takes a task index or a unique fragment of a task name (within one model's tasks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autosearch.frontend.lowering import LAYOUTS


@dataclass(frozen=True)
class TaskSpec:
    """``MODEL[:LAYOUT]:WHICH``; WHICH is ``LAYER[@KxK][/ALGORITHM]``, an index or a name fragment."""

    model: str
    layout: str
    which: str

    @classmethod
    def parse(cls, text: str) -> TaskSpec:
        parts = text.strip().split(":")
        if len(parts) == 3 and parts[1].upper() in LAYOUTS:
            return cls(parts[0], parts[1].upper(), parts[2])
        if len(parts) == 2:
            return cls(parts[0], "NCHW", parts[1])
        raise ValueError(f"task spec {text!r}: expected MODEL[:LAYOUT]:LAYER[@KxK][/ALGORITHM]")

    def __str__(self) -> str:
        return f"{self.model}:{self.layout + ':' if self.layout != 'NCHW' else ''}{self.which}"

    @property
    def slug(self) -> str:
        """A file-name-safe form of the spec (stable: result files are named by it)."""
        text = str(self).replace("->", "-to-").replace("@", "-k").replace("/", "-").replace(":", "_")
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


def conv_signature(task, layout: str = "NCHW") -> tuple[str, str, str] | None:
    """(NCHW layer key, ``KxK``, algorithm) of a conv task from its argument shapes, or None for other tasks."""
    from autosearch.frontend.winograd import layer_key

    if "conv2d" not in task.name or len(task.args) < 3:
        return None
    data, weight, out = (list(a[0]) for a in (task.args[0], task.args[1], task.args[-1]))
    if len(data) != 4 or len(out) != 4 or len(weight) != 4:
        return None
    winograd = "winograd" in task.name
    if winograd:
        kernel = (3, 3)  # the transformed kernel (alpha, alpha, in, out) of a 3x3 layer
    elif layout == "NHWC":
        kernel = (weight[1], weight[2])  # OHWI
    else:
        kernel = (weight[2], weight[3])  # OIHW
    if layout == "NHWC":
        data, out = [data[0], data[3], data[1], data[2]], [out[0], out[3], out[1], out[2]]
    return layer_key(data, out), f"{kernel[0]}x{kernel[1]}", "winograd" if winograd else "direct"


def layer_of(task, layout: str = "NCHW") -> str | None:
    """The NCHW layer key of a conv task (``autosearch.frontend.winograd.layer_key``), or None for other tasks."""
    signature = conv_signature(task, layout)
    return signature[0] if signature else None


def pick_task(tasks, which: str, *, layout: str = "NCHW"):
    """The task ``which`` names among one model's ``tasks``: ``LAYER[@KxK][/ALGORITHM]`` (algorithm default
    direct; a layer fused several ways gives its heaviest task), an index, or a unique name fragment.
    ``ValueError`` when nothing matches."""
    if "->" in which:
        layer, _, algorithm = which.partition("/")
        layer, _, kernel = layer.partition("@")
        algorithm = algorithm or "direct"
        found = []
        for t in tasks:
            signature = conv_signature(t, layout)
            if signature and signature[0] == layer and signature[2] == algorithm and kernel in ("", signature[1]):
                found.append(t)
    elif which.isdigit():
        found = [t for t in tasks if t.index == int(which)]
    else:
        found = [t for t in tasks if which in t.name]
    if not found:
        raise ValueError(f"no {layout} task matches {which!r}")
    return max(found, key=lambda t: (t.flops * t.weight, t.name))


def select_tasks(tasks, spec: str):
    """A count -> the cheapest conv2d tasks (cheap to measure, still the kernels that matter); ``spread:N`` -> N
    conv2d tasks evenly spaced in FLOPs order (cheapest and costliest included); a comma list -> those task
    indices (``ValueError`` for an index the model does not have)."""
    if spec.startswith("spread:"):
        convs = sorted((t for t in tasks if "conv2d" in t.name), key=lambda t: t.flops)
        n = min(int(spec.partition(":")[2]), len(convs))
        return [convs[i] for i in sorted({round(j * (len(convs) - 1) / max(1, n - 1)) for j in range(n)})]
    if "," in spec:
        wanted = [int(s) for s in spec.split(",") if s.strip()]
        by_index = {t.index: t for t in tasks}
        missing = [i for i in wanted if i not in by_index]
        if missing:
            raise ValueError(f"no task index {missing}; the model has {len(tasks)} tasks")
        return [by_index[i] for i in wanted]
    convs = sorted((t for t in tasks if "conv2d" in t.name), key=lambda t: t.flops)
    return convs[: int(spec)]


class ModelTasks:
    """Imports each (model, layout, winograd) once and finds tasks in it by :class:`TaskSpec`."""

    def __init__(self, target) -> None:
        self.target = target
        self._models: dict[tuple[str, str, str], list] = {}

    def tasks(self, model: str, *, layout: str = "NCHW", winograd: str = "auto") -> list:
        from autosearch.frontend.importer import import_model

        key = (model, layout, winograd)
        if key not in self._models:
            self._models[key] = import_model(model, self.target, layout=layout, winograd=winograd).tasks
        return self._models[key]

    def task(self, spec: TaskSpec):
        """The task a spec names, in the model lowered as ``run`` lowers it (``--winograd auto`` offers every
        candidate layer both ways, so direct and winograd tasks are both there)."""
        return pick_task(self.tasks(spec.model, layout=spec.layout), spec.which, layout=spec.layout)
