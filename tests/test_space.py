"""DecisionSpace over MetaSchedule's design space: legal choices, replay determinism, apply."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosearch.search.space import perfect_tilings
from autosearch.types import Config


def test_perfect_tilings_are_complete_and_legal():
    tiles = perfect_tilings(128, 4, 64)
    assert len(tiles) == 119  # the count MetaSchedule's SamplePerfectTile can reach (TVM notes)
    assert all(math.prod(t) == 128 and t[-1] <= 64 for t in tiles)
    assert len(set(tiles)) == len(tiles)
    assert perfect_tilings(12, 2, 64) == ((1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1))


def test_space_mirrors_metaschedule_sketches(conv_space):
    assert len(conv_space.sketches) >= 2
    kinds = {d.kind for s in conv_space.sketches for d in s.decisions}
    assert {"SamplePerfectTile", "SampleCategorical", "SampleComputeLocation"} <= kinds
    assert conv_space.log10_size() > 4
    # MetaSchedule's own sampled decisions are legal choices of our space
    for s in conv_space.sketches:
        assert conv_space.contains(conv_space.default(s.index))


def test_same_config_gives_the_same_module(conv_space):
    """In another space of the same task too (a space keeps its recent applies: the second call of one would be a
    look-up)."""
    import tvm_ffi

    from autosearch.search.space import DecisionSpace

    other = DecisionSpace(conv_space.mod, conv_space.target)
    rng = np.random.default_rng(3)
    for _ in range(5):
        config = conv_space.sample(rng)
        a, b = conv_space.apply(config), other.apply(config)
        assert a.ok == b.ok
        if a.ok:
            assert tvm_ffi.structural_equal(a.mod, b.mod)
            assert tvm_ffi.structural_hash(a.mod) == tvm_ffi.structural_hash(b.mod)
            assert a.config == b.config


def test_applies_on_threads_in_any_order_give_what_one_at_a_time_does(conv_space):
    """Every apply starts from a copy of one unscheduled schedule, and a scorer applies on threads: what one apply
    leaves behind (the copy forks the original's random state) must not reach another, in any order or overlap."""
    from concurrent.futures import ThreadPoolExecutor

    import tvm_ffi

    from autosearch.search.space import DecisionSpace

    rng = np.random.default_rng(11)
    configs = list(dict.fromkeys(conv_space.sample(rng) for _ in range(16)))
    alone = [DecisionSpace(conv_space.mod, conv_space.target).apply(c) for c in configs[:4]]  # a space per apply
    shared = DecisionSpace(conv_space.mod, conv_space.target)
    with ThreadPoolExecutor(4) as pool:  # distinct configs: every apply is made, none is a look-up
        together = list(pool.map(shared.apply, reversed(configs)))[::-1]
    assert any(a.ok for a in alone)
    for a, b in zip(alone, together):
        assert (a.ok, a.config, a.error) == (b.ok, b.config, b.error)
        if a.ok:
            assert tvm_ffi.structural_equal(a.mod, b.mod)
            assert a.trace_json() == b.trace_json()


def test_recent_applies_are_kept_and_the_oldest_dropped(conv_space, monkeypatch):
    """A guided run applies a candidate to featurise it, then again to build it: the second is a look-up. Beyond
    ``RECENT_APPLIED`` configs the oldest is applied again when asked."""
    import tvm_ffi

    from autosearch.search import space as space_module

    monkeypatch.setattr(space_module, "RECENT_APPLIED", 4)
    space = space_module.DecisionSpace(conv_space.mod, conv_space.target)  # its own: nothing applied before
    rng = np.random.default_rng(5)
    configs = list(dict.fromkeys(space.sample(rng) for _ in range(12)))[:6]
    assert len(configs) == 6
    first = space.apply(configs[0])
    assert space.apply(configs[0]) is first
    for config in configs[1:]:  # five more: the first falls out
        space.apply(config)
    assert space.apply(configs[-1]) is space.apply(configs[-1])
    again = space.apply(configs[0])
    assert again is not first and again.config == first.config and again.ok == first.ok
    if first.ok:
        assert tvm_ffi.structural_equal(again.mod, first.mod)


def test_every_tile_choice_applies_and_is_read_back(conv_space):
    """Each legal tile value of a decision, applied, is the value in the resulting trace."""
    sketch = conv_space.sketches[0]
    base = conv_space.default(0)
    for i, d in enumerate(sketch.decisions):
        if d.kind != "SamplePerfectTile":
            continue
        for choice in d.choices[:: max(1, len(d.choices) // 6)]:
            applied = conv_space.apply(base.replace(i, choice))
            assert applied.ok, applied.error
            assert applied.config.values[i] == choice


def test_compute_locations_listed_are_legal_for_the_default_tiles(conv_space):
    for s in conv_space.sketches:
        base = conv_space.default(s.index)
        for i, d in enumerate(s.decisions):
            if d.kind == "SampleComputeLocation":
                for loc in d.choices:
                    applied = conv_space.apply(base.replace(i, loc))
                    assert applied.ok and applied.config.values[i] == loc


def test_compute_locations_listed_are_every_location_tvm_accepts(conv_space):
    """The listed locations are exactly where TVM lands when asked for every location in turn (TVM snaps an
    illegal one to a legal one): none missing, none extra."""
    from autosearch.search.space import _MAX_LOCATION_PROBE

    probed = 0
    for s in conv_space.sketches:
        base = conv_space.default(s.index)
        for i, d in enumerate(s.decisions):
            if d.kind == "SampleComputeLocation":
                landed = {conv_space.apply(base.replace(i, k)).config.values[i] for k in range(-2, _MAX_LOCATION_PROBE)}
                assert landed == set(d.choices), d.name
                probed += 1
    assert probed


def test_illegal_config_is_reported_not_raised(conv_space):
    bad = Config(0, tuple([(7, 7, 7, 7)] + list(conv_space.default(0).values[1:])))
    applied = conv_space.apply(bad)
    assert not applied.ok and "not in this space" in applied.error
    assert not conv_space.apply(Config(99, ())).ok


def test_mutate_changes_exactly_one_decision_to_another_legal_choice(conv_space):
    config = conv_space.sample(np.random.default_rng(0))
    rng = np.random.default_rng(1)
    changed = set()
    for _ in range(50):
        mutated = conv_space.mutate(config, rng)
        assert conv_space.contains(mutated) and mutated.sketch == config.sketch
        [i] = [i for i, (a, b) in enumerate(zip(mutated.values, config.values)) if a != b]
        changed.add(i)
    assert len(changed) > 1  # not always the same decision


def test_encode_has_fixed_width_and_separates_configs(conv_space):
    rng = np.random.default_rng(0)
    configs = {conv_space.sample(rng) for _ in range(30)}
    vectors = [conv_space.encode(c) for c in configs]
    assert all(v.shape == (conv_space.encoding_width,) for v in vectors)
    assert len({v.tobytes() for v in vectors}) == len(configs)


def test_config_json_round_trip(conv_space):
    import json

    config = conv_space.sample(np.random.default_rng(5))
    again = Config.from_json(json.loads(json.dumps(config.to_json())))
    assert again == config and hash(again) == hash(config)


@pytest.mark.parametrize("seed", [0, 1])
def test_sample_is_deterministic_under_a_seed(conv_space, seed):
    a = [conv_space.sample(np.random.default_rng(seed)) for _ in range(3)]
    b = [conv_space.sample(np.random.default_rng(seed)) for _ in range(3)]
    assert a == b


def test_a_features_apply_rewrites_the_weights_layout_alone_and_a_build_everything(tmp_path):
    """``apply_for_features(rewrite="weights")`` lays out the weights as ``apply`` does and leaves the bias as the
    arguments give it; ``apply`` (what is built) still lays out both; a task with no layout-free vector offers no
    "weights" way, and asking for it gives the apply in full."""
    import tvm_ffi

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target
    from autosearch.measure.prepack import PREPROC_ATTR, _blocks
    from autosearch.search.space import DecisionSpace
    from tests.conftest import small_conv_onnx

    def prepacked(mod) -> list[str]:  # the buffers a layout-rewrite block reads
        return sorted(r.source.name for b in _blocks(mod["main"]) if PREPROC_ATTR in b.annotations for r in b.reads)

    path = str(tmp_path / "conv.onnx")
    target = parse_target(None)
    for bias in (True, False):
        small_conv_onnx(path, cin=32, cout=64, hw=16, bias=bias)
        task = next(t for t in import_model(path, target, layout="NHWC", precision="fp32").tasks if "conv" in t.name)
        space = DecisionSpace(task.mod, task.target)
        config = next(c for c in (space.sample(np.random.default_rng(i)) for i in range(50)) if space.apply(c).ok)
        full = space.apply(config)
        weights = space.apply_for_features(config, rewrite="weights")
        assert weights.ok and weights.config == full.config
        assert len(prepacked(full.mod)) == (2 if bias else 1)
        assert prepacked(weights.mod) == prepacked(full.mod)[:1]  # the weights' buffer (param_0) alone
        assert prepacked(space.apply_for_features(config, rewrite="none").mod) == []
        if not bias:
            assert "weights" not in space.layout_rewrites
            assert tvm_ffi.structural_equal(weights.mod, full.mod)
    with pytest.raises(ValueError, match="rewrite must be"):
        space.apply_for_features(config, rewrite="bias")
