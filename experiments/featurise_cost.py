"""What featurising one candidate costs a guided run, through the scorer the quick start uses, on fixed candidates.

A guided run applies every candidate the cost model ranks (16 per config it picks) and reads its loop features:
on a 2-vCPU Intel Xeon without bf16 units this was 127-165 s of the fp32 quick start's 10 minutes, time its
measurements did not get. This times it per candidate for the heaviest Winograd and direct convolutions of a model,
as the run does it (the shipped pre-trained model, the scorer's threads, after its layout probes), and one
candidate at a time by step (the schedule applied without ``RewriteLayout``, then its loop features)::

    python -m experiments.featurise_cost --out zen4

The candidates are drawn from a fixed seed and their scores hashed, so two commits' outputs show whether the model
saw the same features (``scores_sha256``). Writes ``experiments/results/featurise-cost[-OUT].{md,json}``. A minute.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path
from experiments.lib.machine import describe, fingerprint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-yolov2")
    parser.add_argument("--layout", default="NCHW")
    parser.add_argument("--precision", default="fp32", help="fp32, or auto (bf16 on this CPU's unit, if it has one)")
    parser.add_argument("--tasks", type=int, default=3, help="the heaviest tasks of each kind (Winograd, direct)")
    parser.add_argument("--candidates", type=int, default=140, help="candidates scored per task")
    parser.add_argument("--out", default=None, help="results name suffix")
    args = parser.parse_args(argv)

    from autosearch import api
    from autosearch.cost_models.features import TaskFeaturizer
    from autosearch.frontend.target import host_target
    from autosearch.search.cost_model import make_scorer
    from autosearch.search.space import DecisionSpace

    target = host_target()
    model_cost, guidance = api.resolve_guidance("auto", target, "optuna", seed=0)
    loaded = api.load_tasks(args.model, layout=args.layout, precision=args.precision)
    tasks = sorted(loaded.tasks, key=lambda t: -t.flops)
    if not any(t.flops > 0 for t in tasks):
        parser.error(f"{args.model} ({args.layout}, {args.precision}) has no task with FLOPs")
    rows = []
    taken = {"winograd": 0, "direct": 0}
    for task in (t for t in tasks if t.flops > 0):
        kind = "winograd" if "winograd" in task.name else "direct"
        if taken[kind] >= args.tasks:
            continue
        space = DecisionSpace(task.mod, task.target, seed=0)
        rng = np.random.default_rng(3)
        candidates = list(dict.fromkeys(space.sample(rng) for _ in range(args.candidates + 10)))
        if len(candidates) < 20:  # a small space (the bf16 dot product's): too few candidates to time
            continue
        taken[kind] += 1
        scorer = make_scorer(model_cost, space, task, seed=0)
        scorer.score(candidates[:10])  # its layout probes decide how candidates are applied
        timed = candidates[10:]
        start = time.perf_counter()
        scores = np.asarray(scorer.score(timed), dtype=np.float64)
        per_candidate = (time.perf_counter() - start) / len(timed)
        # one at a time, by step, in another space (nothing applied in it yet)
        alone = DecisionSpace(task.mod, task.target, seed=0)
        featurizer = TaskFeaturizer(task)
        apply_s, loop_s = [], []
        for config in timed[:40]:
            clock = time.perf_counter()
            applied = alone.apply_for_features(config, rewrite="none")
            apply_s.append(time.perf_counter() - clock)
            if applied.ok:
                clock = time.perf_counter()
                featurizer.loop_of([applied.mod])
                loop_s.append(time.perf_counter() - clock)
        rows.append({"task": task.name, "kind": kind,
                     "candidates": len(timed), "ms_per_candidate": per_candidate * 1e3,
                     "apply_ms": statistics.median(apply_s) * 1e3,
                     "loop_features_ms": statistics.median(loop_s) * 1e3 if loop_s else None,
                     "layout_rewrite": scorer.layout_rewrite,
                     "scores_sha256": hashlib.sha256(np.nan_to_num(scores, nan=-1.0).tobytes()).hexdigest()})
    info = fingerprint(target)
    kinds = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row["ms_per_candidate"])
    table = markdown_table(
        ["task", "candidates", "RewriteLayout on", "ms per candidate (scorer)", "apply ms (one)",
         "loop features ms (one)", "scores"],
        [[r["task"][:48], r["candidates"], r.get("layout_rewrite") or "-", fmt(r["ms_per_candidate"], 1),
          fmt(r["apply_ms"], 1),
          fmt(r["loop_features_ms"], 1), r["scores_sha256"][:12]] for r in rows])
    text = (f"# Featurising a candidate: {args.model} ({args.layout}, {args.precision})\n\n{describe(info)}; guided by "
            f"{guidance} ({model_cost}).\n\n{table}\n\n"
            + "".join(f"- {k}: mean {statistics.mean(v):.1f} ms per candidate\n" for k, v in kinds.items()))
    base = results_path("featurise-cost" + (f"-{args.out}" if args.out else ""))
    publish(base, data={"machine": info, "model": args.model, "layout": args.layout,
                        "precision": args.precision, "cost_model": model_cost,
                        "rows": rows}, text=text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
