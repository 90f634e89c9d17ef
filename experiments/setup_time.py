"""Where a run's task set-up goes, and what setting tasks up in chunks saves, on a whole model.

Before its first trial each task needs its design space (MetaSchedule's sketches, and the legal compute locations
of each, probed from TVM) and its baseline (the untuned module built, run for the reference output and timed).
Two passes over every task of a model, each with a fresh runner, nothing else timed meanwhile:

- ``serial``: design space, then ``Runner.prepare``, one task after the other.
- ``chunked``: the tuner's set-up: chunks of :data:`~autosearch.search.tuner.SETUP_CHUNK` tasks whose untuned
  modules build on every build worker while their design spaces are built (``Runner.prepare_many``).

``experiments/results/setup-yolo11n.*`` (written at commit 9e45319) has a third pass: the compute locations probed
at every index, the enumeration before the walk down TVM's snapping. The script timed it by swapping that
enumeration into :class:`~autosearch.search.space.DecisionSpace` in place of a private method of the shipped code,
so it no longer does; ``tests/test_space.py`` checks that the walk lists every location probing every index finds.

    python -m experiments.setup_time --model yolo11n

Writes ``experiments/results/setup-MODEL.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.machine import describe, fingerprint


def serial(tasks, target) -> dict[str, float]:
    from autosearch.measure.local import LocalRunner
    from autosearch.search.space import DecisionSpace

    out = {"design spaces": 0.0, "untuned kernels": 0.0}
    with LocalRunner(target=target) as runner:
        runner.warm_up()
        for task in tasks:
            clock = time.perf_counter()
            DecisionSpace(task.mod, task.target)
            built = time.perf_counter()
            runner.prepare(task)
            out["design spaces"] += built - clock
            out["untuned kernels"] += time.perf_counter() - built
    return out


def chunked(tasks, target) -> dict[str, float]:
    from autosearch.measure.local import LocalRunner
    from autosearch.search.space import DecisionSpace
    from autosearch.search.tuner import SETUP_CHUNK

    out = {"design spaces": 0.0, "untuned kernels": 0.0}
    with LocalRunner(target=target) as runner:
        runner.warm_up()
        for start in range(0, len(tasks), SETUP_CHUNK):
            chunk = tasks[start:start + SETUP_CHUNK]
            clock = time.perf_counter()
            spent = {}

            def build_spaces(chunk=chunk, spent=spent) -> None:
                began = time.perf_counter()
                for task in chunk:
                    DecisionSpace(task.mod, task.target)
                spent["spaces"] = time.perf_counter() - began

            runner.prepare_many(chunk, meanwhile=build_spaces)
            out["design spaces"] += spent["spaces"]
            out["untuned kernels"] += time.perf_counter() - clock - spent["spaces"]
    return out


def plot(path: str, rows: dict[str, dict[str, float]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 2.8))
    names = list(rows)
    left = [0.0] * len(names)
    for part, colour in (("design spaces", "tab:blue"), ("untuned kernels", "tab:orange")):
        widths = [rows[n][part] for n in names]
        ax.barh(names, widths, left=left, label=part, color=colour)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("wall seconds")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="yolo11n")
    p.add_argument("--layout", default="auto", help="as run's --layout (default auto: both layouts' tasks)")
    args = p.parse_args(argv)

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target

    target = parse_target(None)
    tasks = list(import_model(args.model, target, layout=args.layout).tasks)
    machine = fingerprint(target)
    ways = {"serial": serial(tasks, target), "chunked (the tuner's)": chunked(tasks, target)}
    totals = {name: sum(parts.values()) for name, parts in ways.items()}
    name = os.path.splitext(os.path.basename(args.model))[0]
    stem = results_path(f"setup-{name}")
    write_json(stem + ".json", {"model": name, "layout": args.layout, "tasks": len(tasks), "machine": machine,
                                "set_up": ways})
    table = markdown_table(["set-up", "design spaces s", "untuned kernels s", "total s"],
                           [[name, fmt(parts["design spaces"]), fmt(parts["untuned kernels"]), fmt(totals[name])]
                            for name, parts in ways.items()])
    text = (f"Task set-up of {name} (`--layout {args.layout}`: {len(tasks)} tasks), wall seconds, each pass with "
            f"a fresh runner; {describe(machine)}.\n\n{table}\n")
    write_text(stem + ".md", text)
    plot(stem + ".png", ways, f"{name}: {len(tasks)} tasks set up; {machine['cpu_model']}, {machine['mcpu']}, "
                              f"{machine['num_cores']} threads")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
