"""Servers for the service suites: fresh databases, frozen code, ``calibo serve`` / ``calibo worker``
processes, and a study driven over HTTP.

* :func:`database` / :func:`pg_database`: a fresh SQLite file or PostgreSQL database (dropped after);
* :func:`freeze_code`: the server's code copied out of the checkout (at HEAD, a revision, or the
  work tree), laid out as the installed ``calibo`` namespace, so edits made while a benchmark runs
  never reach its servers, and a base revision can run beside HEAD;
* :func:`calibo_process` / :func:`calibo_server`: ``calibo <args>`` in its own process group, ready
  when it says so, stopped (group and all) on exit;
* :class:`Calibo`: a running server's study API (create, preload, wait for the fit, an ask+tell pair).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness.tasks import TASKS, Task
from benchmarks.harness.timing import PairFn, log

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def terminate(signum: int, _frame: Any) -> None:
    """A signal handler: SIGTERM stops a suite as Ctrl-C does (its servers are stopped on the way out)."""
    raise KeyboardInterrupt(f"signal {signum}")


def versions() -> dict[str, str]:
    """The versions of what a service row ran on: Python, calibo, Optuna, PostgreSQL, SQLite..."""
    import platform
    import sqlite3
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("calibo", "optuna", "sqlalchemy", "psycopg", "httpx", "fastapi", "uvicorn", "torch",
                "numpy", "scikit-learn"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    with contextlib.suppress(Exception):
        import psycopg

        with psycopg.connect(PG_ADMIN) as c:
            out["postgresql_server"] = str(c.execute("SHOW server_version").fetchone()[0])
    out["sqlite"] = sqlite3.sqlite_version
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def pg_database(name: str) -> Iterator[str]:
    """A fresh PostgreSQL database, dropped (WITH FORCE) afterwards; yields its URL."""
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        for attempt in range(5):  # the server may hold every connection slot for a moment longer
            try:
                with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except Exception as e:  # reported, never masks the run's own error
                if attempt == 4:
                    log(f"could not drop database {name}: {e!r}; drop it by hand")
                else:
                    time.sleep(2.0)


@contextlib.contextmanager
def database(backend: str, tmp: Path, label: str) -> Iterator[str]:
    """A fresh database URL for ``backend`` (SQLAlchemy form, driver-less for PostgreSQL)."""
    if backend == "sqlite":
        path = tmp / f"{label}.db"
        yield f"sqlite:///{path}"
    else:
        with pg_database(f"calibo_bench_{label}_{os.getpid()}_{uuid.uuid4().hex[:6]}") as url:
            yield url


# The repository's folders and the names they install under (pyproject.toml's package-dir):
# a frozen copy is laid out as the installed namespace, so `python -m calibo.server.cli` run from it
# imports the frozen code, not the checkout's.
NAMESPACE = (("client", "calibo"), ("service", "calibo/server"), ("service/engine", "calibo/engine"),
             ("service/optuna", "calibo/optuna"), ("migrations", "calibo/server/migrations"))
FROZEN = ("service", "client", "migrations", "pyproject.toml")


def freeze_code(dest: Path, source: str) -> dict[str, Any]:
    """Copy the server's code to ``dest``, laid out as the ``calibo`` namespace; servers then run from it.

    ``source="head"``: as committed at HEAD (``git archive``), or at any other revision given;
    ``"worktree"``: the files as they are now. Either way, edits made to the checkout while the
    benchmark runs do not reach its servers. A revision from before the ``calibo`` namespace keeps
    its ``service`` / ``migrations`` layout (``cli_module`` says which to run).
    """
    import hashlib
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    tree = dest / ".tree"
    if source != "worktree":  # "head", or any revision git knows
        rev = "HEAD" if source == "head" else source
        listed = subprocess.run(["git", "ls-tree", "--name-only", rev], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.split()
        archive = subprocess.run(["git", "archive", rev, *[p for p in FROZEN if p in listed]], cwd=ROOT,
                                 capture_output=True, check=True)
        tree.mkdir()
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    else:
        for p in FROZEN:
            if (ROOT / p).is_dir():
                shutil.copytree(ROOT / p, tree / p, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(ROOT / p, tree / p)
    if '"calibo.server" = "service"' in (tree / "pyproject.toml").read_text():  # the calibo namespace
        for folder, package in NAMESPACE:
            inner = {f.rsplit("/", 1)[1] for f, _ in NAMESPACE if f.startswith(folder + "/")}  # engine, optuna
            if (tree / folder).is_dir():
                shutil.copytree(tree / folder, dest / package, dirs_exist_ok=True,
                                ignore=lambda d, names, top=tree / folder, inner=inner:
                                {n for n in names if n in ("__pycache__",) or n.endswith(".pyc")
                                 or (Path(d) == top and n in inner)})
    else:
        for p in ("service", "migrations"):
            shutil.move(str(tree / p), str(dest / p))
    shutil.rmtree(tree)
    digest = hashlib.sha256()
    files = sorted(f for f in dest.rglob("*") if f.is_file())
    for f in files:
        digest.update(str(f.relative_to(dest)).encode() + b"\0" + f.read_bytes())
    info: dict[str, Any] = {"source": source, "files": len(files), "sha256": digest.hexdigest()}
    if source in ("head", "worktree"):
        return info | git_state(FROZEN)
    rev = subprocess.run(["git", "rev-parse", source], cwd=ROOT, capture_output=True, text=True, timeout=10)
    return info | {"git_commit": rev.stdout.strip()}


def cli_module(code: Path | None) -> str:
    """The module that runs ``calibo`` from frozen ``code`` (or the checkout's install)."""
    return "service.cli" if code is not None and (code / "service").is_dir() else "calibo.server.cli"


def git_state(paths: tuple[str, ...] = FROZEN) -> dict[str, Any]:
    """The checkout's commit, and whether ``paths`` differ from it (empty when git cannot say)."""
    info: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        git = ["git", "-C", str(ROOT)]
        info["git_commit"] = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                            timeout=10).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--", *paths], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
        info["worktree_differs_from_head"] = bool(changed)
    return info


@contextlib.contextmanager
def calibo_process(args: list[str], logfile: Path, what: str, ready: Callable[[], bool],
                   code: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120.0,
                   prefix: tuple[str, ...] = ()) -> Iterator[subprocess.Popen]:
    """``calibo <args>`` in its own process group, output to ``logfile``, once ``ready()`` says so;
    stopped (group and all) on exit. Its environment has no ``CALIBO_*`` but ``env``.

    ``code``: a directory holding a frozen ``calibo`` package to run (see :func:`freeze_code`); it
    shadows the checkout's because the process starts there (``python -m``
    puts its working directory first on ``sys.path``, and spawned fit workers inherit it).
    ``prefix``: a command it runs under (``nice -n 10``).
    """
    cmd = [*prefix, sys.executable, "-m", cli_module(code), *args]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CALIBO_")} | (env or {})
    with open(logfile, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=code or ROOT, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}:\n{tail(logfile)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready in {timeout:g} s:\n{tail(logfile)}")
            time.sleep(0.2)
        yield proc
    finally:
        stop_group(proc)


@contextlib.contextmanager
def calibo_server(url: str, tmp: Path, label: str, workers: int, code: Path | None = None,
                  env: dict[str, str] | None = None) -> Iterator[tuple[str, Path, int]]:
    """``calibo serve`` on a free port (see :func:`calibo_process`), ready once /healthz answers 200.

    ``env``: variables added to the server's environment, e.g. ``{"CALIBO_WORKER_MODE": "queue"}``.
    """
    import httpx

    port = free_port()
    logfile = tmp / f"server-{label}.log"
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=2.0, trust_env=False) as c:
        def healthy() -> bool:
            try:
                return c.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--database-url", url, "--workers", str(workers)]
        with calibo_process(args, logfile, "calibo serve", healthy, code, env) as proc:
            yield base, logfile, proc.pid


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server (uvicorn shuts down, and its fit pool), then SIGKILL to what is left of its group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            log("calibo serve ignored SIGTERM for 20 s; killing it")
    with contextlib.suppress(ProcessLookupError):  # fit workers left behind, if any
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class Calibo:
    """A running calibo server, driven over HTTP."""

    def __init__(self, base: str, task: Task | None = None, objectives: int = 1) -> None:
        import httpx

        self.base = base
        self.task = task or TASKS["hartmann6"]
        self.objectives = objectives  # 2: studies of two objectives (the task's and a distance)
        self.http = httpx.Client(base_url=base, timeout=120.0, trust_env=False)

    def told(self, params: dict[str, Any]) -> dict[str, Any]:
        """A tell's body: the value, or with two objectives two values (the task's and the squared
        distance to the centre of the space, which pull apart)."""
        v = float(self.task.objective(params))
        if self.objectives == 1:
            return {"value": v}
        return {"values": [v, float(sum((params[k] - 0.5) ** 2 for k in sorted(params)))]}

    def client(self):
        import httpx

        return httpx.Client(base_url=self.base, timeout=120.0, trust_env=False)

    def close(self) -> None:
        self.http.close()

    def create(self, name: str, seed: int, candidates: int, **settings: Any) -> int:
        body = {"name": name, "space": self.task.space, "seed": seed,
                "settings": {"n_candidates": candidates, **settings},
                **({"direction": self.task.direction} if self.objectives == 1
                   else {"directions": ["minimize"] * self.objectives})}
        r = self.http.post("/v1/studies", json=body)
        check(r)
        return int(r.json()["id"])

    def view(self, sid: int) -> dict[str, Any]:
        r = self.http.get(f"/v1/studies/{sid}")
        check(r)
        return r.json()

    def preload(self, sid: int, n: int, batch: int, desc: str) -> float:
        from tqdm import tqdm

        t0 = time.perf_counter()
        with tqdm(total=n, desc=desc, leave=False, file=sys.stderr) as bar:
            done = 0
            while done < n:
                r = self.http.post(f"/v1/studies/{sid}/ask",
                                   json={"count": min(batch, n - done), "worker_id": "preload"})
                check(r)
                for t in r.json()["trials"]:
                    check(self.http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json=self.told(t["params"])))
                    done += 1
                    bar.update()
        return time.perf_counter() - t0

    def wait_fitted(self, sid: int, timeout: float = 300.0) -> dict[str, Any]:
        """Until the newest fit covers every completed trial and no fit is running or queued."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.view(sid)
            s = v["surrogate_status"]
            if s["fitted_on"] >= v["trials"]["complete"] and not s["fitting"] and not s["queued"]:
                return v
            if time.monotonic() > deadline:
                raise RuntimeError(f"study {sid}: no fit covering {v['trials']['complete']} trials "
                                   f"after {timeout:.0f} s: {s}")
            time.sleep(0.1)

    def pair_fn(self, http: Any, sid: int, worker_id: str) -> PairFn:
        ask_path = f"/v1/studies/{sid}/ask"
        body = {"count": 1, "worker_id": worker_id}

        def pair() -> tuple[float, float]:
            t = time.perf_counter()
            r = http.post(ask_path, json=body)
            a = time.perf_counter() - t
            check(r)
            trial = r.json()["trials"][0]
            result = self.told(trial["params"])
            t = time.perf_counter()
            r = http.post(f"/v1/studies/{sid}/trials/{trial['id']}/tell", json=result)
            b = time.perf_counter() - t
            check(r)
            return a, b

        return pair


def check(r: Any) -> None:
    if r.status_code >= 400:
        raise RuntimeError(f"{r.request.method} {r.request.url.path} -> {r.status_code}: {r.text[:300]}")


def fit_status(view: dict[str, Any]) -> dict[str, Any]:
    s = view["surrogate_status"]
    return {"complete": view["trials"]["complete"], "running": view["trials"]["running"],
            "fitted_on": s["fitted_on"], "fit_seconds": s["fit_seconds"], "method": s["method"],
            "last_error": s["last_error"]}


def server_env(args: argparse.Namespace) -> dict[str, str]:
    """``--server-env KEY=VALUE`` (repeatable): settings of the calibo server, e.g.
    ``CALIBO_RATE_LIMIT=100000/second`` to time every request through the rate limiter."""
    return parse_server_env(args.server_env)


def parse_server_env(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("CALIBO_"):
            sys.exit(f"--server-env {item!r}: expected CALIBO_NAME=value")
        out[key] = value
    return out
