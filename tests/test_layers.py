"""Import structure: no import cycle and no upward import among calibo's installed modules.

A static scan (ast, nothing imported but the packages' locations): every module of every package
pyproject installs, found where its installed name resolves to. An edge is any ``import`` or ``from
... import`` of another calibo module, inside functions too (a lazy import is still a dependency);
only ``if TYPE_CHECKING:`` blocks are left out. ``from pkg import name`` is an edge to the submodule
``pkg.name`` when there is one, else to ``pkg``'s ``__init__``: so a package whose ``__init__``
imports a submodule that takes a name back from the ``__init__`` is a cycle too.

The layers, top-down: entry (app, cli) > api > studies > workers > metrics > storage > base (config,
errors, logs) > engine, with the client and the Optuna adapter beside them: the engine is pure, the
client imports nothing of the server, the adapter only the engine (DESIGN.md). A module may import its
own layer and the layers below it, never one above. DESIGN.md's request path, api -> storage ->
workers -> engine, persists before it fits; in imports the workers stand above storage, which a fit
job reads the trials from and writes the snapshot to.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The server's stack, top-down. A module's layer is its own entry in MODULES, else its nearest package
# in PACKAGES (a new top-level server module must be placed here: the test says so).
STACK = ["entry", "api", "studies", "workers", "metrics", "storage", "base", "engine"]
PACKAGES = {
    "calibo": "client",  # client/: Client, AsyncClient over httpx
    "calibo.engine": "engine",  # pure computation: numpy, scipy, scikit-learn, lightgbm, torch
    "calibo.optuna": "optuna",  # CaliboSampler: an adapter on the engine, or (remote mode) on the client
    "calibo.server": None,  # the server's top-level modules are placed one by one (MODULES)
    "calibo.server.api": "api",
    "calibo.server.dashboard": "api",
    "calibo.server.studies": "studies",
    "calibo.server.workers": "workers",
    "calibo.server.storage": "storage",
    "calibo.server.migrations": "storage",  # the schema: storage runs it, its env reads storage's models
}
MODULES = {
    "calibo.server": "entry",
    "calibo.server.app": "entry",  # create_app: wires api, studies, workers, storage
    "calibo.server.cli": "entry",
    "calibo.server.server": "entry",  # the uvicorn configuration
    "calibo.server.metrics": "metrics",  # Prometheus: the app's and `calibo worker`'s
    "calibo.server.batching": "base",
    "calibo.server.config": "base",
    "calibo.server.errors": "base",
    "calibo.server.finite": "base",  # the one writer of stored and answered numbers
    "calibo.server.logs": "base",
}
# what each layer may import besides itself: the stack below it; the client and the Optuna adapter
# stand beside the server (the server may read the client's __version__)
ALLOWED = {layer: {layer, *STACK[i + 1:]} | ({"client"} if layer != "engine" else set())
           for i, layer in enumerate(STACK)}
ALLOWED["optuna"] = {"optuna", "engine", "client"}  # the remote mode talks to a server through the client
# the command line serves the Optuna adapter's storage (`calibo optuna-grpc`), as it serves the client's Katib
# service; nothing else of the server imports the adapter
ALLOWED["entry"] = ALLOWED["entry"] | {"optuna"}
ALLOWED["client"] = {"client"}


# ------------------------------------------------------------------ the scan
def installed_modules() -> dict[str, Path]:
    """Every module of the packages pyproject installs, by its installed name, at the file that name
    resolves to (a package by its ``__init__.py``)."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    modules: dict[str, Path] = {}
    for package in packages:
        for folder in _locations(package):
            if (folder / "__init__.py").is_file():
                modules[package] = folder / "__init__.py"
            for f in sorted(folder.glob("*.py")):
                if f.name != "__init__.py":
                    modules[f"{package}.{f.stem}"] = f
    return modules


def _locations(package: str) -> list[Path]:
    """Where ``package`` is installed, found as the import system finds it, without running any
    package's ``__init__`` (``importlib.util.find_spec`` would import the parents)."""
    parent, _, child = package.rpartition(".")
    path = _locations(parent) if parent else None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            spec = find(package, None if path is None else [str(p) for p in path]) if find else None
        except KeyError:  # a namespace package's path wants its parent imported: found below instead
            continue
        if spec is not None and spec.submodule_search_locations is not None:
            return [Path(p) for p in spec.submodule_search_locations]
    namespace = [p / child for p in path or [] if (p / child).is_dir()]  # a folder with no __init__.py
    assert namespace, f"{package} (pyproject's packages) is not installed: pip install -e ."
    return namespace


def repo_modules(folder: Path, package: str) -> dict[str, Path]:
    """The modules of a package in the repository (not installed), by dotted name."""
    modules: dict[str, Path] = {}
    for f in sorted(folder.rglob("*.py")):
        rel = f.relative_to(folder)
        if not all((folder / Path(*rel.parts[:i]) / "__init__.py").is_file() for i in range(len(rel.parts))):
            continue  # a folder of data or scripts inside it, not a subpackage
        parts = [package, *rel.with_suffix("").parts]
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for other in node.orelse:
                if isinstance(other, ast.Import | ast.ImportFrom):
                    yield other
                yield from _imports(other)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node)


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """``{module: {imported module: line of its first import}}`` among ``modules``."""

    def known(name: str) -> str | None:  # the module itself, else its nearest package among them
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    source = ".".join([*base, node.module] if node.module else base)
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else known(source)
                           for a in node.names]
            for target in targets:
                if target is not None and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, {}))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def describe_cycles(found: list[list[str]], graph: dict[str, dict[str, int]],
                    modules: dict[str, Path]) -> str:
    lines = []
    for component in found:
        lines.append(f"import cycle among {', '.join(component)}:")
        members = set(component)
        for name in component:
            for target, line in sorted(graph[name].items()):
                if target in members:
                    lines.append(f"  {_where(modules[name], line)}: {name} imports {target}")
    return "\n".join(lines)


def _where(path: Path, line: int) -> str:
    try:
        path = path.relative_to(ROOT)
    except ValueError:
        pass
    return f"{path}:{line}"


def layer_of(module: str) -> str | None:
    if module in MODULES:
        return MODULES[module]
    name = module
    while name:
        if name in PACKAGES:
            return PACKAGES[name]
        name = name.rpartition(".")[0]
    return None


def upward_imports(graph: dict[str, dict[str, int]], modules: dict[str, Path]) -> Iterable[str]:
    for name in sorted(graph):
        layer = layer_of(name)
        for target, line in sorted(graph[name].items()):
            other = layer_of(target)
            if layer is not None and other is not None and other not in ALLOWED[layer]:
                yield (f"{_where(modules[name], line)}: {name} ({layer}) imports {target} ({other}); "
                       f"{layer} may import {', '.join(sorted(ALLOWED[layer]))}")


# ------------------------------------------------------------------ the checks
@pytest.fixture(scope="module")
def calibo() -> tuple[dict[str, Path], dict[str, dict[str, int]]]:
    modules = installed_modules()
    return modules, import_graph(modules)


def test_the_scan_sees_every_installed_module(calibo) -> None:
    modules, graph = calibo
    for name in ("calibo", "calibo._core", "calibo.engine", "calibo.engine.surrogates.qgp", "calibo.optuna",
                 "calibo.server.app", "calibo.server.storage.repo", "calibo.server.migrations.env"):
        assert name in modules, name
    assert modules["calibo.engine.surrogates.qgp"].parent == modules["calibo.engine.surrogates"].parent
    assert not [m for m in modules if m.startswith(("calibo.server.engine", "calibo.server.optuna"))]
    # a subpackage pyproject forgot would be missing from the install, and from this scan
    folders = {p.parent for p in modules.values()}
    for folder in folders:
        for sub in folder.iterdir():
            if (sub / "__init__.py").is_file():
                assert sub in folders, f"{sub} has an __init__.py but is no installed package (pyproject)"
    assert "calibo.engine.surrogates.base" in graph["calibo.engine.surrogates.qe"]


def test_no_import_cycle(calibo) -> None:
    modules, graph = calibo
    found = cycles(graph)
    assert not found, "\n" + describe_cycles(found, graph, modules)


def test_every_module_has_a_layer(calibo) -> None:
    modules, _ = calibo
    unplaced = sorted(m for m in modules if layer_of(m) is None)
    assert not unplaced, f"place these in tests/test_layers.py's MODULES: {unplaced}"


def test_no_upward_import(calibo) -> None:
    modules, graph = calibo
    upward = list(upward_imports(graph, modules))
    assert not upward, "\n" + "\n".join(upward)


def test_the_benchmarks_have_no_import_cycle() -> None:
    modules = repo_modules(ROOT / "benchmarks", "benchmarks")
    assert "benchmarks" in modules
    graph = import_graph(modules)
    found = cycles(graph)
    assert not found, "\n" + describe_cycles(found, graph, modules)


# ------------------------------------------------------------------ the scan itself
def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        f = tmp_path / "pkg" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return repo_modules(tmp_path / "pkg", "pkg")


def test_the_scan_finds_cycles_through_a_package_init(tmp_path: Path) -> None:
    modules = _package(tmp_path, {
        "__init__.py": "from .a import A\nfrom .b import B\n",
        "a.py": "def f():\n    from . import B  # a name of the __init__, imported lazily\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nB = 1\n",
        "sub/__init__.py": "",
        "sub/c.py": "from .. import b\nfrom ..b import B\nimport pkg.sub.d\n",
        "sub/d.py": "from pkg.sub import c\n",
        "data/e.py": "import pkg\n",  # no __init__.py: not a module of the package
    })
    assert "pkg.data.e" not in modules
    graph = import_graph(modules)
    assert graph["pkg"] == {"pkg.a": 1, "pkg.b": 2}
    assert graph["pkg.a"] == {"pkg": 2}
    assert graph["pkg.b"] == {}  # TYPE_CHECKING only
    assert graph["pkg.sub.c"] == {"pkg.b": 1, "pkg.sub.d": 3}
    assert graph["pkg.sub.d"] == {"pkg.sub.c": 1}
    assert sorted(cycles(graph)) == [["pkg", "pkg.a"], ["pkg.sub.c", "pkg.sub.d"]]
    assert "pkg/a.py:2: pkg.a imports pkg" in describe_cycles(cycles(graph), graph, modules)


def test_an_upward_import_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    graph = {"calibo.engine.x": {"calibo.server.storage.repo": 7}, "calibo.server.storage.repo": {},
             "calibo.server.api.routes": {"calibo.engine.x": 3}}
    modules = {m: tmp_path / f"{m}.py" for m in graph}
    (problem,) = upward_imports(graph, modules)
    assert problem.startswith(f"{tmp_path / 'calibo.engine.x.py'}:7: calibo.engine.x (engine) imports "
                              "calibo.server.storage.repo (storage)")
