"""Storage: the service's database, its sessions and the per-study lock.

Storage gathers the queries of ``studies``, ``trials`` and ``fits``; a locked
transaction's reads and writes are ``tx.StudyTx``'s. Reads run in ordinary transactions. Every
read-modify-write of a study (ask, tell, saving a snapshot) runs inside :meth:`Storage.locked`,
which holds the study's lock for the whole transaction: ``SELECT ... FOR UPDATE`` on the study
row on PostgreSQL; on SQLite a ``BEGIN IMMEDIATE`` transaction (the database's
write lock, which also holds across processes) taken behind a process-local
mutex, so that threads queue on the mutex instead of in SQLite's sleeping busy
handler.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, defer

from ..errors import NotFound, Unavailable
from ..logs import Throttled, one_line
from .db import make_engine, unreachable, upgrade, write_engine
from .fits import FitQueries
from .models import StudyRow
from .studies import StudyQueries
from .trials import TrialQueries
from .tx import StudyTx

log = logging.getLogger("calibo.storage")

_outages = Throttled(log)


@contextmanager
def _reachable() -> Iterator[None]:
    """Turn "the database is unreachable" into Unavailable (503), logged once per kind per interval."""
    try:
        yield
    except Exception as e:
        if not unreachable(e):
            raise
        _outages.log(logging.WARNING, type(e).__name__, "database unreachable: %s", one_line(e))
        raise Unavailable("the database is unreachable; retry after the Retry-After delay") from e


class Storage(StudyQueries, TrialQueries, FitQueries):
    """The service's database. Thread-safe; one per process."""

    def __init__(self, url: str, *, migrate: bool = True, engine: Engine | None = None,
                 connect_timeout: float = 5.0) -> None:
        self.engine = engine if engine is not None else make_engine(url, connect_timeout=connect_timeout)
        self.wengine = write_engine(self.engine)
        self.dialect = self.engine.dialect.name
        self._sqlite_writer = threading.Lock() if self.dialect == "sqlite" else None
        if migrate:
            upgrade(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------ sessions
    @contextmanager
    def _read(self) -> Iterator[Session]:
        with _reachable(), Session(self.engine, expire_on_commit=False) as s:
            yield s

    @contextmanager
    def _write(self) -> Iterator[Session]:
        lock = self._sqlite_writer
        if lock is not None:
            lock.acquire()
        try:
            with _reachable(), Session(self.wengine, expire_on_commit=False) as s, s.begin():
                yield s
        finally:
            if lock is not None:
                lock.release()

    def ping(self) -> None:
        """Raise Unavailable unless the database answers a trivial query."""
        with self._read() as s:
            s.execute(text("SELECT 1"))

    @contextmanager
    def locked(self, study_id: int) -> Iterator[StudyTx]:
        """A write transaction holding ``study_id``'s lock; commits on success."""
        with self._write() as s:
            # the definition is immutable and cached by the caller: not loaded on the hot path
            q = select(StudyRow).where(StudyRow.id == study_id).options(defer(StudyRow.definition))
            if self.dialect == "postgresql":
                q = q.with_for_update()
            row = s.scalar(q)
            if row is None:
                raise NotFound(f"study {study_id} not found", field="study")
            yield StudyTx(s, row)
