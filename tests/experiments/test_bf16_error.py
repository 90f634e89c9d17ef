"""experiments/bf16_error.py: the variants it compiles from a database's choices, and the two error measures."""

from __future__ import annotations

import numpy as np

from experiments.bf16_error import ALL_FP32, AS_EXPORTED, NO_WINOGRAD, global_error, variants


def test_each_bf16_layer_alone_in_fp32_then_every_one() -> None:
    choices = {"a@3x3": "bf16-winograd", "b@1x1": "bf16", "stem@3x3": "fp32"}
    got = variants(choices)
    assert list(got) == [AS_EXPORTED, NO_WINOGRAD, "a@3x3 in fp32", "b@1x1 in fp32", ALL_FP32]
    assert got[AS_EXPORTED] == choices
    assert got[NO_WINOGRAD] == {"a@3x3": "bf16", "b@1x1": "bf16", "stem@3x3": "fp32"}
    assert got["b@1x1 in fp32"] == {"a@3x3": "bf16-winograd", "b@1x1": "fp32", "stem@3x3": "fp32"}
    assert set(got[ALL_FP32].values()) == {"fp32"}
    assert NO_WINOGRAD not in variants({"b@1x1": "bf16"})  # no Winograd layer kept: no such variant


def test_the_global_measure_is_the_worst_outputs_largest_difference_over_its_largest_value() -> None:
    ref = {"boxes": np.array([[100.0, -200.0]]), "scores": np.array([[1e-3, 2e-3]])}
    out = {"boxes": np.array([[101.0, -200.0]]), "scores": np.array([[2e-3, 2e-3]])}
    # the scores' difference is half their largest value; the boxes' 1/200 of theirs
    assert np.isclose(global_error(out, ref), 0.5)
