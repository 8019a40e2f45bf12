"""Engines and migrations: SQLite (WAL, immediate write transactions) and PostgreSQL."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, text
from sqlalchemy.engine import make_url

from .. import finite

log = logging.getLogger("calibo.storage")

# pg_advisory_xact_lock key that serialises concurrent `upgrade head` of several replicas
_MIGRATION_LOCK = 0x0CA11B0


def json_dumps(obj: Any) -> str:
    """JSON for the database's JSON columns: ``calibo.server.finite.dumps`` (never NaN or infinity,
    never ``-0.0``), so every backend reads back the same numbers."""
    return finite.dumps(obj)


def make_engine(url: str, *, connect_timeout: float = 5.0, **kwargs: Any) -> Engine:
    """An engine for ``url`` with calibo's connection settings.

    SQLite: WAL journal (readers never block the writer), ``synchronous=NORMAL``
    (durable across process crashes), foreign keys on, a long busy timeout, and
    transactions begun by us so that writers can ask for ``BEGIN IMMEDIATE``
    (see :func:`write_engine`): the write lock is then taken at the start, which
    serialises read-modify-write sequences across threads and processes.
    PostgreSQL: connections that fail to open within ``connect_timeout`` seconds
    raise, and pooled ones are pinged before use (a restarted server is reconnected).
    """
    u = make_url(url)
    kwargs.setdefault("json_serializer", json_dumps)
    if u.get_backend_name() == "sqlite":
        connect_args = {"check_same_thread": False, "timeout": 30.0}
        engine = create_engine(url, connect_args=connect_args, **kwargs)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record) -> None:  # pragma: no cover - driver hook
            dbapi_conn.isolation_level = None  # the driver must not BEGIN on its own
            cur = dbapi_conn.cursor()
            if u.database and u.database != ":memory:":
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn) -> None:  # pragma: no cover - driver hook
            conn.exec_driver_sql("BEGIN " + conn.get_execution_options().get("sqlite_begin", "DEFERRED"))

        return engine
    # an unreachable server fails a request in seconds (then 503), not after the OS's TCP timeout
    kwargs.setdefault("connect_args", {"connect_timeout": max(1, round(connect_timeout))})
    kwargs.setdefault("pool_size", 20)
    kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def unreachable(e: BaseException) -> bool:
    """Whether ``e`` says the database could not be reached or dropped the connection.

    Such a failure is the database's, not the request's: the same request may
    work once it is back. Constraint violations, bad SQL and the like are not.
    """
    if isinstance(e, (exc.OperationalError, exc.InterfaceError, exc.TimeoutError)):
        return True  # refused, terminated, "does not allow connections", pool exhausted, SQLite locked
    if isinstance(e, exc.DBAPIError) and e.connection_invalidated:
        return True
    try:
        import psycopg
    except ImportError:  # pragma: no cover - SQLite-only installs
        return False
    return isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError))


def write_engine(engine: Engine) -> Engine:
    """The same pool, with SQLite transactions begun as ``BEGIN IMMEDIATE``."""
    if engine.dialect.name == "sqlite":
        return engine.execution_options(sqlite_begin="IMMEDIATE")
    return engine


def upgrade(engine: Engine) -> None:
    """``alembic upgrade head`` on ``engine`` (serialised across replicas on PostgreSQL)."""
    from alembic import command
    from alembic.config import Config

    from calibo.server.migrations import DIRECTORY

    cfg = Config(str(DIRECTORY / "alembic.ini"))
    cfg.set_main_option("script_location", str(DIRECTORY))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    with write_engine(engine).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    log.info("database schema at head (%s)", engine.url.render_as_string(hide_password=True))
