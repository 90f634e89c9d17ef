"""experiments/layout_lag.py on committed logs of real runs: the winner's lag along a --layout auto run, and no
row for a run of one layout."""

from __future__ import annotations

import math
import os

from autosearch.records import read_log
from autosearch.search.scheduler import LATE_LAYOUT_LIMIT
from experiments.layout_lag import FRACTIONS, layer_calls, layout_lag, main, totals_by_trial

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "results")


def _log(run: str) -> str:
    return os.path.join(RESULTS, run, "log.jsonl.gz")


def test_the_winners_lag_is_read_from_the_totals_the_scheduler_sees(tmp_path, capsys):
    contents = read_log(_log("user-tiny-yolov2-quickstart-xeon-emr-fp32-v3"))
    series = totals_by_trial(contents)
    assert series and {"NCHW", "NHWC"} == set(series[-1][1])
    lag = layout_lag(contents, "v3")
    final = series[-1][1]
    assert lag.winner == min(final, key=final.get) and lag.trials == 400
    assert math.isclose(lag.final_loser_lag, max(final.values()) / min(final.values()))
    # from later on, the largest lag can only be smaller: fewer trials to take the maximum over
    lags = [lag.winner_lag[f] for f in FRACTIONS]
    assert lags == sorted(lags, reverse=True) and lags[-1] >= 1.0 / lag.final_loser_lag
    assert layout_lag(read_log(_log("user-tiny-yolov2-quickstart-xeon-emr-fp32-nhwc")), "nhwc") is None
    assert main([_log("user-tiny-yolov2-quickstart-xeon-emr-fp32-v3"),
                 _log("user-tiny-yolov2-quickstart-xeon-emr-fp32-nhwc")]) == 0
    out = capsys.readouterr().out
    assert "user-tiny-yolov2-quickstart-xeon-emr-fp32-v3" in out and "-nhwc" not in out


def test_the_narrowing_replay_counts_the_losers_late_trials_and_the_winners_closest_call(capsys):
    """On the Zen 4 fp32 quick start NCHW won and NHWC, 1.4x behind, took trials to the end: the narrowing limit would
    have stopped it before them; the winner was never near the limit."""
    lag = layout_lag(read_log(_log("user-tiny-yolov2-quickstart-zen4-fp32-v7")), "v7")
    assert lag.winner == "NCHW" and lag.final_loser_lag > LATE_LAYOUT_LIMIT
    assert 0 < lag.freed < lag.loser_trials < lag.trials
    assert lag.closest_call < 1.0
    layers, dropped = layer_calls(read_log(_log("user-tiny-yolov2-quickstart-zen4-fp32-v7")))
    assert layers >= 8 and 0 <= dropped <= layers  # its wide layers, direct and Winograd, in both layouts
    assert main([_log("user-tiny-yolov2-quickstart-zen4-fp32-v7"), "--narrowing"]) == 0
    out = capsys.readouterr().out
    assert "closest call" in out and f"| {lag.freed} |" in out and f"{layers} layers tuned in two forms" in out
