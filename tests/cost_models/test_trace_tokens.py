"""Trace tokens (the sequence model's input): what they hold, and that search scores the tokens models learnt on."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.cost_models.trace_tokens import KINDS, TOKEN_WIDTH, sequence_input, split_sequence_input, trace_tokens


def _log2(x):
    return np.log2(1.0 + np.asarray(x, dtype=np.float64))


def test_tokens_carry_the_decisions_and_the_split_extents(contents):
    record = next(r for r in contents.trials() if r.ok)
    header = contents.tasks[record.task_key]
    tokens = trace_tokens(record.trace, header["flops"], header["args"])
    instructions, decisions = record.trace
    assert tokens.shape == (1 + len(instructions), TOKEN_WIDTH) and tokens.dtype == np.float32
    assert tokens[0, 0] == 1 and tokens[0, 4] == pytest.approx(np.log2(1 + header["flops"]), rel=1e-6)
    assert (tokens[1:, 0] >= 2).all()  # every instruction of a MetaSchedule trace is a known kind
    assert tokens[1 + instructions.index(["EnterPostproc", [], [], []]):, 3].all()  # the postproc flag
    tiles = [(i, d) for i, d in decisions if instructions[i][0] == "SamplePerfectTile"]
    assert tiles
    for i, factors in tiles:
        np.testing.assert_allclose(tokens[1 + i, 4:4 + len(factors)], _log2(factors), rtol=1e-6)
        split = 1 + i + 1  # MetaSchedule splits with the sampled factors right after sampling them
        assert KINDS[int(tokens[split, 0]) - 2] == "Split"
        np.testing.assert_allclose(tokens[split, 8:8 + len(factors)], _log2(factors), rtol=1e-6)
    [(i, unroll)] = [(i, d) for i, d in decisions if instructions[i][0] == "SampleCategorical"]
    candidates = instructions[i][2][0]
    assert tokens[1 + i, 4] == pytest.approx(np.log2(1 + candidates[unroll]))  # the unroll depth, not its index


def test_configs_differ_in_tokens(contents):
    records = [r for r in contents.trials() if r.ok][:20]
    header = contents.tasks[records[0].task_key]
    flat = {trace_tokens(r.trace, header["flops"], header["args"]).tobytes() for r in records}
    assert len(flat) == len({r.config for r in records})


def test_scoring_sees_the_tokens_of_the_logged_trace(contents, held_out_task):
    """A guided search tokenises ``space.apply(config)``'s trace: for a logged config, the logged record's tokens."""
    task, space = held_out_task
    records = [r for r in contents.trials(task.workload_key) if r.ok]
    checked = 0
    for record in records[:10]:
        applied = space.apply(record.config)
        if not applied.ok:
            continue
        np.testing.assert_array_equal(trace_tokens(applied.trace_json(), task.flops, task.args),
                                      trace_tokens(record.trace, task.flops, [list(a) for a in task.args]))
        checked += 1
    assert checked >= 5


def test_sequence_input_round_trip():
    rng = np.random.default_rng(0)
    tokens = [rng.normal(size=(n, TOKEN_WIDTH)).astype(np.float32) for n in (3, 7, 5)]
    vectors = rng.normal(size=(3, 4)).astype(np.float32)
    X = sequence_input(tokens, vectors)
    assert X.shape == (3, 4 + 7 * TOKEN_WIDTH)
    back_vectors, back = split_sequence_input(X, 4)
    np.testing.assert_array_equal(back_vectors, vectors)
    for t, b in zip(tokens, back):
        np.testing.assert_array_equal(b[:len(t)], t)
        assert np.isnan(b[len(t):]).all()  # padding tokens
    with pytest.raises(ValueError):
        split_sequence_input(X[:, :-1], 4)
