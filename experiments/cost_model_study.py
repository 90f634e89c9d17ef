"""Which cost model ranks schedules best on the study dataset? Every model, leave one task out and leave one
network out, resumable, beside the labels' own noise ceiling.

``compare-models`` answers this for one split in one sitting; on the 10,000-record dataset of
``experiments/make_dataset.py`` a learned model's 36 folds take hours on 2 cores, so this stores each fold's
result the moment it ends (a line of ``OUT/<split>/<model>.folds.jsonl``) and each (split, model) pair's when
its last fold ends (``OUT/<split>/<model>.json``, with the machine): run the same command again after a stop
and what was finished is read, not refitted; a pair resumes at its first unfinished fold. The logs are read
and featurised once per run, for every model still to run (features come from the feature store,
``autosearch.cost_models.feature_store``, after the first run). Two runs with disjoint ``--models`` use both cores; the
tables either writes hold every pair stored under ``OUT``, not only its own.

The ceiling (``--ceiling``, what ``experiments/measurement_noise.py --log DATASET --out STEM`` wrote as
``STEM.json``) is the agreement of two independent labels of the same kernels: no model can expect to beat
it on these labels by more than luck, so it is a row of each table. The judgement follows the learned
cost-model issue: a learned model (on PyTorch: ``mlp``, ``mlp-rank``, ``tvm-mlp``, ``seq``) at or above the best
tree model on held-out pairwise accuracy and top-1, and held-out top-1 >= 0.92 (TLP's CPU figure) and pairwise
>= 0.90. Means of 36 tasks differ by luck too, so the verdict adds the paired difference per task (learned minus
tree, with its standard error): a lead smaller than two of those is a tie.

    python -m experiments.cost_model_study --log experiments/results/dataset-study.jsonl \\
        --ceiling experiments/results/measurement_noise-study.json --out experiments/results/cost_model_study

``--report-only`` fits nothing: it tabulates the finished pairs and lists the unfinished ones (safe beside a run
still fitting). Writes ``OUT.md`` (a table per split, the ceiling, the verdict), ``OUT.json`` and ``OUT.png`` (pairwise
accuracy and top-1 per model and split, the ceiling and the goals as lines).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from typing import Any

import numpy as np

from autosearch.cost_models.evaluate import DEFAULT_MODELS, METRICS, SPLITS, ModelResult
from autosearch.errors import UserError
from autosearch.tables import fmt, markdown_table
from experiments.lib.io import read_json, write_json, write_text

log = logging.getLogger("cost_model_study")

LEARNED = ("mlp", "tvm-mlp", "seq", "mlp-rank")  # the models on PyTorch
BLENDS = ("blend",)  # a tree and a learned model added: in neither family of the verdict
# every other registry model is a tree ensemble
GOAL_PAIRWISE, GOAL_TOP1 = 0.90, 0.92  # the goals (TLP's CPU top-1)
SPLIT_TITLES = {"task": "leave one task out", "model": "leave one network out"}


def family(spec: str) -> str:
    base = spec.split("@")[0]
    return "learned" if base in LEARNED else "blend" if base in BLENDS else "tree"


def result_path(out: str, split: str, spec: str) -> str:
    return os.path.join(out, split, spec.replace("@", "_at_").replace("/", "_") + ".json")


def machine() -> dict[str, Any]:
    from autosearch.frontend.target import cpu_model

    return {"cpu_model": cpu_model(), "cores": os.cpu_count() or 1}


def folds_path(out: str, split: str, spec: str) -> str:
    return result_path(out, split, spec)[:-len(".json")] + ".folds.jsonl"


def read_folds(path: str, *, repair: bool = True) -> dict[str, dict[str, Any]]:
    """The folds a stopped run finished (one JSON line each). A line the stop cut short is dropped from the
    file (``repair``, by the run that goes on appending), so that the next fold's line is not appended to it."""
    done: dict[str, dict[str, Any]] = {}
    if not os.path.exists(path):
        return done
    with open(path) as f:
        lines = f.read().split("\n")
    for line in filter(None, lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[row["fold"]] = row
    if repair and (lines[-1] or len(done) < len(list(filter(None, lines)))):
        write_text(path, "".join(json.dumps(row) + "\n" for row in done.values()))
    return done


def run_pair(dataset, folds, spec: str, split: str, *, logs: list[str], out: str, seed: int) -> dict[str, Any]:
    """One model on one split, fold by fold: each fold's result is appended to ``OUT/<split>/<model>.folds.jsonl``
    when it ends, and the folds found there are not fitted again. Returns the pair's stored result."""
    from autosearch.cost_models.evaluate import ModelResult, comparison_report, evaluate_model

    path = folds_path(out, split, spec)
    done = read_folds(path)
    start, last = time.time(), time.monotonic()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for n, fold in enumerate(folds, start=1):
        if fold.name in done:
            continue
        r = evaluate_model(dataset, spec, [fold], seed=seed)
        row = {"fold": fold.name, "per_task": r.per_task, "error": r.error, "fit_secs": r.fit_secs,
               "predict_secs": r.predict_secs, "fit_records": r.fit_records, "predict_records": r.predict_records}
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
        done[fold.name] = row
        if r.error:
            break  # a model that fails on one fold fails on the others: one row saying why
        if n == len(folds) or time.monotonic() - last > 30:
            last = time.monotonic()
            log.info("%s, %s: %d/%d folds", spec, SPLIT_TITLES[split], n, len(folds))
    parts = [ModelResult(name=spec, per_task=row["per_task"], error=row["error"], fit_secs=row["fit_secs"],
                         predict_secs=row["predict_secs"], folds=1, fit_records=row["fit_records"],
                         predict_records=row["predict_records"]) for row in done.values()]
    merged = ModelResult.merged(spec, parts)
    report = comparison_report(dataset, folds, [merged], logs=logs, split=split)
    return {"split": split, "model": spec, "family": family(spec), "logs": logs, "seed": seed,
            "caption": report.caption(), "n_records": report.n_records, "machine": machine(),
            "wall_secs": time.time() - start, "folds": len(done), "error": merged.error,
            "fit_secs": merged.fit_secs, "fit_secs_per_record": merged.fit_secs_per_record,
            "predict_secs_per_record": merged.predict_secs_per_record, "per_task": merged.per_task}


def as_result(stored: dict[str, Any]) -> ModelResult:
    return ModelResult(name=stored["model"], per_task=stored["per_task"], error=stored["error"])


def table(stored: list[dict[str, Any]], ceiling: dict[str, float] | None) -> str:
    header = (["model", "family"] + [label for metric, label in METRICS if metric != "rmse"]
              + ["fit ms/record", "predict µs/record"])
    rows = []
    for s in sorted(stored, key=lambda s: -as_result(s).mean("pairwise") if not s["error"] else math.inf):
        r = as_result(s)
        if s["error"]:
            rows.append([s["model"], s["family"], f"failed: {s['error'][:60]}"] + [""] * (len(header) - 3))
            continue
        se = r.stderr("pairwise")
        cells = [f"{r.mean('pairwise'):.3f}" + (f" ± {se:.3f}" if not math.isnan(se) else "")]
        cells += [fmt(r.mean(m), 3) for m, _ in METRICS if m not in ("pairwise", "rmse")]
        rows.append([s["model"], s["family"], *cells, fmt(1e3 * s["fit_secs_per_record"], 2),
                     fmt(1e6 * s["predict_secs_per_record"], 1)])
    if ceiling:
        rows.append(["*re-timing ceiling*", "labels", fmt(ceiling.get("pairwise"), 3), fmt(ceiling.get("spearman"), 3),
                     fmt(ceiling.get("top1"), 3), "-", "-", "-"])
    return markdown_table(header, rows, align="ll" + "r" * (len(header) - 2))


def best(stored: list[dict[str, Any]], fam: str, metric: str) -> tuple[str, float]:
    scores = [(s["model"], as_result(s).mean(metric)) for s in stored if s["family"] == fam and not s["error"]]
    scores = [(m, v) for m, v in scores if not math.isnan(v)]
    return max(scores, key=lambda mv: mv[1]) if scores else ("-", math.nan)


def paired(stored: list[dict[str, Any]], a: str, b: str, metric: str) -> tuple[float, float, int]:
    """Mean and standard error of ``a``'s minus ``b``'s ``metric`` over the tasks both held out, and their count."""
    per_task = {s["model"]: s["per_task"] for s in stored}
    keys = sorted(set(per_task[a]) & set(per_task[b]))
    d = np.array([per_task[a][k][metric] - per_task[b][k][metric] for k in keys], dtype=np.float64)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        return math.nan, math.nan, len(d)
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))), len(d)


def verdict(stored: list[dict[str, Any]]) -> str:
    """The issue's goals on one split, in one paragraph."""
    tree_p, tree_t = best(stored, "tree", "pairwise"), best(stored, "tree", "top1")
    learned_p, learned_t = best(stored, "learned", "pairwise"), best(stored, "learned", "top1")
    if math.isnan(learned_p[1]) or math.isnan(tree_p[1]):
        return "Goals: not judged (a learned and a tree model are both needed)."
    ok = lambda b: "**met**" if b else "**not met**"  # noqa: E731
    leads = learned_p[1] >= tree_p[1] and learned_t[1] >= tree_t[1]
    top = max((s for s in stored if not s["error"]), key=lambda s: as_result(s).mean("pairwise"))
    top_p, top_t = as_result(top).mean("pairwise"), as_result(top).mean("top1")
    return (f"Best learned: {learned_p[0]} {learned_p[1]:.3f} pairwise, {learned_t[0]} {learned_t[1]:.3f} top-1; best "
            f"tree: {tree_p[0]} {tree_p[1]:.3f} pairwise, {tree_t[0]} {tree_t[1]:.3f} top-1. A learned model at or "
            f"above the best tree on both: {ok(leads)}. The best model by pairwise accuracy ({top['model']}): "
            f"pairwise {top_p:.3f} >= {GOAL_PAIRWISE}: {ok(top_p >= GOAL_PAIRWISE)}; its top-1 {top_t:.3f} >= "
            f"{GOAL_TOP1}: {ok(top_t >= GOAL_TOP1)}. Paired per task, best learned minus best tree: "
            + "; ".join("{} {:+.3f} ± {:.3f} ({} held-out tasks)".format(name, *paired(stored, lm[0], tm[0], metric))
                        for name, metric, lm, tm in (("pairwise", "pairwise", learned_p, tree_p),
                                                     ("top-1", "top1", learned_t, tree_t)))
            + ".")


def plot(by_split: dict[str, list[dict[str, Any]]], ceiling: dict[str, float] | None, path: str) -> str:
    import numpy as np

    from autosearch.plots import figure, save

    splits = [s for s in SPLITS if by_split.get(s)]
    fig, axes = figure(1, len(splits), size=(max(6.0, 0.55 * max(len(v) for v in by_split.values()) + 2.5)
                                             * len(splits), 4.5), grid="y")
    for ax, split in zip(axes[0], splits):
        stored = [s for s in by_split[split] if not s["error"]]
        stored.sort(key=lambda s: -as_result(s).mean("pairwise"))
        x = np.arange(len(stored))
        for offset, (metric, label) in zip((-0.2, 0.2), (("pairwise", "pairwise accuracy"), ("top1", "top-1"))):
            values = [as_result(s).mean(metric) for s in stored]
            bars = ax.bar(x + offset, values, width=0.4, label=label)
            for bar, s in zip(bars, stored):
                if s["family"] == "learned":
                    bar.set_hatch("//")
        if ceiling and ceiling.get("pairwise") is not None:
            ax.axhline(ceiling["pairwise"], color="black", linestyle="--", linewidth=1, label="re-timing ceiling")
        ax.axhline(GOAL_PAIRWISE, color="tab:blue", linestyle=":", linewidth=1, label=f"goal {GOAL_PAIRWISE}")
        ax.axhline(GOAL_TOP1, color="tab:orange", linestyle=":", linewidth=1, label=f"goal {GOAL_TOP1}")
        ax.set_xticks(x, [s["model"] for s in stored], rotation=40, ha="right", fontsize=7)
        ax.set_ylim(0.0, 1.02)
        ax.set_title(f"{SPLIT_TITLES[split]} (hatched: learned)", fontsize=9)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", action="append", required=True, help="dataset (tuning log); repeatable")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated cost models")
    p.add_argument("--splits", default=",".join(SPLITS), help=f"comma-separated, of {', '.join(SPLITS)}")
    p.add_argument("--ceiling", help="measurement_noise.py's JSON for these labels (a row of each table)")
    p.add_argument("--out", required=True, help="results stem: OUT.md, OUT.json, OUT.png and OUT/ (per pair)")
    p.add_argument("--min-records", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-only", action="store_true", help="fit nothing: tabulate the finished pairs and "
                   "list the unfinished ones with their stored folds (safe beside a run still fitting)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    for path in args.log + ([args.ceiling] if args.ceiling else []):
        if not os.path.exists(path):
            p.error(f"not found: {path}")
    if bad := [s for s in splits if s not in SPLITS]:
        p.error(f"--splits: {bad[0]!r} is not one of {', '.join(SPLITS)}")
    ceiling = read_json(args.ceiling).get("mean") if args.ceiling else None

    by_split: dict[str, list[dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    todo = {(split, spec) for split in splits for spec in models
            if not os.path.exists(result_path(args.out, split, spec))}
    dataset = None
    pending: dict[str, list[str]] = {split: [] for split in splits}  # --report-only: the pairs not finished
    if args.report_only:
        for split, spec in sorted(todo, key=lambda pair: models.index(pair[1])):
            stored_folds = len(read_folds(folds_path(args.out, split, spec), repair=False))
            pending[split].append(f"{spec} ({stored_folds} folds stored)")
        todo = set()
    if todo:  # read and featurise once, for every model still to run (a finished study only re-tabulates)
        from autosearch.cost_models.evaluate import comparison_dataset

        dataset = comparison_dataset(args.log, sorted({spec for _, spec in todo}), seed=args.seed)
    for split in splits:
        by_split[split] = []
        folds = None
        for spec in models:
            path = result_path(args.out, split, spec)
            if os.path.exists(path):
                by_split[split].append(read_json(path))
                log.info("%s, %s: done before (%s)", spec, SPLIT_TITLES[split], path)
                continue
            if args.report_only:
                continue
            if folds is None:
                from autosearch.cost_models.evaluate import comparison_folds

                try:
                    folds = comparison_folds(dataset, split, args.min_records)
                except UserError as exc:
                    if split == "task":
                        raise
                    skipped[split] = str(exc)  # e.g. a dataset whose tasks name fewer than 2 networks
                    log.warning("%s: skipped: %s", SPLIT_TITLES[split], exc)
                    break
            stored = run_pair(dataset, folds, spec, split, logs=args.log, out=args.out, seed=args.seed)
            write_json(path, stored)
            by_split[split].append(stored)
            log.info("%s, %s: pairwise %.3f, top-1 %.3f in %.0f s", spec, SPLIT_TITLES[split],
                     as_result(stored).mean("pairwise"), as_result(stored).mean("top1"), stored["wall_secs"])
        # pairs another invocation finished (two runs with disjoint --models): the tables hold every stored pair,
        # whichever run writes them last
        listed = {result_path(args.out, split, spec) for spec in models}
        split_dir = os.path.join(args.out, split)
        for name in sorted(os.listdir(split_dir)) if os.path.isdir(split_dir) else []:
            path = os.path.join(split_dir, name)
            if name.endswith(".json") and path not in listed:
                by_split[split].append(read_json(path))

    text = ["# Cost models on " + ", ".join(os.path.relpath(x) for x in args.log), ""]
    for split in splits:
        text += [f"## {SPLIT_TITLES[split].capitalize()}", ""]
        if split in skipped:
            text += [f"Not run: {skipped[split]}", ""]
            continue
        stored = by_split[split]
        if pending[split]:
            text += ["Not finished: " + ", ".join(pending[split]) + ".", ""]
        if not stored:
            continue
        machines = sorted({f"{s['machine']['cpu_model']}, {s['machine']['cores']} cores" for s in stored})
        text += [table(stored, ceiling), "", f"{stored[0]['caption']}. Means over held-out tasks (± standard error "
                 f"over tasks); top-1/top-5: TenSet's score (best latency over that of the model's pick); fit and "
                 f"predict time per record on {'; '.join(machines)}"
                 + (f"; re-timing ceiling from {os.path.relpath(args.ceiling)}" if ceiling else "") + ".", "",
                 verdict(stored), ""]
    write_text(args.out + ".md", "\n".join(text))
    write_json(args.out + ".json", {"logs": args.log, "ceiling": ceiling, "skipped": skipped, "pending": pending,
                                    "splits": {s: [{k: v for k, v in r.items() if k != "per_task"}
                                                   | {"mean": {m: as_result(r).mean(m) for m, _ in METRICS}}
                                                   for r in by_split[s]] for s in splits}})
    if any(by_split.values()):
        plot({s: v for s, v in by_split.items() if v}, ceiling, args.out + ".png")
    log.info("wrote %s.md, %s.json, %s.png", args.out, args.out, args.out)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:
        sys.stderr.write(f"cost_model_study: error: {exc}\n")
        sys.exit(2)
