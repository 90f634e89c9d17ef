"""The plug-in registry (:mod:`autosearch.plugins`): every built-in of each entry-point group is listed, an unknown
name is the same one-line error as before the registry, and a plug-in another distribution declares is found
without editing the core. Pure Python: no model is trained, no kernel built."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from importlib import metadata

import pytest

from autosearch import plugins
from autosearch.errors import UserError

BUILTINS = {
    plugins.STRATEGIES: {"random", "annealing", "optuna", "coordinate_descent"},
    plugins.COST_MODELS: {"xgb", "xgb-rank", "rf", "gbr", "mlp", "tvm-xgb", "tvm-mlp", "seq", "mlp-rank", "blend",
                          "sklearn:", "pretrained"},
    plugins.WORKLOADS: {"tiny-yolov2", "yolov3-tiny", "yolov8n", "yolo11n"},
    plugins.RUNNERS: {"local", "ray"},
}


TOY_DISTRIBUTION = "autosearch-toy-plugin"


@pytest.fixture(autouse=True)
def _autosearch_plugins_only():
    """These tests are about autosearch's own registry: the plug-ins of other installed distributions (CI installs
    examples/autosearch-restarts) are hidden, as if not installed, except the toy one a test installs. Patched apart
    from each test's ``monkeypatch``, which a test may undo. The registry's last read is forgotten before and after:
    it was read from unpatched metadata, which the patch does not mark as changed."""
    installed = metadata.entry_points

    def entry_points(**params):
        found = installed(**params)
        if params.get("group") not in plugins.GROUPS:
            return found
        return metadata.EntryPoints(ep for ep in found
                                    if ep.dist is None or ep.dist.name in ("autosearch", TOY_DISTRIBUTION))

    plugins._read.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metadata, "entry_points", entry_points)
        yield
    plugins._read.cache_clear()


def _one_line_error(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as err:
        call(*args, **kwargs)
    assert "\n" not in str(err.value)
    return str(err.value)


# ---------------------------------------------------------------------------------------------- built-ins
@pytest.mark.parametrize("group", plugins.GROUPS)
def test_the_registry_lists_every_built_in(group: str) -> None:
    assert BUILTINS[group] <= set(plugins.names(group))
    for name in BUILTINS[group]:
        ep = plugins.entry_point(group, name)
        # in the package the group is named after (the runners: in the core's measure package, beside what they
        # share), and the module defines what the entry point names (read from its source: importing every
        # built-in would import Optuna, Ray, XGBoost, PyTorch)
        assert ep.module.startswith("autosearch.measure." if group == plugins.RUNNERS else f"{group}."), ep
        spec = importlib.util.find_spec(ep.module)
        with open(spec.origin, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        assert ep.attr in {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}, ep


def test_the_core_registries_are_views_of_the_registry() -> None:
    import autosearch.strategies
    from autosearch.api import RUNNERS
    from autosearch.frontend.importer import BUILTIN_MODELS
    from autosearch.search.cost_model import COST_MODELS, FEATURE_SETS
    from autosearch.search.strategy import STRATEGIES

    assert set(STRATEGIES) == set(plugins.names(plugins.STRATEGIES))
    assert set(COST_MODELS) == set(plugins.names(plugins.COST_MODELS))
    assert set(BUILTIN_MODELS) == set(plugins.names(plugins.WORKLOADS))
    assert set(RUNNERS) == set(plugins.names(plugins.RUNNERS))
    # the values the callers read, as before the registry: the module of a strategy, "module:function" otherwise
    assert STRATEGIES["optuna"] == "autosearch.strategies.optuna_search"
    assert COST_MODELS["sklearn:"] == "autosearch.cost_models.sklearn_model:create"
    assert BUILTIN_MODELS["yolov8n"] == "autosearch.workloads.yolov8n:build"
    assert RUNNERS["ray"] == "autosearch.measure.ray_pool:create"
    assert FEATURE_SETS == ("loop", "pooled", "pooled+loop", "asm", "loop+asm", "encoding",
                            "sequence", "sequence+loop", "sequence+loop+asm")
    assert autosearch.strategies.__all__ == ["CoordinateDescent", "OptunaSearch", "RandomSearch", "SimulatedAnnealing"]


# ---------------------------------------------------------------------------------------------- unknown names
def test_an_unknown_name_is_the_same_one_line_error() -> None:
    from autosearch.frontend.importer import build_model, load_onnx
    from autosearch.search.cost_model import make_cost_model
    from autosearch.search.strategy import make_strategy, strategy_options

    strategies = "unknown strategy 'hillclimb'; valid strategies: annealing, coordinate_descent, optuna, random"
    assert _one_line_error(make_strategy, "hillclimb", None, seed=0) == strategies
    assert _one_line_error(strategy_options, "hillclimb") == strategies
    assert _one_line_error(make_cost_model, "magic") == (
        "unknown cost model 'magic'; valid cost models: blend, gbr, mlp, mlp-rank, pretrained, rf, seq, tvm-mlp, "
        "tvm-xgb, xgb, xgb-rank, sklearn:<Regressor>, <model>@<features>, <directory>, none")
    assert _one_line_error(make_cost_model, "xgb@tokens") == (
        "cost model 'xgb@tokens': the feature set after '@' must be one of loop, pooled, pooled+loop, asm, loop+asm, "
        "encoding, sequence, sequence+loop, sequence+loop+asm")
    assert _one_line_error(build_model, "yolov99") == (
        "unknown built-in model 'yolov99'; built-in models: tiny-yolov2, yolo11n, yolov3-tiny, yolov8n")
    assert _one_line_error(load_onnx, "yolov99") == (
        "unknown model 'yolov99'; built-in models: tiny-yolov2, yolo11n, yolov3-tiny, yolov8n, or a path to an .onnx "
        "file")
    from autosearch.api import make_runner

    assert _one_line_error(make_runner, "gpu", None) == "unknown runner 'gpu'; valid runners: local, ray"


def test_stale_metadata_is_a_one_line_error(monkeypatch) -> None:
    """An old autosearch.egg-info in the working directory shadows the installed metadata: no built-ins at all."""
    from autosearch.search.strategy import make_strategy

    monkeypatch.setattr(metadata, "entry_points", lambda **params: metadata.EntryPoints([]))
    plugins._read.cache_clear()  # the patch is not an install: the registry would not read again
    assert "no plug-ins in the entry-point group 'autosearch.strategies'" in _one_line_error(
        make_strategy, "random", None, seed=0)


# ---------------------------------------------------------------------------------------------- a new plug-in
TOY_MODULE = "autosearch_toy_plugin"
TOY_SOURCE = '''
from autosearch.search.strategy import Option

OPTIONS = {"step": Option("how far a move goes", 1, int)}
AUTO_GUIDANCE = True


class Toy:
    def __init__(self, space, *, seed, cost_model=None, task_id="", step=1):
        self.space, self.seed, self.step = space, seed, step

    def ask(self, n):
        return []

    def tell(self, configs, results):
        pass

    def resume(self, configs, results):
        pass


class ToyModel:
    def __init__(self, name, seed):
        self.name, self.seed = name, seed


def create(name, *, seed=0):
    return ToyModel(name, seed)


def build(*, seed=0):
    return ("toy graph", seed)


def create_runner(target, measure, *, seed=0, step=1):
    return ("toy runner", target, measure.repeat, seed, step)
'''


@pytest.fixture
def toy_plugin(tmp_path, monkeypatch):
    """A module and its distribution's metadata, entry points in all three groups, in a directory put on the path
    while the process runs: as ``pip install --target`` leaves a plug-in distribution."""
    (tmp_path / f"{TOY_MODULE}.py").write_text(TOY_SOURCE)
    plugins.names(plugins.STRATEGIES)  # read before the install: the install must be seen all the same
    monkeypatch.syspath_prepend(str(tmp_path))
    info = tmp_path / f"{TOY_MODULE}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {TOY_DISTRIBUTION}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.STRATEGIES}]\ntoy = {TOY_MODULE}:Toy\n\n"
                                           f"[{plugins.COST_MODELS}]\ntoy = {TOY_MODULE}:create\n\n"
                                           f"[{plugins.WORKLOADS}]\ntoy-net = {TOY_MODULE}:build\n\n"
                                           f"[{plugins.RUNNERS}]\ntoy = {TOY_MODULE}:create_runner\n")
    yield info
    sys.modules.pop(TOY_MODULE, None)


def test_a_plug_in_added_at_run_time_is_found_without_editing_the_core(toy_plugin) -> None:
    from autosearch.frontend.importer import BUILTIN_MODELS, build_model, load_onnx
    from autosearch.search.cost_model import COST_MODELS, cost_model_names, make_cost_model
    from autosearch.search.strategy import STRATEGIES, guided_by_default, make_strategy, strategy_options

    assert STRATEGIES["toy"] == TOY_MODULE and "toy" in plugins.names(plugins.STRATEGIES)
    assert list(strategy_options("toy")) == ["step"] and guided_by_default("toy")
    strategy = make_strategy("toy", "a space", seed=3, step="2")  # options parsed by the plug-in's own table
    assert (type(strategy).__name__, strategy.space, strategy.seed, strategy.step) == ("Toy", "a space", 3, 2)
    assert "optuna, random, toy" in _one_line_error(make_strategy, "hillclimb", None, seed=0)

    assert COST_MODELS["toy"] == f"{TOY_MODULE}:create" and "toy" in cost_model_names()
    model = make_cost_model("toy", seed=4)
    assert (type(model).__name__, model.name, model.seed) == ("ToyModel", "toy", 4)
    assert _one_line_error(make_cost_model, "toy@loop") == "cost model 'toy' has its own input; it takes no '@loop'"

    assert BUILTIN_MODELS["toy-net"] == f"{TOY_MODULE}:build"
    assert build_model("toy-net", seed=5) == ("toy graph", 5)
    assert load_onnx("toy-net", seed=6) == ("toy-net", ("toy graph", 6))

    from autosearch.api import RUNNERS, MeasureOptions, make_runner

    assert RUNNERS["toy"] == f"{TOY_MODULE}:create_runner"
    made = make_runner("toy", "a target", MeasureOptions(repeat=4), seed=7, options={"step": "2"})  # its table's type
    assert made == ("toy runner", "a target", 4, 7, 2)
    assert _one_line_error(make_runner, "toy", None, options={"leap": "1"}) == (
        "runner 'toy' has no option 'leap'; its options: step")
    assert "local, ray, toy" in _one_line_error(make_runner, "rpc", None)


def test_a_plug_in_gone_is_gone(toy_plugin) -> None:
    """Uninstalled (its metadata directory removed) while the process runs: the next look-up no longer finds it."""
    from autosearch.search.strategy import STRATEGIES

    assert "toy" in STRATEGIES
    shutil.rmtree(toy_plugin)
    assert "toy" not in STRATEGIES and set(STRATEGIES) == BUILTINS[plugins.STRATEGIES]


def test_the_metadata_is_read_again_only_when_an_install_changed_it(tmp_path, monkeypatch) -> None:
    """A model's set-up looks names up for each of its tasks: one read of the installed metadata per group serves
    them all, until a directory on the path changes (a distribution installed or removed there)."""
    reads = []
    patched = metadata.entry_points

    def counted(**params):
        reads.append(params.get("group"))
        return patched(**params)

    monkeypatch.setattr(metadata, "entry_points", counted)
    monkeypatch.syspath_prepend(str(tmp_path))
    for _ in range(5):
        assert set(plugins.names(plugins.STRATEGIES)) == BUILTINS[plugins.STRATEGIES]
    assert reads == [plugins.STRATEGIES]
    (tmp_path / "other-1.0.dist-info").mkdir()
    assert set(plugins.names(plugins.STRATEGIES)) == BUILTINS[plugins.STRATEGIES]
    assert reads == [plugins.STRATEGIES] * 2
