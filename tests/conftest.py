"""Shared fixtures: databases (SQLite file, fresh PostgreSQL database) and live uvicorn servers.

PostgreSQL: ``CALIBO_TEST_PG`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``)
names the server; each test run creates its own database there and drops it at
the end. Without a reachable server the PostgreSQL variants skip, unless
``CALIBO_REQUIRE_PG=1`` (set by .ci/run), where they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

PG_ADMIN = os.environ.get("CALIBO_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_admin_conninfo() -> str:
    return PG_ADMIN.replace("postgresql+psycopg://", "postgresql://")


def _pg_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(_pg_admin_conninfo(), connect_timeout=3):
            return None
    except Exception as e:  # noqa: BLE001 - any failure means: no server to test against
        return f"{type(e).__name__}: {e}"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """Admin URL of a reachable PostgreSQL (skip or fail if there is none)."""
    why = _pg_reachable()
    if why is not None:
        if os.environ.get("CALIBO_REQUIRE_PG") == "1":
            pytest.fail(f"PostgreSQL is required (CALIBO_REQUIRE_PG=1) but unreachable: {why}")
        pytest.skip(f"no PostgreSQL at {PG_ADMIN}: {why}")
    yield PG_ADMIN


class PgDatabases:
    """Creates fresh databases on the server; drops them all at the end of the session."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.names: list[str] = []

    def create(self) -> str:
        import psycopg

        name = f"calibo_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        self.names.append(name)
        base = self.admin.rsplit("/", 1)[0]
        return f"{base}/{name}"

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as c:
            for name in self.names:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_databases(pg_server: str) -> Iterator[PgDatabases]:
    dbs = PgDatabases(pg_server)
    yield dbs
    dbs.drop_all()


def make_database_url(request: pytest.FixtureRequest, backend: str, tmp: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp / f'calibo-{uuid.uuid4().hex[:8]}.db'}"
    return request.getfixturevalue("pg_databases").create()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend."""
    return make_database_url(request, request.param, tmp_path)


# ------------------------------------------------------------------ servers
@dataclass
class LiveServer:
    """A calibo app under a real uvicorn on a free port, in a thread of the test process."""

    database_url: str
    workers: int = 1
    api_tokens: str = ""
    # how long a sequential ask may wait for its fit: generous, as fits run slowly on this 2-core
    # machine when the suite keeps it busy (the fit process itself is warm before start() returns)
    ask_wait_seconds: float = 30.0
    port: int = 0
    settings: dict = field(default_factory=dict)  # other Settings fields

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self._thread: threading.Thread | None = None
        self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        import uvicorn

        from calibo.server.app import create_app
        from calibo.server.config import Settings
        from calibo.server.server import uvicorn_config

        settings = Settings(database_url=self.database_url, workers=self.workers, api_tokens=self.api_tokens,
                            ask_wait_seconds=self.ask_wait_seconds, **self.settings)
        config = uvicorn_config(create_app(settings), settings, "127.0.0.1", self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 120
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"calibo server on {self.url} did not start")
            time.sleep(0.02)
        # ready: /healthz says 200 once the fit processes are warm
        with httpx.Client(base_url=self.url, timeout=5.0) as c:
            while (r := c.get("/healthz")).status_code != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"calibo server on {self.url} not ready: {r.text}")
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(60)
            self._server = None

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60.0, **kw)


@contextlib.contextmanager
def backend_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, label: str,
                   **kw) -> Iterator[LiveServer]:
    """A live server (``LiveServer(**kw)``) on a fresh database of ``request.param``'s backend."""
    url = make_database_url(request, request.param, tmp_path_factory.mktemp(label))
    srv = LiveServer(url, **kw).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session", params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One live server per backend for the whole session; tests use their own studies."""
    url = make_database_url(request, request.param, tmp_path_factory.mktemp("db"))
    srv = LiveServer(url).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live server on SQLite (for client tests)."""
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('client') / 'calibo.db'}").start()
    yield srv
    srv.stop()


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def unique(prefix: str = "study") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"
