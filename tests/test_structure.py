"""The packages' imports follow the flow: no two stages import each other, the shared top-level modules import no
stage, and no module takes another's private names. Read from the source (``ast``), so it costs no TVM import and
sees imports made at call time too."""

from __future__ import annotations

import ast
import os
from collections import defaultdict

import autosearch

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the installed name of each folder: the plug-in folders install under the autosearch namespace (pyproject.toml)
FOLDERS = {"autosearch": "autosearch", "cost_models": "autosearch.cost_models",
           "strategies": "autosearch.strategies", "workloads": "autosearch.workloads"}
# the sub-packages of autosearch; its top-level modules (types, records, api, cli, ...) are not one package
PACKAGES = ("frontend", "tensor_units", "search", "measure", "deploy", "cost_models", "strategies", "workloads")
# the top-level modules above the stages: the API, the CLI and their printing; the package itself (its names load the
# API's lazily). Every other top-level module is shared by the stages.
ENTRY = ("autosearch", "autosearch.api", "autosearch.cli", "autosearch.console", "autosearch.progress",
         "autosearch.__main__")


def _modules(folders: dict[str, str] = FOLDERS):
    """(installed module name, whether a package's ``__init__``, parsed tree) for every module of ``folders``."""
    for folder, installed in folders.items():
        base = os.path.join(SOURCE, folder)
        for directory, _, files in os.walk(base):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    rel = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                    module = installed if rel == "__init__" else f"{installed}.{rel.removesuffix('.__init__')}"
                    with open(path, encoding="utf-8") as fh:
                        yield module, name == "__init__.py", ast.parse(fh.read(), path)


def _imports(module: str, is_package: bool, tree) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import of ``module``, relative ones resolved."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*parts, *([base] if base else [])])
            out.append((base, [alias.name for alias in node.names]))
    return out


def _package(module: str) -> str | None:
    """The sub-package ``module`` is in, or is (its ``__init__``); None for a top-level module or another library."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "autosearch" and parts[1] in PACKAGES else None


def _package_edges() -> dict[tuple[str, str], set[str]]:
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, is_package, tree in _modules():
        source = _package(module)
        for imported, _ in _imports(module, is_package, tree):
            target = _package(imported)
            if source and target and source != target:
                edges[(source, target)].add(f"{module} -> {imported}")
    return edges


def test_the_module_walk_sees_the_packages_and_their_imports() -> None:
    """The check below is only as good as this walk: it finds the modules under their installed names and the
    imports between packages that are known to be there."""
    modules = {module for module, _, _ in _modules()}
    assert {"autosearch.api", "autosearch.search.tuner", "autosearch.cost_models.xgboost_model"} <= modules
    assert autosearch.__name__ in modules
    edges = _package_edges()
    assert ("search", "frontend") in edges and ("deploy", "frontend") in edges


def test_no_two_packages_import_each_other() -> None:
    """A cycle between two stages means neither can be read, tested or replaced without the other: the flow runs
    frontend -> (tensor_units) -> search -> deploy, measure beside the search, the plug-ins under the search."""
    edges = _package_edges()
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                cycle = [*path[path.index(nxt):], nxt]
                cycles.append(" -> ".join(cycle) + ": " + "; ".join(
                    sorted(edges[(a, b)])[0] for a, b in zip(cycle, cycle[1:], strict=False)))
            elif len(path) < len(PACKAGES):
                visit(nxt, [*path, nxt])

    for package in PACKAGES:
        visit(package, [package])
    assert not cycles, "\n".join(sorted(set(cycles)))


def test_no_stage_imports_the_api_or_the_cli() -> None:
    """The API and the CLI sit on top of the stages; a stage that imported them would run the flow backwards."""
    offenders = [f"{module} -> {imported}" for module, is_package, tree in _modules() if _package(module)
                 for imported, _ in _imports(module, is_package, tree)
                 if imported in ("autosearch.api", "autosearch.cli") or imported.startswith("autosearch.cli.")]
    assert not offenders, offenders


def test_the_shared_top_level_modules_import_no_stage() -> None:
    """The types, the log, the registry, TVM's workarounds and the like sit below every stage, which may import
    them: one of them importing a stage makes a cycle through the top level that the packages' graph does not
    show (``tvm_compat`` took ``host_cores`` from the front end, which imports ``tvm_compat``)."""
    offenders = [f"{module} -> {imported}" for module, is_package, tree in _modules({"autosearch": "autosearch"})
                 if not _package(module) and module not in ENTRY
                 for imported, _ in _imports(module, is_package, tree) if _package(imported)]
    assert not offenders, offenders


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_takes_another_modules_private_names() -> None:
    """A leading underscore says "not part of this module's contract"; a module importing one from another module,
    or reading one off a module it imported, ties itself to what that module may change without notice. The
    experiments are held to it too (they use the library as a researcher's script would); the tests are not."""
    ours = {module for module, _, _ in _modules()}
    offenders = []
    for module, is_package, tree in _modules({**FOLDERS, "experiments": "experiments"}):
        aliases = {}  # local name -> one of our modules
        for imported, names in _imports(module, is_package, tree):
            if imported.startswith("autosearch"):
                offenders += [f"{module}: from {imported} import {name}" for name in names if _private(name)]
            aliases.update({name: f"{imported}.{name}" for name in names if f"{imported}.{name}" in ours})
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in ours})
        offenders += [f"{module}: {aliases[node.value.id]}.{node.attr}" for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                      and node.value.id in aliases and _private(node.attr)]
    assert not offenders, offenders
