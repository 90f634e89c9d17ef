"""experiments/cache_states.py on a small real run: a task's best configs timed flushed and dirty, in turns."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import small_conv_run


def test_cache_states_times_a_tasks_best_configs_in_both_states_and_names_each_states_winner(tmp_path, monkeypatch):
    from autosearch.errors import UserError
    from autosearch.records import read_log
    from experiments import cache_states
    from experiments.lib import io

    monkeypatch.setattr(io, "RESULTS", str(tmp_path / "results"))
    _, path = small_conv_run(tmp_path, trials=3)
    log = read_log(path)
    [name] = [h["name"] for h in log.tasks.values() if "conv" in h["name"]]
    assert cache_states.main(["--log", path, "--tasks", name, "--top", "2", "--rounds", "2",
                              "--out", "states"]) == 0
    out = json.loads((tmp_path / "results" / "states.json").read_text())
    [task] = out["tasks"]
    assert task["task"] == name and task["configs"] == 2 and len(task["trials"]) == 2
    for state in cache_states.STATES:
        assert len(task["times"][state]) == 2 and all(t > 0 and math.isfinite(t) for t in task["times"][state])
    dirty = task["times"]["dirty"]
    assert task["dirty_best_secs"] == min(dirty) and task["gain"] >= 1.0  # the dirty state's own winner is its best
    assert "dirty's best" in (tmp_path / "results" / "states.md").read_text()
    assert (tmp_path / "results" / "states.png").stat().st_size > 0

    with pytest.raises(UserError, match="no task 'nope'"):
        cache_states.main(["--log", path, "--tasks", "nope", "--out", "x"])
    with pytest.raises(SystemExit) as exc:
        cache_states.main(["--log", path, "--tasks", name, "--top", "1", "--out", "x"])
    assert exc.value.code == 2
