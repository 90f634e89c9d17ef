"""experiments/cpu_transfer.py: held-out ranking per CPU, each CPU's records beside models of the others'."""

from __future__ import annotations

import numpy as np

from experiments.cpu_transfer import column_order, sources, transfer


def _two_cpus(seed: int = 0):
    """Two CPUs that measured the same 12 tasks, 10 configs each, and order them oppositely by feature 0: a model of
    one CPU's records ranks the other's backwards."""
    rng = np.random.default_rng(seed)
    X, y, groups, task_of_group, cpu_of_group = [], [], [], [], []
    for cpu, sign in (("a", 1.0), ("b", -1.0)):
        for task in range(12):
            rows = rng.normal(size=(10, 3))
            X.append(rows)
            y.append(np.exp(sign * rows[:, 0]))  # throughput, higher is faster
            groups.append(np.full(10, len(task_of_group)))
            task_of_group.append(task)
            cpu_of_group.append(cpu)
    return (np.vstack(X), np.concatenate(y), np.concatenate(groups), np.asarray(task_of_group),
            np.asarray(cpu_of_group))


def test_a_cpu_ranked_by_its_own_records_and_by_anothers_that_order_configs_the_other_way():
    X, y, groups, task_of_group, cpu_of_group = _two_cpus()
    fold_of_task = np.arange(12) % 3
    result = transfer(X, y, groups, task_of_group, cpu_of_group, fold_of_task, seed=0, model="xgb-rank")
    for cpu, other in (("a", "b"), ("b", "a")):
        cols = result[cpu]
        assert cols["same"]["pairwise"] > 0.75 and cols[f"from {other}"]["pairwise"] < 0.25  # chance: 0.5
        assert cols["same"]["groups"] == 12  # every task of the CPU tested once, in its fold
        assert "from the others" not in cols  # with two CPUs, that is "from" the other


def test_columns_per_tested_cpu():
    cpu_of_row = np.asarray(["znver3", "znver4", "rocketlake", "znver3"])
    columns = sources(cpu_of_row, "znver4", without="znver3")
    assert list(columns) == ["same", "from rocketlake", "from znver3", "from the others", "all but znver3", "all"]
    assert columns["from the others"].tolist() == [True, False, True, True]
    assert columns["all but znver3"].tolist() == [False, True, True, False]
    assert "all but znver3" not in sources(cpu_of_row, "znver3", without="znver3")  # that is "from the others"
    assert column_order(["all", "from znver4", "all but znver3", "same", "from rocketlake"],
                        ["rocketlake", "znver4"]) == ["same", "from rocketlake", "from znver4", "all but znver3", "all"]
