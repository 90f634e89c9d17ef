"""Re-timing a task's best configs, every method's, in fresh measuring processes, interleaved across methods.

In-run timings pick a run's best, so they are biased towards luck, and the machine drifts between the hours the
methods ran. So once every run of a task is done, the best config of every run at every budget is timed again:
``retime_rounds`` rounds, each in a fresh measuring process, each measuring every method's configs in turn
(:func:`experiments.lib.retime.round_robin`: one config of each method, then the next one of each, the method that
goes first rotating from round to round). A config's re-timed latency is the median over rounds of its per-round
median (``inf`` if it failed any round): :func:`autosearch.ranking.score`. A config two runs or budgets share
(same trace) is timed once per round.

Each round is stored when it ends (``retime/TASK/round<K>.json``, with the machine's fingerprint), so a killed
study re-times only the rounds it lacks. A method added later gets rounds of its own configs only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autosearch.ranking import score
from experiments.lib.retime import round_robin
from experiments.lib.study.config import StudyConfig
from experiments.lib.study.store import RunResult, Store

Item = tuple[str, str]  # (method, trace key)


def plan(config: StudyConfig, results: Sequence[RunResult]) -> dict[str, list[str]]:
    """Per method (in the configuration's order), the distinct trace keys of its runs' bests, seed by seed, budget
    by budget."""
    out: dict[str, list[str]] = {}
    for method in config.methods:
        keys: list[str] = []
        for r in sorted((r for r in results if r.method == method.name), key=lambda r: r.seed):
            for budget in config.budgets:
                if budget in r.best and r.best[budget]["trace"] not in keys:
                    keys.append(r.best[budget]["trace"])
        if keys:
            out[method.name] = keys
    return out


def covered(rounds: Sequence[dict[str, Any]]) -> dict[Item, int]:
    """How many stored rounds measured each item."""
    count: dict[Item, int] = {}
    for r in rounds:
        for entry in r["results"]:
            item = (entry["method"], entry["trace"])
            count[item] = count.get(item, 0) + 1
    return count


def rounds_to_do(config: StudyConfig, groups: dict[str, list[str]], done: dict[Item, int]) -> dict[str, list[str]]:
    """The items (per method) still short of ``retime_rounds`` rounds."""
    short = {m: [k for k in keys if done.get((m, k), 0) < config.retime_rounds] for m, keys in groups.items()}
    return {m: keys for m, keys in short.items() if keys}


def retime_task(config: StudyConfig, store: Store, spec, *, measure: Callable[[list[Any]], list[Any]],
                fresh: Callable[[], None], machine: dict[str, Any]) -> int:
    """Run the rounds the task still lacks; returns how many were run. ``measure(traces)`` times TVM traces in the
    order given (one ``MeasureResult`` each); ``fresh()`` replaces the measuring process before each round."""
    results = [r for r in (store.result(k) for k in _keys(config, spec)) if r is not None]
    traces = {k: t for r in results for k, t in r.traces.items()}
    groups = plan(config, results)
    stored = store.rounds(spec)
    ran = 0
    while True:
        todo = rounds_to_do(config, groups, covered(stored))
        if not todo:
            return ran
        number = len(stored) + 1
        order = round_robin(todo, number - 1)
        fresh()
        measured = measure([traces[key] for _, key in order])
        entry = {"round": number, "fingerprint": machine,
                 "results": [{"method": m, "trace": key, "status": r.status.value, "latencies": list(r.latencies),
                              "error": r.error[:300]} for (m, key), r in zip(order, measured)]}
        store.write_round(spec, entry)
        stored.append(entry)
        ran += 1


def _keys(config: StudyConfig, spec):
    from experiments.lib.study.store import all_runs

    return all_runs([spec], config.methods, config.seeds)


def retimed(rounds: Sequence[dict[str, Any]]) -> dict[Item, float]:
    """Re-timed seconds per item over the stored rounds (:func:`autosearch.ranking.score`)."""
    from autosearch.types import MeasureResult, Status

    per_item: dict[Item, list] = {}
    for r in rounds:
        for entry in r["results"]:
            result = MeasureResult(Status(entry["status"]), tuple(entry["latencies"]), entry.get("error", ""))
            per_item.setdefault((entry["method"], entry["trace"]), []).append(result)
    return {item: score(results) for item, results in per_item.items()}


def local_measurer(task, evaluator=None):
    """(measure, fresh, close) on this machine: a LocalRunner with the task's reference prepared; ``fresh``
    replaces its measuring process."""
    from experiments.lib.retime import measure_traces, prepared_runner

    runner = prepared_runner(task, evaluator=evaluator)
    return (lambda traces: measure_traces(runner, task, traces)), runner.refresh, runner.close
