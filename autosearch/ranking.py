"""The rule that chooses a task's best kernel: its finalists' re-times in fresh measuring processes, then the rest.

At the end of a run each task's top configs (by in-run median) are re-timed in rounds, one fresh measuring process
a round (:mod:`autosearch.search.finalists` runs them). The rule is written here, below every stage, because the
tuner chooses with it, the log (:meth:`autosearch.records.LogContents.ranked`, hence ``export`` and ``report``)
reads the choice back with it, and the cost models' labels and the experiments' re-timing score with it.

The rule: a finalist's score is the **median over rounds of its per-round median**; the lowest score
wins, the in-run median breaks a tie. Why this one:

- Fresh processes disagree about one kernel by far more than its repeats within one process do (a
  kernel can run markedly faster in one process than in every other), so the process is the unit of
  evidence, and the median over processes ignores one lucky or one slow process per finalist. The minimum over
  rounds would be that lucky process again; the mean is moved by it.
- A median, unlike a rank-sum, weighs how much faster a finalist is and needs no equal number of
  rounds per finalist (a run interrupted in mid-round, evidence kept from before a ``--resume``).
- The in-run timing is not part of the score: the finalists were selected *because* it was low, so
  it is biased towards luck (the winner's curse) and is exactly the evidence being double-checked.

A finalist that failed any re-time (crash, timeout, wrong result, build error) is out: it is not
ranked at all, so it can be neither the best nor exported. With one round the rule is the old one,
the fastest re-time wins.

Which re-times count: the timings logged after the task's last trial, and every failure. A later
trial (a ``--resume`` that tuned the task further) may change the finalists, so earlier timings say
nothing about them, but a kernel that failed once stays out; re-times of the same finalists from an
earlier run of the same log are further rounds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from autosearch.types import MeasureResult, Record

K = TypeVar("K", bound=Hashable)


def current_retimes(records: Iterable[Record]) -> list[Record]:
    """The ``retime`` records of one task that count, in log order: the failed ones, and the ok ones
    that follow the task's last ``trial`` record."""
    out: list[Record] = []
    for rec in records:
        if rec.kind == "trial":
            out = [r for r in out if not r.ok]
        elif rec.kind == "retime":
            out.append(rec)
    return out


def failures(retimes: Iterable[tuple[K, MeasureResult]]) -> list[tuple[K, MeasureResult]]:
    """What a new trial of the task leaves of its re-times (see :func:`current_retimes`)."""
    return [(c, r) for c, r in retimes if not r.ok]


def score(rounds: Iterable[MeasureResult]) -> float:
    """One kernel's score over its re-timing rounds, the rule of the module docstring: the median over rounds of
    its per-round median (seconds); ``inf`` when any round failed (it is out), or when there is no round.

    The one place the rule is written: :func:`rank` (the tuner, ``export``), the cost models' labels
    (``autosearch.cost_models.features.labelled_trials``) and the experiments' re-timing call it."""
    medians = []
    for result in rounds:
        if not result.ok:
            return math.inf
        medians.append(result.median)
    return statistics.median(medians) if medians else math.inf


def scores(retimes: Iterable[tuple[K, MeasureResult]]) -> dict[K, float]:
    """:func:`score` per key of ``retimes``, (key, result) pairs, one per key and round: ``inf`` for a key that
    failed a round."""
    rounds: dict[K, list[MeasureResult]] = {}
    for key, result in retimes:
        rounds.setdefault(key, []).append(result)
    return {key: score(results) for key, results in rounds.items()}


def rank(in_run: Mapping[K, float], retimes: Iterable[tuple[K, MeasureResult]]) -> list[K]:
    """Configs best first: the re-timed finalists by their :func:`score`, then the rest by in-run median
    (seconds).

    ``in_run`` maps every valid trial's config to its in-run median; ``retimes`` are the (config, result)
    pairs of the re-times that count, one per finalist and round. A config with a failed re-time is left
    out; a re-time of a config not in ``in_run`` is ignored.
    """
    retimed = scores((c, r) for c, r in retimes if c in in_run)
    finalists = sorted((c for c, s in retimed.items() if math.isfinite(s)), key=lambda c: (retimed[c], in_run[c]))
    rest = sorted((c for c in in_run if c not in retimed and math.isfinite(in_run[c])), key=lambda c: in_run[c])
    return finalists + rest


__all__ = ["current_retimes", "failures", "rank", "score", "scores"]
