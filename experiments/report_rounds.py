"""How many fresh processes does a whole-model comparison need? The ratio's spread against ``report --rounds``.

``report`` (and ``experiments/time_to_quality.py``) time each runtime in a few fresh processes, taking turns, and
compare the medians of all their runs. On a shared VM a process is drawn fast or slow as a whole: its threads on
their own cores and never waiting for one, yet doing the same work at another rate for its whole life (the repeats
within it agree within a few per cent; ``experiments/timing_noise_sources.py`` found the same for single kernels).
With three processes, the median is whichever mode the middle one drew, so the ratio of two runtimes moves by
that mode's size from one ``report`` to the next.

This times each ``--runtime`` in ``--processes`` fresh processes of ``--runs`` forward passes, taking turns (the
first runtime is the numerator of every ratio), then draws ``report``s from them: for each setting of rounds x
runs in all, that many processes apiece (without replacement) and their first runs, the medians' ratio, 4,000
draws. Against the ratio of all processes' medians, it reports the draws' 90% interval and how often they are
more than 5% and 10% off.

    python -m experiments.report_rounds --runtime tvm=experiments/results/ttq-yolov8n-.../lib/default-9.so \\
        --runtime ort=experiments/results/ttq-yolov8n-.../model.onnx --inputs .../inputs.npz --out report-rounds

Resumable: the processes' runs are kept in ``experiments/results/OUT.state.json`` and the timing goes on from
there. Writes OUT.md, OUT.json and OUT.png. Time it alone on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

import numpy as np

from autosearch.deploy.timing import Runtime, runs_per_round, time_in_subprocess
from autosearch.tables import markdown_table
from experiments.lib.io import publish, read_json, results_path, write_json
from experiments.lib.machine import host_label

# (rounds, runs in all): report's old default (3, 20), time_to_quality's (3, 15), user_path's (10, 100); drawn from
# --processes apiece, so a row of rounds near that count understates its spread
SETTINGS = [(1, 20), (3, 15), (3, 20), (5, 20), (5, 50), (10, 20), (10, 50), (10, 100)]


def draw_ratios(num: list[list[float]], den: list[list[float]], *, rounds: int, runs: int, draws: int,
                seed: int) -> np.ndarray:
    """``draws`` ratios of medians, each of ``rounds`` processes apiece drawn without replacement, their first runs
    (as many as ``report`` gives each round: :func:`~autosearch.deploy.timing.runs_per_round`) pooled as ``report``
    pools them."""
    rng = np.random.default_rng(seed)
    counts = runs_per_round(runs, rounds)
    out = np.empty(draws)
    for i in range(draws):
        a = [r for p, n in zip(rng.choice(len(num), len(counts), replace=False), counts) for r in num[p][:n]]
        b = [r for p, n in zip(rng.choice(len(den), len(counts), replace=False), counts) for r in den[p][:n]]
        out[i] = np.median(a) / np.median(b)
    return out


def summarise(processes: dict[str, list[list[float]]], *, draws: int, seed: int) -> tuple[list[dict], dict]:
    """Per setting and ratio (the first runtime over each other): the draws' spread around the whole ratio."""
    names = list(processes)
    first, rows, truth = names[0], [], {}
    for other in names[1:]:
        whole = float(np.median([r for p in processes[first] for r in p]) /
                      np.median([r for p in processes[other] for r in p]))
        truth[other] = whole
        for rounds, runs in SETTINGS:
            if rounds > min(len(processes[first]), len(processes[other])):
                continue
            off = draw_ratios(processes[first], processes[other], rounds=rounds, runs=runs, draws=draws,
                              seed=seed) / whole
            size = np.abs(np.log(off))
            rows.append({"ratio": f"{first} / {other}", "rounds": rounds, "runs": runs,
                         "per_round": runs_per_round(runs, rounds)[0], "p05": float(np.quantile(off, 0.05)),
                         "p95": float(np.quantile(off, 0.95)), "off5": float(np.mean(size > np.log(1.05))),
                         "off10": float(np.mean(size > np.log(1.10)))})
    return rows, truth


def table(rows: list[dict]) -> str:
    return markdown_table(
        ["ratio", "rounds", "runs in all", "runs per process", "90% of draws within", "> 5% off", "> 10% off"],
        [[r["ratio"], r["rounds"], r["runs"], r["per_round"], f"{r['p05']:.3f}-{r['p95']:.3f}",
          f"{100 * r['off5']:.0f}%", f"{100 * r['off10']:.0f}%"] for r in rows],
        align="lrrrrrr")


def plot(processes: dict[str, list[list[float]]], rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, procs in processes.items():
        medians = sorted(statistics.median(p) for p in procs)
        left.plot(range(1, len(medians) + 1), medians, "o-", ms=3, label=name)
    left.set_xlabel("process (sorted by its median)")
    left.set_ylabel("median of its runs (ms)")
    left.set_title("one fresh process each")
    left.legend()
    for ratio in dict.fromkeys(r["ratio"] for r in rows):
        mine = [r for r in rows if r["ratio"] == ratio]
        labels = [f"{r['rounds']}x{r['per_round']}" for r in mine]
        right.plot(labels, [100 * r["off5"] for r in mine], "o-", label=f"{ratio}: > 5% off")
        right.plot(labels, [100 * r["off10"] for r in mine], "s--", label=f"{ratio}: > 10% off")
    right.set_xlabel("processes x runs each")
    right.set_ylabel("% of drawn reports")
    right.set_title("a report's ratio against all processes'")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", action="append", required=True,
                    help="KIND=PATH, a kind of python -m autosearch.deploy.bench (repeat; the first is the numerator)")
    ap.add_argument("--inputs", required=True, help="the inputs (.npz) every runtime is fed")
    ap.add_argument("--processes", type=int, default=30, help="fresh processes per runtime")
    ap.add_argument("--runs", type=int, default=10, help="timed forward passes per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draws", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="report-rounds", help="results name under experiments/results/")
    args = ap.parse_args(argv)

    runtimes = [Runtime(spec.split("=", 1)[0], spec.split("=", 1)[0], spec.split("=", 1)[1]) for spec in args.runtime]
    base = results_path(args.out)
    state_path = base + ".state.json"
    state = read_json(state_path) if os.path.exists(state_path) else {}
    processes: dict[str, list[list[float]]] = {r.name: state.get(r.name, []) for r in runtimes}
    with tempfile.TemporaryDirectory() as out_dir:
        for i in range(args.processes):
            for runtime in runtimes:
                if len(processes[runtime.name]) > i:
                    continue
                t = time_in_subprocess(runtime, inputs_path=args.inputs, runs=args.runs, threads=args.threads,
                                       out_dir=out_dir)
                if t.error:
                    raise SystemExit(f"{runtime.name}: {t.error}")
                processes[runtime.name].append(t.runs)
                write_json(state_path, processes)
            print(f"process {i + 1}/{args.processes}: " + ", ".join(
                f"{n} {statistics.median(p[i]):.1f} ms" for n, p in processes.items()), flush=True)
    rows, truth = summarise(processes, draws=args.draws, seed=args.seed)
    spreads = {n: [statistics.median(p) for p in procs] for n, procs in processes.items()}
    text = ("**A report's ratio against the ratio of all processes** (" + ", ".join(
        f"{n}: {len(p)} processes of {args.runs} runs, their medians {min(spreads[n]):.1f}-{max(spreads[n]):.1f} ms"
        for n, p in processes.items()) + "; " + ", ".join(f"{runtimes[0].name} / {o} {v:.3f}" for o, v in truth.items())
        + f"; {args.draws} drawn reports per row; {host_label()})\n\n" + table(rows) + "\n\nRuntimes: "
        + ", ".join(f"`{r.name}` {r.path}" for r in runtimes) + "\n")
    publish(base, data={"runtimes": args.runtime, "runs": args.runs, "processes": processes, "truth": truth,
                        "rows": rows, "cpu": host_label()},
            text=text, plot=lambda p: plot(processes, rows, p))


if __name__ == "__main__":
    main()
