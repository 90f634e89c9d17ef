"""What building each kernel's divisions by its weights as multiplications by their reciprocals buys a tuned model.

``autosearch.frontend.reciprocal`` rewrites them at build time (an unfolded BatchNormalization divides every output
element by ``sqrt(var + eps)``). Here one database's model is compiled twice, with the rewrite (as every build now
makes it) and without it, and both are timed taking turns in fresh processes with ONNX Runtime and OpenVINO at its
default precision beside them, outputs checked against ONNX Runtime's::

    python -m experiments.reciprocal --case tiny-yolov2=experiments/results/user-.../db \\
        --case yolov3-tiny=... --out reciprocal-xeon-amx

Writes ``experiments/results/OUT.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from contextlib import contextmanager

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path
from experiments.lib.machine import host_label
from experiments.lib.turns import libraries_in_turns


@contextmanager
def divisions_kept():
    """The model built without the rewrite: the library's build as it was before it."""
    import autosearch.frontend.reciprocal as reciprocal

    kept = reciprocal.reciprocal_divisors
    reciprocal.reciprocal_divisors = lambda mod: mod
    try:
        yield
    finally:
        reciprocal.reciprocal_divisors = kept


def time_case(model: str, db: str, *, rounds: int, runs: int, threads: int) -> dict:
    """Both builds of ``db``'s model and the peer runtimes, timed taking turns: medians (ms) and output errors."""
    import autosearch

    with tempfile.TemporaryDirectory() as tmp:
        rewritten, divided = os.path.join(tmp, "reciprocals.so"), os.path.join(tmp, "divisions.so")
        autosearch.compile(model, db, rewritten)
        with divisions_kept():
            autosearch.compile(model, db, divided)
        turns = libraries_in_turns(model, {"reciprocals": rewritten, "divisions": divided}, peers=("ort", "ov-default"),
                                   rounds=rounds, runs=runs, threads=threads, work=tmp)
        return {"model": model, "db": db, "ms": turns.ms, "error": turns.error}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", required=True, metavar="MODEL=DB",
                        help="a model and its tuned database (repeat for more)")
    parser.add_argument("--out", required=True, help="results name: experiments/results/OUT.md and .json")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    cases = []
    for spec in args.case:
        model, sep, db = spec.partition("=")
        if not sep or not os.path.isdir(db):
            parser.error(f"--case {spec!r}: expected MODEL=DB with DB a database directory")
        cases.append(time_case(model, db, rounds=args.rounds, runs=args.runs, threads=args.threads))
    peers = [k for k in cases[0]["ms"] if k not in ("reciprocals", "divisions")]  # the same runtimes in every case
    rows = []
    for c in cases:
        ms = c["ms"]
        rows.append([f"{c['model']} (`{os.path.basename(os.path.dirname(os.path.abspath(c['db'])))}`)",
                     fmt(ms["divisions"], 3), fmt(ms["reciprocals"], 3),
                     f"{ms['divisions'] / ms['reciprocals']:.2f}x",
                     *(f"{ms[p]:.3f} ({ms[p] / ms['reciprocals']:.2f}x)" for p in peers),
                     f"{c['error']['divisions']:.2e}, {c['error']['reciprocals']:.2e}"])
    text = (f"**A tuned model built with its divisions by weights as multiplications by reciprocals, against the "
            f"same database built with the divisions** ({host_label()}; {args.threads} threads; each runtime in "
            f"{args.rounds} fresh processes taking turns, {args.runs} runs in all, medians; a peer's ratio is its "
            f"time over the rewritten model's)\n\n"
            + markdown_table(["model", "divisions ms", "reciprocals ms", "divisions / reciprocals",
                              *(f"{p} ms" for p in peers), "output vs ONNX Runtime: divisions, reciprocals"], rows)
            + "\n\nDatabases: " + "; ".join(f"{c['model']} `{c['db']}`" for c in cases) + "\n")
    publish(results_path(args.out), data=cases, text=text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
