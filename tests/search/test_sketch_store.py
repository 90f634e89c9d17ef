"""Tasks' sketches kept on disk: a space read back is the space built, a key changes with everything the sketches
depend on, and a bad file or directory costs the speed-up, never a wrong space or a failed run."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import tvm

from autosearch.search import sketch_store
from autosearch.search.sketch_store import SketchStore
from autosearch.search.space import DecisionSpace


def _same_space(built: DecisionSpace, read: DecisionSpace, *, configs: int = 6) -> None:
    assert [(s.decisions, s.default) for s in read.sketches] == [(s.decisions, s.default) for s in built.sketches]
    assert [str(s.trace) for s in read.sketches] == [str(s.trace) for s in built.sketches]
    assert read.measure_first == built.measure_first
    rng = np.random.default_rng(0)
    for _ in range(configs):
        config = built.sample(rng)
        a, b = built.apply(config), read.apply(config)
        assert (a.config, a.error) == (b.config, b.error)
        if a.ok:
            tvm.ir.assert_structural_equal(a.mod, b.mod)


def _never_built(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the space was built, not read")

    monkeypatch.setattr(DecisionSpace, "_make_sketch", refuse)


def test_a_space_read_back_is_the_space_built(conv_task, tmp_path, monkeypatch) -> None:
    store = SketchStore(tmp_path)
    built = DecisionSpace(conv_task.mod, conv_task.target, store=store)
    assert len(os.listdir(tmp_path / "sketches")) == 1
    _never_built(monkeypatch)
    _same_space(built, DecisionSpace(conv_task.mod, conv_task.target, store=store))


def test_a_concatenation_keeps_its_sketch_measured_first(target, tmp_path, monkeypatch) -> None:
    from autosearch.frontend.importer import import_model
    from tests.conftest import channel_concat_onnx

    path = str(tmp_path / "concat.onnx")
    channel_concat_onnx(path)
    task = next(t for t in import_model(path, target).tasks if "concatenate" in t.name)
    store = SketchStore(tmp_path)
    built = DecisionSpace(task.mod, task.target, store=store)
    assert built.measure_first  # along the last axis: its partitioned sketch
    _never_built(monkeypatch)
    _same_space(built, DecisionSpace(task.mod, task.target, store=store))


def test_the_key_changes_with_module_target_seed_and_code(small_model, conv_task, monkeypatch) -> None:
    from autosearch.frontend.target import parse_target

    key = SketchStore.key(conv_task.mod, conv_task.target, 0)
    assert SketchStore.key(conv_task.mod, conv_task.target, 0) == key  # what it depends on, not when it is made
    other_task = next(t for t in small_model.tasks if t is not conv_task)
    other_target = parse_target('{"kind": "llvm", "mcpu": "x86-64", "num-cores": 1}')
    others = {SketchStore.key(other_task.mod, conv_task.target, 0), SketchStore.key(conv_task.mod, other_target, 0),
              SketchStore.key(conv_task.mod, conv_task.target, 1)}
    assert len(others | {key}) == 4
    monkeypatch.setattr(sketch_store, "code_digest", lambda: "another version of autosearch")
    assert SketchStore.key(conv_task.mod, conv_task.target, 0) != key


def test_the_code_digest_covers_the_package_sources() -> None:
    digest = sketch_store.code_digest()
    assert len(digest) == 32 and digest == sketch_store.code_digest()


@pytest.mark.parametrize("damage", ["not json", "another key", "a trace that does not replay"])
def test_a_bad_file_is_ignored_with_a_warning_and_rebuilt(damage, conv_task, tmp_path, caplog) -> None:
    store = SketchStore(tmp_path)
    built = DecisionSpace(conv_task.mod, conv_task.target, store=store)
    path = store.path(store.key(conv_task.mod, conv_task.target, 0))
    entry = json.load(open(path))
    if damage == "not json":
        text = "{ half a file"
    elif damage == "another key":
        text = json.dumps({**entry, "key": "0" * 40})
    else:  # each decision pointing one instruction later: the trace replays, its sampling instructions are elsewhere
        damaged = json.loads(json.dumps(entry))
        for sketch in damaged["value"]["sketches"]:
            sketch["decisions"] = [[n, k, c, p + 1] for n, k, c, p in sketch["decisions"]]
        text = json.dumps(damaged)
    with open(path, "w") as fh:
        fh.write(text)
    with caplog.at_level(logging.WARNING):
        again = DecisionSpace(conv_task.mod, conv_task.target, store=store)
    _same_space(built, again, configs=2)
    said = [r.getMessage() for r in caplog.records]
    if damage == "a trace that does not replay":
        assert any("do not replay" in m and "afresh" in m for m in said), said
    else:
        assert any(path in m and "rebuilt" in m for m in said), said
    assert json.load(open(path)) == entry  # written again


def test_an_unwritable_directory_warns_once_and_builds(conv_task, tmp_path, caplog) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = SketchStore(blocker)  # sketches/ cannot be made under a file
    with caplog.at_level(logging.WARNING):
        spaces = [DecisionSpace(conv_task.mod, conv_task.target, store=store) for _ in range(2)]
    assert [len(s.sketches) for s in spaces] == [len(spaces[0].sketches)] * 2 and spaces[0].sketches
    assert sum("not writable" in r.getMessage() for r in caplog.records) == 1
