"""Where a run's task set-up goes, and what setting tasks up in chunks saves, on a whole model.

Before its first trial each task needs its design space (MetaSchedule's sketches, and the legal compute locations
of each, probed from TVM) and its baseline (the untuned module built, run for the reference output and timed).
Three passes over every task of a model, each with a fresh runner, nothing else timed meanwhile:

- ``spaces``: every design space as :class:`~autosearch.search.space.DecisionSpace` builds it (compute locations found
by
  walking TVM's snapping down, one probe per legal location), then again probing every location index as earlier
  versions did; the two must list the same choices for every decision of every task (the script stops if not).
- ``serial``: design space, then ``Runner.prepare``, one task after the other, with the compute locations probed
  at every index (the tuner's set-up until 2026-11-26) and walked.
- ``chunked``: the tuner's set-up now: chunks of :data:`~autosearch.search.tuner.SETUP_CHUNK` tasks whose untuned
  modules build on every build worker while their design spaces are built (``Runner.prepare_many``).

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


def every_location(space, trace, position: int) -> tuple[int, ...]:
    """The legal compute locations by probing every index up to the space's cap (the earlier enumeration)."""
    from tvm.s_tir import Schedule

    from autosearch.search.space import _MAX_LOCATION_PROBE, _SCHEDULE_SEED, _to_python

    found: set[int] = set()
    sch = Schedule(space.mod, seed=_SCHEDULE_SEED, debug_mask=0)

    def probe(inst, inputs, attrs, decision):
        if inst.same_as(trace.insts[position]):
            for k in range(-2, _MAX_LOCATION_PROBE):
                trial = sch.copy()
                trial.sample_compute_location(inputs[0], decision=k)
                found.add(_to_python(trial.trace.decisions[trial.trace.insts[-1]]))
        return decision

    trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=probe)
    return tuple(sorted(found))


def spaces(tasks) -> dict[str, float]:
    """Every task's design space built both ways (seconds each); stops if any decision's choices differ."""
    from autosearch.search.space import DecisionSpace

    walk, every_index = 0.0, 0.0
    walking = DecisionSpace._legal_locations
    try:
        for task in tasks:
            clock = time.perf_counter()
            new = DecisionSpace(task.mod, task.target)
            walk += time.perf_counter() - clock
            DecisionSpace._legal_locations = every_location
            clock = time.perf_counter()
            old = DecisionSpace(task.mod, task.target)
            every_index += time.perf_counter() - clock
            DecisionSpace._legal_locations = walking
            for a, b in zip(new.sketches, old.sketches, strict=True):
                if [d.choices for d in a.decisions] != [d.choices for d in b.decisions]:
                    raise SystemExit(f"{task.name}: sketch {a.index} lists other compute locations than probing "
                                     "every index finds")
    finally:
        DecisionSpace._legal_locations = walking
    return {"walk": walk, "probe every index": every_index}


def serial(tasks, target, *, probe_every_index: bool = False) -> dict[str, float]:
    from autosearch.measure.local import LocalRunner
    from autosearch.search.space import DecisionSpace

    out = {"design spaces": 0.0, "untuned kernels": 0.0}
    walking = DecisionSpace._legal_locations
    if probe_every_index:
        DecisionSpace._legal_locations = every_location
    try:
        with LocalRunner(target=target) as runner:
            runner.warm_up()
            for task in tasks:
                clock = time.perf_counter()
                DecisionSpace(task.mod, task.target)
                built = time.perf_counter()
                runner.prepare(task)
                out["design spaces"] += built - clock
                out["untuned kernels"] += time.perf_counter() - built
    finally:
        DecisionSpace._legal_locations = walking
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
    probes = spaces(tasks)
    ways = {"serial, every location index probed (until 2026-11-26)": serial(tasks, target, probe_every_index=True),
            "serial, locations walked": serial(tasks, target),
            "chunked, locations walked (the tuner's now)": chunked(tasks, target)}
    totals = {name: sum(parts.values()) for name, parts in ways.items()}
    name = os.path.splitext(os.path.basename(args.model))[0]
    stem = results_path(f"setup-{name}")
    write_json(stem + ".json", {"model": name, "layout": args.layout, "tasks": len(tasks), "machine": machine,
                                "design_spaces": probes, "set_up": ways})
    table = markdown_table(["set-up", "design spaces s", "untuned kernels s", "total s"],
                           [[name, fmt(parts["design spaces"]), fmt(parts["untuned kernels"]), fmt(totals[name])]
                            for name, parts in ways.items()])
    text = (f"Task set-up of {name} (`--layout {args.layout}`: {len(tasks)} tasks), wall seconds, each pass with "
            f"a fresh runner; {describe(machine)}.\n\n{table}\n\nDesign spaces alone, every task's: "
            f"{fmt(probes['walk'])} s with the compute locations found by walking TVM's snapping down, "
            f"{fmt(probes['probe every index'])} s probing every location index; the same choices for every decision "
            f"of every task.\n")
    write_text(stem + ".md", text)
    plot(stem + ".png", ways, f"{name}: {len(tasks)} tasks set up; {machine['cpu_model']}, {machine['mcpu']}, "
                              f"{machine['num_cores']} threads")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
