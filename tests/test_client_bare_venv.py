"""The client installs and imports with httpx alone.

A fresh virtual environment (no pip, no system site-packages) gets only httpx,
its runtime dependencies and a copy of ``client/``; a script there builds a
Client and an AsyncClient and checks that nothing of the server side (numpy,
torch, lightgbm, pydantic, ``service``) is importable or was imported.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVER_SIDE = ("numpy", "torch", "lightgbm", "pydantic", "service", "scipy", "sklearn")

CHECK = textwrap.dedent(
    """
    import importlib.util
    import sys

    import client
    from client import AsyncClient, Client

    Client("http://127.0.0.1:9", token="t").close()
    AsyncClient("http://127.0.0.1:9")  # closing needs a loop; building one is the point
    assert client.__file__.startswith(sys.argv[1]), client.__file__
    assert not sys.flags.no_site and sys.prefix != sys.base_prefix
    for name in sys.argv[2:]:
        assert importlib.util.find_spec(name) is None, f"{name} is importable"
        assert not any(m == name or m.startswith(name + ".") for m in sys.modules), name
    print("client ok")
    """
)


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return match.group(1)


def _is_extra(requirement: str) -> bool:
    _, _, marker = requirement.partition(";")
    return re.search(r"\bextra\s*==", marker) is not None


def _runtime_closure(root: str) -> list[importlib.metadata.Distribution]:
    """``root`` and every installed distribution it needs at runtime (no extras)."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a conditional dependency for another Python (exceptiongroup...)
        seen[key] = dist
        todo += [_requirement_name(r) for r in dist.requires or [] if not _is_extra(r)]
    return list(seen.values())


def _top_level_modules(dist: importlib.metadata.Distribution) -> set[str]:
    """The importable top-level names a distribution installed."""
    name = dist.metadata["Name"]
    return {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if name in dists and module.isidentifier() and importlib.util.find_spec(module)
    }


def _link_into(target: Path, module: str) -> None:
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    if spec.submodule_search_locations:
        source = Path(next(iter(spec.submodule_search_locations)))
    else:
        assert spec.origin, module
        source = Path(spec.origin)
    (target / source.name).symlink_to(source, target_is_directory=source.is_dir())


def _site_packages(venv: Path) -> Path:
    purelib = sysconfig.get_path(
        "purelib", vars={"base": str(venv), "platbase": str(venv)}, scheme="venv"
    )
    return Path(purelib)


def _base_requirements() -> list[str]:
    """The project's requirements without an ``extra ==`` marker.

    From the installed (editable) metadata when it is current, i.e. declares the
    extras pyproject.toml declares; from pyproject.toml when the install is stale
    or missing, pyproject.toml being the source of truth.
    """
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    try:
        metadata = importlib.metadata.metadata("calibo")
    except importlib.metadata.PackageNotFoundError:
        return list(project["dependencies"])
    if set(metadata.get_all("Provides-Extra") or []) != set(project["optional-dependencies"]):
        return list(project["dependencies"])
    return [r for r in importlib.metadata.requires("calibo") or [] if not _is_extra(r)]


def test_declared_dependencies_are_httpx_alone() -> None:
    base = _base_requirements()
    assert [_requirement_name(r).lower() for r in base] == ["httpx"], base
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert [_requirement_name(r).lower() for r in project["dependencies"]] == ["httpx"]


def test_client_imports_with_httpx_alone(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    python = venv / "bin" / "python"
    config = (venv / "pyvenv.cfg").read_text()
    assert re.search(r"include-system-site-packages\s*=\s*false", config)

    # httpx and what it needs at runtime, as symlinks into one directory
    deps = tmp_path / "deps"
    deps.mkdir()
    closure = _runtime_closure("httpx")
    names = {d.metadata["Name"].lower() for d in closure}
    assert {"httpx", "httpcore", "h11", "anyio", "idna", "certifi"} <= names
    assert not names & {"numpy", "torch", "pydantic", "calibo"}, names
    for dist in closure:
        for module in _top_level_modules(dist):
            _link_into(deps, module)

    # a copy of the repository's client package, on its own
    code = tmp_path / "code"
    shutil.copytree(REPO / "client", code / "client", ignore=shutil.ignore_patterns("__pycache__"))

    site = _site_packages(venv)
    assert site.is_dir(), site
    (site / "calibo-test.pth").write_text(f"{deps}\n{code}\n")

    script = tmp_path / "check.py"
    script.write_text(CHECK)
    result = subprocess.run(
        [str(python), "-I", str(script), str(code), *SERVER_SIDE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "client ok"
