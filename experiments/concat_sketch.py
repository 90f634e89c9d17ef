"""What the partitioned-concatenation sketches buy: each concatenation of a run's log, along the channels (NHWC's last
axis: :func:`autosearch.search.data_movement.partitioned_concat_sketch`) or along an outer axis (a decode head's:
:func:`~autosearch.search.data_movement.partitioned_axis_concat_sketch`, at its first tile), its best schedule as the
run measured it against the sketch and against the unscheduled kernel, built here and timed in turns in one
measuring process (``--rounds`` rounds of 20 cold repeats, the order reversed every other round; outputs checked
against the unscheduled kernel)::

    python -m experiments.concat_sketch --log experiments/results/user-yolov8n-15min-seed1-zen3-ahead/log.jsonl.gz
    python -m experiments.concat_sketch --log experiments/results/user-yolov8n-obb.onnx-kinds-probe/log.jsonl.gz \
        --out decode-heads

A log written before the sketch existed compares TVM's own sketches (and the blocked copy) with it; a later log's best
may be the sketch itself. Writes ``experiments/results/concat-sketch[-OUT].{md,json}``. A minute or two.
"""

from __future__ import annotations

import argparse
import sys

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path
from experiments.lib.machine import describe, fingerprint
from experiments.lib.retime import in_turns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", required=True, help="a run's log: its concatenations' best configs are built again")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of the three builds taking turns")
    parser.add_argument("--out", default="", help="results name suffix: concat-sketch-OUT")
    args = parser.parse_args(argv)

    import tvm

    from autosearch.frontend.target import target_to_json
    from autosearch.frontend.task import TuningTask
    from autosearch.measure.kernels import KernelRunner, build
    from autosearch.records import read_log
    from autosearch.search.data_movement import concat_boundaries, partitioned_axis_concat_sketch
    from autosearch.search.space import DecisionSpace

    contents = read_log(args.log)
    runner = KernelRunner("cpu")
    rows, machine = [], None
    for key, header in contents.tasks.items():
        best = contents.best(key)
        task = TuningTask.from_json(header)
        if best is None or (concat_boundaries(task.mod) is None  # the sketches' own tests, before a design space
                            and partitioned_axis_concat_sketch(task.mod, task.target, seed=1) is None):
            continue
        space = DecisionSpace(task.mod, task.target)
        if not space.measure_first:  # neither sketch applies
            continue
        machine = machine or fingerprint(task.target)
        target = target_to_json(task.target)
        unscheduled, _ = build(tvm.ir.save_json(task.mod), target)
        runner.reference(key, unscheduled, task.args, 0, {"repeat": 1})
        builds = {"best": build(tvm.ir.save_json(space.apply(best.config).mod), target)[0],
                  "sketch": build(tvm.ir.save_json(space.apply(space.measure_first[-1]).mod), target)[0],
                  "unscheduled": unscheduled}
        ms = in_turns(runner, key, task.args, builds, args.rounds)
        rows.append({"task": task.name, "layouts": (task.lowering or {}).get("layouts"), "weight": task.weight,
                     "shapes": [list(shape) for shape, _ in task.args], "trials": len(contents.trials(key)),
                     "best_is_sketch": best.config == space.measure_first[-1], "logged_ms": best.latency * 1e3, **ms})
        sys.stderr.write(f"[{len(rows)}] {task.name[:48]} best {ms['best']:.3f} sketch {ms['sketch']:.3f} ms\n")
    if not rows:
        parser.error(f"{args.log} has no measured concatenation either sketch applies to")

    table = markdown_table(
        ["task", "inputs -> output", "weight", "trials", "run's best ms", "sketch ms", "unscheduled ms",
         "best / sketch"],
        [[r["task"], " + ".join("x".join(map(str, s)) for s in r["shapes"][:-1]) + " -> "
          + "x".join(map(str, r["shapes"][-1])), str(r["weight"]), str(r["trials"]),
          fmt(r["best"], 3) + (" (the sketch)" if r["best_is_sketch"] else ""), fmt(r["sketch"], 3),
          fmt(r["unscheduled"], 3), f"{r['best'] / r['sketch']:.2f}x"] for r in rows])

    def weighted(field: str) -> float:
        return sum(r[field] * r["weight"] for r in rows)

    text = (f"**Concatenations: the run's best against the partitioned sketch** "
            f"({describe(machine)}; log `{args.log}`; each built here, timed in turns, {args.rounds} rounds of 20 cold "
            "repeats, medians)\n\n"
            f"{table}\n\nWeighted by calls: the run's best {weighted('best'):.3f} ms, the sketch "
            f"{weighted('sketch'):.3f} ms, unscheduled {weighted('unscheduled'):.3f} ms.\n")
    name = "concat-sketch" + (f"-{args.out}" if args.out else "")
    publish(results_path(name), data={"machine": machine, "log": args.log, "rounds": args.rounds, "tasks": rows},
            text=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
