"""What the lowering's constant folding costs, Relax's ``FoldConstant`` alone against the shipped folder.

Every lowering a model's task extraction makes (``tasks``, and each ``run`` before its first trial: two layouts,
direct and Winograd, fp32 and bf16) is made twice, one after the other in this process: with Relax's passes alone
(its ``FoldConstant`` compiling each weight transform as an LLVM module of its own) and as shipped
(:class:`autosearch.frontend.fold.ConstantFolder` first, one folder for the model's lowerings); the two modules
must be structurally equal (constants' values included), or the script says so and exits 1::

    python -m experiments.lowering_time --models tiny-yolov2,yolov8n,yolo11n

Writes ``experiments/results/lowering-time.{md,json}`` (seconds per model, the CPU named). A minute or two.
"""

from __future__ import annotations

import argparse
import sys
import time

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.machine import describe, fingerprint


def lowerings_of(model: str) -> list[dict]:
    """Each lowering ``tasks --model MODEL`` makes: its options, and the seconds of each way, and whether the two
    modules are equal."""
    import tvm
    import tvm_ffi

    from autosearch import api
    from autosearch.frontend import lowering
    from autosearch.frontend.fold import PASS_NAME, ConstantFolder

    folder = ConstantFolder()
    shipped = lowering.lower
    rows: list[dict] = []

    def both(relax_mod, target, **options):
        options.pop("folder", None)
        with target, tvm.transform.PassContext(opt_level=3):
            passes = lowering.lowering_passes(target, folder=folder, **options)
            clock = time.perf_counter()
            alone = tvm.transform.Sequential([p for p in passes if p.info.name != PASS_NAME])(relax_mod)
            relax_secs = time.perf_counter() - clock
        clock = time.perf_counter()
        ours = shipped(relax_mod, target, folder=folder, **options)
        rows.append({"layout": options.get("layout"), "precision": options.get("precision"),
                     "winograd": str(options.get("winograd")), "relax_s": relax_secs,
                     "folder_s": time.perf_counter() - clock, "equal": bool(tvm_ffi.structural_equal(alone, ours))})
        return ours

    lowering.lower = both
    try:
        api.load_tasks(model)
    finally:
        lowering.lower = shipped
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny-yolov2,yolov8n,yolo11n")
    parser.add_argument("--out", default="lowering-time")
    args = parser.parse_args(argv)

    from autosearch.frontend.target import parse_target

    result = {"machine": fingerprint(parse_target(None)), "models": {}}
    table = []
    for model in args.models.split(","):
        rows = lowerings_of(model)
        result["models"][model] = rows
        relax_s, folder_s = sum(r["relax_s"] for r in rows), sum(r["folder_s"] for r in rows)
        table.append([model, len(rows), fmt(relax_s, 1), fmt(folder_s, 1), fmt(relax_s / folder_s, 2),
                      "yes" if all(r["equal"] for r in rows) else "NO"])
    header = ["model", "lowerings", "Relax's FoldConstant alone, s", "with the folder, s", "ratio", "modules equal"]
    text = (f"# The lowering's constant folding: Relax alone against the shipped folder\n\n"
            f"{describe(result['machine'])}, `python -m experiments.lowering_time --models {args.models}`; every "
            f"lowering of `tasks --model MODEL` both ways, one after the other.\n\n" + markdown_table(header, table))
    write_text(results_path(f"{args.out}.md"), text + "\n")
    write_json(results_path(f"{args.out}.json"), result)
    sys.stdout.write(text + "\n")
    return 0 if all(r["equal"] for rows in result["models"].values() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
