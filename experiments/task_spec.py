"""Naming one task of a model on an experiment's command line, stably across lowerings.

Task indices move when the lowering changes (tasks are ordered by FLOPs x weight, and ``--winograd auto``
adds the winograd alternatives), so experiments name a task by its conv layer and algorithm:
``1x64x52x52->1x128x52x52/direct`` (see ``autosearch.winograd.layer_key``), or by a fragment of its name,
or by index.
"""

from __future__ import annotations


def pick_task(tasks, spec: str):
    """The task ``spec`` names: ``LAYER/ALGORITHM``, an index, or a unique fragment of a task name."""
    from autosearch.winograd import task_layer

    if "->" in spec:
        layer, _, algorithm = spec.partition("/")
        algorithm = algorithm or "direct"
        found = [t for t in tasks if task_layer(t.name, t.args) == (layer, algorithm)]
    elif spec.isdigit():
        found = [tasks[int(spec)]] if int(spec) < len(tasks) else []
    else:
        found = [t for t in tasks if spec in t.name]
    if not found:
        raise SystemExit(f"no task matches {spec!r}")
    return max(found, key=lambda t: t.flops * t.weight)  # a layer fused several ways: its heaviest task
