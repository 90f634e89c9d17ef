"""experiments/report_rounds.py: drawn reports of runtimes whose processes are each fast or slow as a whole."""

from __future__ import annotations

import numpy as np

from autosearch.deploy.timing import runs_per_round
from experiments.report_rounds import SETTINGS, draw_ratios, summarise, table


def _processes(seed: int, *, base: float, count: int = 40, runs: int = 10) -> list[list[float]]:
    """Processes each fast (base ms) or, one in five, 1.6x slow as a whole, their runs within a few per cent of
    their mode: the shape seen on the shared VM."""
    rng = np.random.default_rng(seed)
    slow = rng.permutation(count) < count // 5
    return [(base * (1.6 if s else 1.0) * rng.normal(1.0, 0.01, runs)).tolist() for s in slow]


def test_more_processes_keep_a_reports_ratio_near_the_whole_ratio():
    tvm, ort = _processes(0, base=50.0), _processes(1, base=60.0)
    whole = np.median(sum(tvm, [])) / np.median(sum(ort, []))

    def off(rounds):
        r = draw_ratios(tvm, ort, rounds=rounds, runs=10 * rounds, draws=2000, seed=0) / whole
        return float(np.mean(np.abs(np.log(r)) > np.log(1.10)))

    one, three, ten = off(1), off(3), off(10)
    assert one > three > ten  # one process, or the middle one of three, decides the mode of a median
    assert one > 0.25 and ten < 0.05  # over ten, the modes' shares decide it


def test_a_draw_takes_each_process_once_and_only_its_first_runs():
    # processes whose first 2 runs are 10 ms and the rest 1000: a draw of 2 runs per process never sees the rest
    num = [[10.0, 10.0] + [1000.0] * 8 for _ in range(5)]
    den = [[5.0] * 10 for _ in range(5)]
    assert runs_per_round(10, 5) == [2] * 5
    np.testing.assert_allclose(draw_ratios(num, den, rounds=5, runs=10, draws=50, seed=0), 2.0)
    # all five processes drawn, without replacement: the same five whatever the seed, so every draw is the whole
    slow = [[float(i)] * 4 for i in range(1, 6)]
    np.testing.assert_allclose(draw_ratios(slow, den, rounds=5, runs=20, draws=20, seed=3), 3.0 / 5.0)


def test_the_summary_has_a_row_per_setting_that_fits_and_a_table_of_them():
    processes = {"tvm": _processes(0, base=50.0, count=6), "ort": _processes(1, base=60.0, count=6),
                 "ov": _processes(2, base=55.0, count=6)}
    rows, truth = summarise(processes, draws=200, seed=0)
    fitting = [s for s in SETTINGS if s[0] <= 6]
    assert [(r["rounds"], r["runs"]) for r in rows if r["ratio"] == "tvm / ort"] == fitting
    assert {r["ratio"] for r in rows} == {"tvm / ort", "tvm / ov"} and set(truth) == {"ort", "ov"}
    for r in rows:
        assert r["p05"] <= r["p95"] and 0.0 <= r["off10"] <= r["off5"] <= 1.0
    assert table(rows).count("\n") == len(rows) + 1
