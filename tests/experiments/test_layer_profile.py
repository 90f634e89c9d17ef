"""experiments/layer_profile.py beyond the library's profile: each best config timed again alone, warm and cold."""

from __future__ import annotations


def test_retimed_gives_each_best_config_a_warm_and_a_cold_median_over_rounds_in_fresh_processes(tmp_path):
    import math

    from autosearch.records import read_log
    from experiments.layer_profile import retimed
    from tests.conftest import small_conv_run

    _, path = small_conv_run(tmp_path, trials=2)
    log = read_log(path)
    [key] = [k for k, h in log.tasks.items() if "conv" in h["name"]]
    [(warm, cold)] = retimed(log, [log.best(key)], rounds=2)  # the second round after a refresh
    assert 0 < warm < 1 and 0 < cold < 1 and math.isfinite(warm) and math.isfinite(cold)
