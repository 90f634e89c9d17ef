"""experiments/reciprocal.py: the model built without the rewrite, and its arguments checked."""

from __future__ import annotations

import pytest
import tvm

import autosearch.frontend.reciprocal as reciprocal
from experiments.reciprocal import divisions_kept, main
from tests.test_reciprocal import batch_norm_like


def test_the_builds_without_the_rewrite_keep_their_divisions_and_the_rewrite_comes_back():
    mod = tvm.IRModule({"main": batch_norm_like})
    with divisions_kept():
        assert reciprocal.reciprocal_divisors(mod).same_as(mod)
    assert "T.float32(1.0) / scale[vc]" in reciprocal.reciprocal_divisors(mod).script()


def test_a_case_without_a_database_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--case", f"tiny-yolov2={tmp_path / 'missing'}", "--out", "unused"])
    assert exit_.value.code == 2 and "expected MODEL=DB" in capsys.readouterr().err
