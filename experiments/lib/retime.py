"""Re-timing schedules in fresh measuring processes, so no method is credited with a lucky in-run timing.

A tuning run's best is selected *because* its in-run timing was low, so that timing is biased (the winner's
curse), and fresh processes disagree about one kernel far more than repeats within a process do. So the
schedules a comparison is about are timed again, each round in a fresh measuring process, and a schedule's
score is the median over rounds of its per-round median (:mod:`autosearch.ranking`'s rule). When several
methods are compared, :func:`round_robin` interleaves their schedules within a round and rotates which method
goes first from round to round, so a slow spell of the machine hits every method alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from autosearch.deploy.timing import turn_order
from autosearch.ranking import score

K = TypeVar("K")
T = TypeVar("T")


def schedule(task, trace) -> Any:
    """The scheduled module of ``task`` a TVM trace (JSON, postprocessors included) describes
    (:func:`autosearch.search.space.replay`)."""
    from autosearch.search.space import replay

    return replay(task.mod, trace).mod


def round_robin(groups: Mapping[K, Sequence[T]], round_index: int) -> list[tuple[K, T]]:
    """The items of every group, interleaved: one of each group in turn (groups in their order rotated by
    ``round_index``, so each round another group goes first), until every group is used up."""
    keys = list(groups)
    if keys:
        k = round_index % len(keys)
        keys = keys[k:] + keys[:k]
    out: list[tuple[K, T]] = []
    depth = max((len(groups[key]) for key in keys), default=0)
    for i in range(depth):
        out += [(key, groups[key][i]) for key in keys if i < len(groups[key])]
    return out


def measure_traces(runner, task, traces: Sequence) -> list:
    """Time each schedule (TVM trace JSON) of ``task`` once, in the order given, on ``runner`` (whose reference for
    the task is prepared); a trace that no longer applies fails as ``invalid_config``, unbuilt."""
    from autosearch.types import MeasureResult, Status

    mods: list[Any] = []
    for trace in traces:
        try:
            mods.append(schedule(task, trace))
        except Exception as exc:  # TVM raises ScheduleError / TVMError: this schedule is not measurable
            mods.append(MeasureResult.failed(Status.INVALID_CONFIG, f"{type(exc).__name__}: {exc}"[:300]))
    buildable = [i for i, m in enumerate(mods) if not isinstance(m, MeasureResult)]
    measured = dict(zip(buildable, runner.measure(task, [mods[i] for i in buildable])))
    return [measured.get(i, mods[i]) for i in range(len(mods))]


def prepared_runner(task, *, evaluator=None):
    """A LocalRunner for ``task`` with its reference output and baseline measured (``RuntimeError`` if the
    unscheduled kernel itself fails)."""
    from autosearch.measure.local import LocalRunner

    runner = LocalRunner(target=task.target, evaluator=evaluator)
    base = runner.prepare(task)
    if not base.ok:
        runner.close()
        raise RuntimeError(f"the unscheduled {task.name} failed to build or run: {base.error}")
    return runner


def retime(task, target, traces: Sequence, *, evaluator=None, rounds: int = 1) -> list[list]:
    """Time each schedule (TVM trace JSON) of ``task`` once per round, every round in a fresh measuring process;
    returns ``MeasureResult`` per round, per trace (failures included)."""
    import dataclasses

    task = dataclasses.replace(task, target=target)
    runner = prepared_runner(task, evaluator=evaluator)
    out = []
    try:
        for r in range(rounds):
            if r > 0:
                runner.refresh()
            out.append(measure_traces(runner, task, traces))
    finally:
        runner.close()
    return out


def retime_secs(task, target, traces: Sequence, *, evaluator=None, rounds: int = 1) -> list[float]:
    """:func:`retime`, scored (:func:`autosearch.ranking.score`): seconds per trace (``inf`` for a
    schedule that failed a round)."""
    per_round = retime(task, target, traces, evaluator=evaluator, rounds=rounds)
    return [score([r[i] for r in per_round]) for i in range(len(traces))]


def in_turns(runner, key: str, args, artifacts: Mapping[K, bytes], rounds: int) -> dict[K, float]:
    """Median latency (ms) of each built artifact of one task, timed in turns in one measuring process (``runner``: a
    :class:`autosearch.measure.kernels.KernelRunner` holding the task's reference), the order reversed every other
    round; raises if one computes a wrong result. For builds of one schedule that differ in how they were built."""
    import statistics

    times: dict[K, list[float]] = {name: [] for name in artifacts}
    for r in range(rounds):
        for name in turn_order(list(artifacts), r):
            result = runner.run(key, artifacts[name], args, 0, {"repeat": 20})
            if "wrong_result" in result:
                raise RuntimeError(f"{name}: {result['wrong_result']}")
            times[name].append(result["median"] * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def settings_in_turns(target, settings: Mapping[K, Any], jobs: Sequence[tuple[Any, Any]], rounds: int, *,
                      progress: Callable[[str], None] | None = None) -> dict[K, list[float]]:
    """Each job (a task and one of its scheduled modules) timed under every setting (``MeasureOptions``, a local
    runner each) once per round: the settings take turns (:func:`~autosearch.deploy.timing.turn_order`), every round
    after the first in fresh measuring processes, a task's consecutive jobs measured as one batch. Per setting, each
    job's :func:`score` (seconds; ``inf`` where a round failed); ``progress`` gets a line as each setting starts a
    round."""
    from itertools import groupby

    from autosearch.api import make_runner

    runners = {k: make_runner("local", target, options) for k, options in settings.items()}
    results: dict[K, list[list]] = {k: [[] for _ in jobs] for k in runners}
    batches = [list(group) for _, group in groupby(enumerate(jobs), key=lambda job: job[1][0].workload_key)]
    try:
        for r in range(rounds):
            for k in turn_order(list(runners), r):
                if progress is not None:
                    progress(f"round {r + 1}/{rounds}: {k}, {len(jobs)} kernels")
                runner = runners[k]
                if r:
                    runner.refresh()  # references are installed again in the fresh process
                for batch in batches:
                    task = batch[0][1][0]
                    if not r:
                        runner.prepare(task)
                    for (i, _), result in zip(batch, runner.measure(task, [mod for _, (_, mod) in batch]),
                                              strict=True):
                        results[k][i].append(result)
    finally:
        for runner in runners.values():
            runner.close()
    return {k: [score(per_round) for per_round in per_job] for k, per_job in results.items()}
