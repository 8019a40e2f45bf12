"""Faults to inflict during a crowd run, and watching the service through them.

:class:`PgOutage` makes a PostgreSQL database refuse connections for a while;
:class:`HealthMonitor` polls ``/healthz`` on a thread meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx


class PgOutage:
    """Make one PostgreSQL database unreachable (no new connection, every session ended) and back.

    ``admin`` is a libpq conninfo to *another* database of the same server. Used as a
    context manager, connections are allowed again on exit, whatever happened.
    """

    def __init__(self, admin: str, database: str) -> None:
        self.admin = admin.replace("postgresql+psycopg://", "postgresql://")
        self.database = database
        self.began = self.ended = None

    def _exec(self, *sql: tuple[str, tuple]) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True, connect_timeout=10) as c:
            for q, args in sql:
                c.execute(q, args)

    def begin(self) -> float:
        self._exec((f'ALTER DATABASE "{self.database}" WITH ALLOW_CONNECTIONS false', ()),
                   ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                    "AND pid <> pg_backend_pid()", (self.database,)))
        self.began = time.perf_counter()
        return self.began

    def end(self) -> float:
        for attempt in range(10):
            try:
                self._exec((f'ALTER DATABASE "{self.database}" WITH ALLOW_CONNECTIONS true', ()))
                break
            except Exception:  # noqa: BLE001 - keep trying: leaving the database closed is worse
                if attempt == 9:
                    raise
                time.sleep(1.0)
        self.ended = time.perf_counter()
        return self.ended

    def __enter__(self) -> PgOutage:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.began is not None and self.ended is None:
            self.end()


class HealthMonitor:
    """Polls ``/healthz`` every ``interval`` seconds on a thread: ``samples`` (time, status, database
    field), and ``fit_pool`` (time, its fit_pool field) beside them."""

    def __init__(self, base_url: str, clock: Callable[[], float], interval: float = 0.1) -> None:
        self.base_url = base_url
        self.clock = clock
        self.interval = interval
        self.samples: list[tuple[float, int | str, str | None]] = []
        self.fit_pool: list[tuple[float, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="healthz")

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=2.0, trust_env=False) as c:
            while not self._stop.is_set():
                t = self.clock()
                try:
                    r = c.get("/healthz")
                    try:
                        body = r.json()
                    except ValueError:
                        body = {}
                    self.samples.append((t, r.status_code, body.get("database")))
                    self.fit_pool.append((t, body.get("fit_pool")))
                except httpx.HTTPError as e:
                    self.samples.append((t, type(e).__name__, None))
                    self.fit_pool.append((t, None))
                self._stop.wait(self.interval)

    def __enter__(self) -> HealthMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
