"""The feature cache: records featurised once, read back equal, rebuilt when the features or the file change."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from autosearch.cost_models import features as features_module
from autosearch.cost_models import loop_features
from autosearch.cost_models.feature_store import FeatureKey, FeatureStore, default_cache_dir, record_key
from autosearch.cost_models.features import build_dataset, feature_key
from tests.cost_models.conftest import first_records


@pytest.fixture
def extractor_calls(monkeypatch):
    """How many schedules each step of featurising ran on (replay, loop features, PerStoreFeature, assembly)."""
    calls = {"replay": 0, "loop": 0, "per_store": 0, "asm": 0}
    cls = features_module.TaskFeaturizer

    def counted(name: str, real, per_call):
        def wrapper(self, arg):
            calls[name] += per_call(arg)
            return real(self, arg)

        return wrapper

    monkeypatch.setattr(cls, "schedule_from_trace", counted("replay", cls.schedule_from_trace, lambda _: 1))
    for name in ("loop", "per_store", "asm"):
        monkeypatch.setattr(cls, name, counted(name, getattr(cls, name), len))
    return calls


def test_a_second_run_featurises_nothing_and_reads_what_the_first_computed(contents, tmp_path, extractor_calls):
    first = build_dataset([contents], kinds=("loop", "pooled"), store=FeatureStore(tmp_path))
    n = len(first)
    assert n > 100 and first.featurised == n and first.cached == 0
    assert extractor_calls["loop"] == n and extractor_calls["per_store"] == n

    for counter in extractor_calls:
        extractor_calls[counter] = 0
    again = build_dataset([contents], kinds=("loop", "pooled"), store=FeatureStore(tmp_path))  # a new run
    assert again.featurised == 0 and again.cached == n
    assert extractor_calls == {"replay": 0, "loop": 0, "per_store": 0, "asm": 0}
    for kind in ("loop", "pooled", "per_store"):
        np.testing.assert_array_equal(again.X(kind), first.X(kind))
    np.testing.assert_array_equal(again.latency, first.latency)
    np.testing.assert_array_equal(again.groups, first.groups)
    assert again.configs == first.configs and again.task_keys == first.task_keys
    assert again.secs_per_record == 0.0  # nothing replayed: no per-record cost to report


def test_each_extractor_is_cached_on_its_own(contents, tmp_path, extractor_calls):
    """loop features cached by an ``xgb@loop`` run are reused by a ``loop+asm`` one, which builds only the assembly."""
    few = first_records(contents)
    store = FeatureStore(tmp_path)
    loop_only = build_dataset([few], kinds=("loop",), store=store)
    assert extractor_calls["loop"] == 3 and extractor_calls["asm"] == 0
    both = build_dataset([few], kinds=("loop+asm",), store=store)
    assert extractor_calls["loop"] == 3 and extractor_calls["asm"] == 3
    assert both.computed == {"loop": 0, "asm": 3} and both.featurised == 3
    np.testing.assert_array_equal(both.X("loop"), loop_only.X("loop"))

    fresh = build_dataset([few], kinds=("loop+asm",))  # no store: computed anew
    again = build_dataset([few], kinds=("loop+asm",), store=FeatureStore(tmp_path))
    assert again.featurised == 0 and extractor_calls["asm"] == 6
    np.testing.assert_array_equal(again.X("loop+asm"), fresh.X("loop+asm"))


def test_a_new_feature_version_invalidates_the_cache(contents, tmp_path, monkeypatch, extractor_calls):
    few = first_records(contents)
    build_dataset([few], kinds=("loop",), store=FeatureStore(tmp_path))
    assert build_dataset([few], kinds=("loop",), store=FeatureStore(tmp_path)).featurised == 0
    monkeypatch.setattr(loop_features, "VERSION", loop_features.VERSION + 1)
    bumped = build_dataset([few], kinds=("loop",), store=FeatureStore(tmp_path))
    assert bumped.featurised == 3 and bumped.computed["loop"] == 3 and extractor_calls["loop"] == 6


def test_machine_facts_and_target_are_part_of_the_key(contents):
    header = next(iter(contents.tasks.values()))
    other = {**header, "target": {**header["target"], "num-cores": int(header["target"].get("num-cores", 2)) + 6}}
    for extractor in ("loop", "asm", "per_store"):
        assert feature_key(extractor, header) == feature_key(extractor, dict(header))
        assert feature_key(extractor, header).file_name != feature_key(extractor, other).file_name
    assert feature_key("loop", header).facts["machine"]["cores"] != feature_key("loop", other).facts["machine"]["cores"]


def test_a_corrupt_cache_file_is_ignored_with_a_warning_and_rebuilt(contents, tmp_path, caplog):
    few = first_records(contents)
    build_dataset([few], kinds=("loop",), store=FeatureStore(tmp_path))
    (path,) = [os.path.join(d, f) for d, _, files in os.walk(tmp_path) for f in files]
    with open(path, "wb") as fh:
        fh.write(b"PK\x03\x04 not a zip any more")
    with caplog.at_level(logging.WARNING, logger="autosearch.cost_models.feature_store"):
        rebuilt = build_dataset([few], kinds=("loop",), store=FeatureStore(tmp_path))
    assert rebuilt.featurised == 3
    assert any("unreadable" in r.getMessage() and path in r.getMessage() for r in caplog.records)
    assert build_dataset([few], kinds=("loop",), store=FeatureStore(tmp_path)).featurised == 0  # readable again


def test_store_round_trip_of_vectors_and_matrices(tmp_path):
    key = FeatureKey("per_store", "1/tvm-test", "wk", {"target": {"kind": "llvm"}})
    rows = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones((1, 3), np.float32),
            "c": np.zeros((0, 3), np.float32)}
    FeatureStore(tmp_path).put(key, rows)
    got = FeatureStore(tmp_path).get(key, ["b", "a", "c", "missing"])
    for want, have in zip((rows["b"], rows["a"], rows["c"]), got):
        np.testing.assert_array_equal(have, want)
    assert got[3] is None
    vec = FeatureKey("loop", "1/tvm-test", "wk", {})
    FeatureStore(tmp_path).put(vec, {"a": np.array([1.0, 2.0], np.float32)})
    FeatureStore(tmp_path).put(vec, {"b": np.array([3.0, 4.0], np.float32)})  # merged with the file's rows
    a, b = FeatureStore(tmp_path).get(vec, ["a", "b"])
    assert a.shape == (2,) and a.tolist() == [1.0, 2.0] and b.tolist() == [3.0, 4.0]
    assert not [f for _, _, files in os.walk(tmp_path) for f in files if f.endswith(".tmp")]  # no leftovers


def test_an_unwritable_cache_warns_once_and_keeps_the_rows(tmp_path, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    store = FeatureStore(blocker)
    key = FeatureKey("loop", "1", "wk", {})
    with caplog.at_level(logging.WARNING, logger="autosearch.cost_models.feature_store"):
        store.put(key, {"a": np.ones(2, np.float32)})
        store.put(key, {"b": np.ones(2, np.float32)})
    assert sum("not writable" in r.getMessage() for r in caplog.records) == 1
    assert all(v is not None for v in store.get(key, ["a", "b"]))


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOSEARCH_CACHE", str(tmp_path / "mine"))
    assert default_cache_dir() == str(tmp_path / "mine")
    assert FeatureStore().directory == str(tmp_path / "mine")
    monkeypatch.delenv("AUTOSEARCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "autosearch")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "autosearch")


def test_record_key_names_the_schedule(contents):
    a, b = [r for r in contents.trials() if r.ok][:2]
    assert record_key(a) == record_key(a) and record_key(a) != record_key(b)
    shorter = type(a)(**{**a.__dict__, "trace": [a.trace[0][:-1], a.trace[1]]})
    assert record_key(shorter) != record_key(a)  # same config, another sketch shape
    no_config = type(a)(**{**a.__dict__, "config": None})  # as read from a TVM database
    assert record_key(no_config) != record_key(a)
