"""What ``pip install calibo`` and ``pip install "calibo[server]"`` put into a clean environment.

The wheel is built from this checkout and installed with ``pip --no-deps --no-index`` into fresh
virtual environments (no system site-packages); their dependencies come from this test's own
environment through a ``.pth`` file, so no network is needed:

* the client install sees httpx and its runtime dependencies only: ``from calibo import Client``
  works and nothing of the server side (numpy, torch, pydantic, ...) is importable or imported;
* the server install sees every dependency: the ``calibo`` command, ``calibo.engine``,
  ``calibo.server`` (with its migrations and dashboard files) and Alembic work;
* neither leaves a top-level ``client``, ``service`` or ``migrations`` in site-packages.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SERVER_SIDE = ("numpy", "torch", "lightgbm", "pydantic", "scipy", "sklearn", "fastapi", "service")
FOREIGN_TOP_LEVEL = ("client", "service", "migrations")

CLIENT_CHECK = textwrap.dedent(
    """
    import importlib.util
    import sys

    import calibo
    from calibo import AsyncClient, Client, Study

    Client("http://127.0.0.1:9", token="t").close()
    AsyncClient("http://127.0.0.1:9")  # closing needs a loop; building one is the point
    assert calibo.__file__.startswith(sys.argv[1]), calibo.__file__
    assert not sys.flags.no_site and sys.prefix != sys.base_prefix
    for name in sys.argv[2:]:
        assert importlib.util.find_spec(name) is None, f"{name} is importable"
        assert not any(m == name or m.startswith(name + ".") for m in sys.modules), name
    print("client ok")
    """
)

SERVER_CHECK = textwrap.dedent(
    """
    import sys

    import calibo.server.dashboard as dashboard
    from calibo.engine import Optimizer
    from calibo.server import create_app, Settings
    from calibo.server.migrations import DIRECTORY

    for module in (Optimizer, create_app):
        assert module.__module__.startswith("calibo."), module.__module__
    import calibo.engine, calibo.server
    assert calibo.engine.__file__.startswith(sys.argv[1]), calibo.engine.__file__
    assert (DIRECTORY / "alembic.ini").is_file() and len(list((DIRECTORY / "versions").glob("0*.py"))) >= 5
    assert (dashboard.STATIC / "index.html").is_file() and (dashboard.STATIC / "vendor" / "LICENSE").is_file()
    opt = Optimizer({"x": {"type": "float", "low": 0, "high": 1}}, seed=0, n_warmup=4)
    for _ in range(6):
        s = opt.ask()[0]
        opt.tell(s.params, (s.params["x"] - 0.3) ** 2)
    assert s.prediction is not None
    create_app(Settings(database_url="sqlite:///" + sys.argv[2], workers=0))
    try:
        import calibo.server.engine  # noqa: F401
    except ImportError:
        pass
    else:
        raise AssertionError("the engine must have one import name")
    print("server ok")
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
    name = dist.metadata["Name"]
    return {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if name in dists and module.isidentifier() and importlib.util.find_spec(module)
    }


def _link_into(target: Path, module: str) -> None:
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    source = Path(next(iter(spec.submodule_search_locations))) if spec.submodule_search_locations \
        else Path(spec.origin)
    (target / source.name).symlink_to(source, target_is_directory=source.is_dir())


def _site_packages(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}, scheme="venv"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (found,) = out.glob("calibo-*.whl")
    return found


def _install(tmp: Path, wheel: Path, deps: list[Path]) -> tuple[Path, Path]:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    assert re.search(r"include-system-site-packages\s*=\s*false", (venv / "pyvenv.cfg").read_text())
    site = _site_packages(venv)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                          str(wheel)], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    (site / "calibo-test-deps.pth").write_text("".join(f"{d}\n" for d in deps))
    return venv, site


def _no_foreign_top_level(site: Path) -> None:
    installed = {p.name for p in site.iterdir()}
    assert "calibo" in installed
    assert not installed & set(FOREIGN_TOP_LEVEL), sorted(installed)
    record = next(site.glob("calibo-*.dist-info")) / "RECORD"
    tops = {line.split("/", 1)[0] for line in record.read_text().splitlines()}
    assert {t for t in tops if not t.endswith(".dist-info") and not t.startswith("..")} == {"calibo"}, tops


def test_declared_dependencies_are_httpx_alone(wheel: Path) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert [_requirement_name(r).lower() for r in project["dependencies"]] == ["httpx"]
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        names = z.namelist()
    requires = re.findall(r"^Requires-Dist: (.*)$", meta, flags=re.M)
    assert [_requirement_name(r).lower() for r in requires if not _is_extra(r)] == ["httpx"], requires
    server = {_requirement_name(r).lower() for r in requires if re.search(r"extra\s*==\s*['\"]server", r)}
    assert {"numpy", "torch", "fastapi", "sqlalchemy", "alembic"} <= server, server
    assert {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")} == {"calibo"}


def test_wheel_carries_every_data_file(wheel: Path) -> None:
    """The dashboard's page and vendored assets, and every migration, are in the wheel."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    folders = {"service/dashboard/static": "calibo/server/dashboard/static", "migrations": "calibo/server/migrations"}
    for folder, package in folders.items():
        files = [p for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        assert files
        for f in files:
            assert f"{package}/{f.relative_to(REPO / folder).as_posix()}" in names, f


def test_client_install_imports_with_httpx_alone(tmp_path: Path, wheel: Path) -> None:
    deps = tmp_path / "deps"
    deps.mkdir()
    closure = _runtime_closure("httpx")
    names = {d.metadata["Name"].lower() for d in closure}
    assert {"httpx", "httpcore", "h11", "anyio", "idna", "certifi"} <= names
    assert not names & {"numpy", "torch", "pydantic", "calibo"}, names
    for dist in closure:
        for module in _top_level_modules(dist):
            _link_into(deps, module)
    venv, site = _install(tmp_path, wheel, [deps])
    _no_foreign_top_level(site)
    script = tmp_path / "check.py"
    script.write_text(CLIENT_CHECK)
    result = subprocess.run([str(venv / "bin" / "python"), "-I", str(script), str(site), *SERVER_SIDE],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "client ok"


def test_server_install_runs_the_command_the_engine_and_migrations(tmp_path: Path, wheel: Path) -> None:
    # every dependency of the server extra, from this environment (whose own calibo is an editable
    # install: its finder lives in a .pth file, which a directory added by .pth does not run)
    here = Path(sysconfig.get_path("purelib"))
    venv, site = _install(tmp_path, wheel, [here])
    _no_foreign_top_level(site)
    python = venv / "bin" / "python"
    script = tmp_path / "check.py"
    script.write_text(SERVER_CHECK)
    result = subprocess.run([str(python), "-I", str(script), str(site), str(tmp_path / "app.db")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("server ok")
    calibo = venv / "bin" / "calibo"
    assert calibo.is_file()
    db = tmp_path / "migrated.db"
    migrate = subprocess.run([str(calibo), "migrate", "--database-url", f"sqlite:///{db}"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    tables = subprocess.run([str(python), "-c", "import sqlite3, sys; print(sorted(r[0] for r in sqlite3.connect("
                             "sys.argv[1]).execute(\"select name from sqlite_master where type='table'\")))", str(db)],
                            capture_output=True, text=True, timeout=60)
    assert "studies" in tables.stdout and "trials" in tables.stdout, tables.stdout + tables.stderr
