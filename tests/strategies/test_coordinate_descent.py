"""Coordinate descent: it walks one decision at a time, gets better than where it started, repeats a move that
helped, and restarts away from a local optimum. Results come from the replay runner (tests/strategies/replay.py)."""

from __future__ import annotations

import statistics

import pytest
from strategy_helpers import OracleScorer

from autosearch.search.space import hamming
from autosearch.strategies.coordinate_descent import CoordinateDescent
from autosearch.types import Config, MeasureResult, Status
from tests.strategies.replay import ReplayRunner, SyntheticLatency, best_latency, run_strategy


def _ok(seconds: float) -> MeasureResult:
    return MeasureResult(Status.OK, latencies=(seconds,) * 3)


def _changed(a: Config, b: Config) -> list[int]:
    return [i for i, (x, y) in enumerate(zip(a.values, b.values)) if x != y]


def _is_one_step(space, a: Config, b: Config) -> bool:
    """b is a's neighbour: the same values in another sketch, or one decision changed: a tile by one prime factor
    moved between two levels, another decision to the adjacent choice."""
    if a.sketch != b.sketch:
        return a.values == b.values
    if len(_changed(a, b)) != 1:
        return False
    [i] = _changed(a, b)
    d = space.decisions(a.sketch)[i]
    x, y = a.values[i], b.values[i]
    if d.kind == "SamplePerfectTile":
        ratios = sorted(p / q for p, q in zip(x, y) if p != q)
        return len(ratios) == 2 and ratios[0] * ratios[1] == pytest.approx(1.0) and round(ratios[1]) in (2, 3, 5, 7)
    return abs(d.choices.index(x) - d.choices.index(y)) == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_walks_through_neighbours_and_improves_on_its_start(conv_space, seed) -> None:
    """After the random start every config asked is a one-step neighbour of a config measured before it (or a
    restart point), most of them of the best so far, and the walk ends far below the best random start."""
    synthetic = SyntheticLatency(conv_space, seed=seed)
    strategy = CoordinateDescent(conv_space, seed=seed, init_random=16)
    history = run_strategy(strategy, ReplayRunner(conv_space, synthetic), 96, 8)
    start, walk = history[:16], history[16:]
    seen = [c for c, _ in start]
    neighbours = 0
    for config, _ in walk:
        neighbours += any(_is_one_step(conv_space, earlier, config) for earlier in seen)
        seen.append(config)
    assert neighbours >= 0.8 * len(walk), neighbours
    assert best_latency(history) < 0.6 * best_latency(start)


def test_moves_to_a_faster_neighbour_and_repeats_the_move_first(conv_space) -> None:
    """Told that one neighbour is the fastest, the walk's next ask starts with the same move made once more."""
    strategy = CoordinateDescent(conv_space, seed=4, init_random=4)
    start = strategy.ask(4)
    strategy.tell(start, [_ok(1e-3 * (i + 1)) for i in range(4)])  # the first one is the centre
    centre = start[0]
    batch = strategy.ask(16)  # a centre of this space has 25-35 neighbours
    assert all(_is_one_step(conv_space, centre, c) for c in batch)
    # a tile neighbour whose move can be made again from it
    for winner in batch:
        if winner.sketch != centre.sketch:
            continue
        [i] = _changed(centre, winner)
        d = conv_space.decisions(centre.sketch)[i]
        if d.kind != "SamplePerfectTile":
            continue
        pairs = list(zip(winner.values[i], centre.values[i]))
        again = tuple(w * w // c for w, c in pairs)  # the same factor moved twice
        if all(w * w % c == 0 for w, c in pairs) and again in d.choice_set:
            break
    else:
        pytest.skip("no tile neighbour with a repeatable move in this space")
    strategy.tell(batch, [_ok(0.5e-3 if c == winner else 2e-3) for c in batch])
    [first] = strategy.ask(1)
    assert first == winner.replace(i, again)


def test_restarts_away_from_a_local_optimum(conv_space) -> None:
    """A centre whose whole neighbourhood is slower is a local optimum: the walk leaves it (a perturbed or random
    start, more than one step away) rather than stopping or circling it."""
    strategy = CoordinateDescent(conv_space, seed=5, init_random=2, restart_random=0.0, perturb=3)
    start = strategy.ask(2)
    strategy.tell(start, [_ok(1e-3), _ok(2e-3)])
    centre = start[0]
    asked: list[Config] = []
    while True:  # every neighbour is slower than the centre
        batch = strategy.ask(16)
        near = [c for c in batch if _is_one_step(conv_space, centre, c)]
        asked += batch
        strategy.tell(batch, [_ok(5e-3) for _ in batch])
        if len(near) < len(batch):
            break
        assert len(asked) < 500, "the neighbourhood never ran out"
    assert strategy.optima and strategy.optima[0][0] == centre
    restart = next(c for c in asked if not _is_one_step(conv_space, centre, c))
    assert hamming(centre, restart) > 1
    assert conv_space.contains(restart)


def test_a_perfect_model_makes_the_walk_faster(conv_space) -> None:
    """Ordered by the true landscape, the first neighbours measured are the best ones: better configs within the
    same 48 trials (median of 3 seeds) than the unordered walk."""
    def best(seed: int, model) -> float:
        synthetic = SyntheticLatency(conv_space, seed=seed)
        scorer = OracleScorer(synthetic) if model else None
        strategy = CoordinateDescent(conv_space, seed=seed, cost_model=scorer, init_random=8)
        return best_latency(run_strategy(strategy, ReplayRunner(conv_space, synthetic), 48, 8, cost_model=scorer))

    plain = statistics.median(best(s, False) for s in range(3))
    guided = statistics.median(best(s, True) for s in range(3))
    assert guided < 0.9 * plain, (guided, plain)


def test_failed_kernels_never_become_the_centre(conv_space) -> None:
    strategy = CoordinateDescent(conv_space, seed=6, init_random=3)
    start = strategy.ask(3)
    strategy.tell(start, [MeasureResult.failed(Status.WRONG_RESULT, "x"), _ok(2e-3), _ok(3e-3)])
    batch = strategy.ask(8)
    assert all(_is_one_step(conv_space, start[1], c) for c in batch)
