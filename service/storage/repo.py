"""All of calibo's SQL: studies, trials, snapshots, learning-curve reports.

Reads run in ordinary transactions. Every read-modify-write of a study (ask,
tell, saving a snapshot) runs inside :meth:`Storage.locked`, which holds the
study's lock for the whole transaction: ``SELECT ... FOR UPDATE`` on the study
row on PostgreSQL; on SQLite a ``BEGIN IMMEDIATE`` transaction (the database's
write lock, which also holds across processes) taken behind a process-local
mutex, so that threads queue on the mutex instead of in SQLite's sleeping busy
handler.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer

from ..errors import Conflict, NotFound, Unavailable
from ..logs import Throttled, one_line
from .db import make_engine, unreachable, upgrade, write_engine
from .models import FINISHED_STATES, TRIAL_STATES, IntermediateRow, SnapshotRow, StudyRow, TrialRow

log = logging.getLogger("calibo.storage")

SNAPSHOTS_KEPT = 3  # newest snapshots per study; older ones are deleted when a fit lands
EXPIRED = "heartbeat timeout"  # the ``reason`` recorded on a running trial failed for silence


def expired(trial: TrialRow) -> bool:
    """Failed by the service because its worker fell silent, not told by anyone."""
    return trial.state == "failed" and (trial.record or {}).get("reason") == EXPIRED


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


def not_alive(trial: TrialRow, timeout: float) -> Conflict:
    """The answer to a sign of life of a trial that is no longer running (``StudyTx.keep_alive``)."""
    if expired(trial):
        return Conflict(f"trial {trial.id} expired: no heartbeat for over {timeout:g} s; its result "
                        "can still be told", field="trial_id", code="trial_expired")
    return Conflict(f"trial {trial.id} is already {trial.state}", field="trial_id", code="trial_finished")


def now() -> datetime:
    return datetime.now(UTC)


def as_utc(t: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything calibo stores is UTC."""
    if t is None:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


@dataclass
class StudyInfo:
    """A study row with its trial counts, detached from any session."""

    id: int
    name: str
    definition: dict[str, Any]
    created_at: datetime
    next_number: int
    n_complete: int
    adaptive: list[dict[str, Any]]
    best_trial_id: int | None
    best_value: float | None
    snapshot_version: int
    snapshot_n_obs: int
    fitted_at: datetime | None
    fit_error: str | None
    counts: dict[str, int]
    best_trial: dict[str, Any] | None = None
    fit_seconds: float | None = None
    fit_method: str | None = None
    fit_device: str | None = None
    user_attrs: dict[str, Any] | None = None
    head_adaptive: dict[str, Any] | None = None


@dataclass
class FitInputs:
    definition: dict[str, Any]
    observations: list[tuple[dict[str, Any], float]]  # completed trials, by trial number
    snapshot_n_obs: int
    running: list[dict[str, Any]] = field(default_factory=list)  # params of the running trials, by number
    constraints: list[list[float]] | None = None  # each observation's constraint values (constrained studies)


def _info(row: StudyRow, counts: dict[str, int]) -> StudyInfo:
    full = {s: 0 for s in TRIAL_STATES} | counts
    full["total"] = sum(full[s] for s in TRIAL_STATES)
    return StudyInfo(
        id=row.id, name=row.name, definition=row.definition, created_at=as_utc(row.created_at),
        next_number=row.next_number, n_complete=row.n_complete, adaptive=row.adaptive,
        best_trial_id=row.best_trial_id, best_value=row.best_value,
        snapshot_version=row.snapshot_version, snapshot_n_obs=row.snapshot_n_obs,
        fitted_at=as_utc(row.fitted_at), fit_error=row.fit_error, counts=full,
        user_attrs=row.user_attrs, head_adaptive=row.head_adaptive,
    )


def best_trial_of(t: TrialRow) -> dict[str, Any]:
    """What a study view says of its best trial."""
    return {"id": t.id, "number": t.number, "params": t.params, "value": t.value, "constraints": t.constraints,
            "values": t.values}


def feasible(constraints: Sequence[float] | None) -> bool:
    """A trial is feasible when every constraint value it was told is <= 0 (Optuna's convention)."""
    return all(c <= 0 for c in constraints or ())


@dataclass
class RunningTrial:
    id: int
    number: int
    params: dict[str, Any]
    asked_at: datetime
    heartbeat_at: datetime | None


class StudyTx:
    """One locked transaction on one study (see :meth:`Storage.locked`)."""

    def __init__(self, session: Session, study: StudyRow) -> None:
        self.session = session
        self.study = study

    # ----------------------------------------------------------------- reads
    def running_trials(self) -> list[RunningTrial]:
        # sorted here, not by ORDER BY: that made SQLite walk the (study_id, number) index over every
        # trial of the study (1.7 ms at 5000 trials) instead of the (study_id, state) one (0.3 ms)
        q = (select(TrialRow.id, TrialRow.number, TrialRow.params, TrialRow.asked_at, TrialRow.heartbeat_at)
             .where(TrialRow.study_id == self.study.id, TrialRow.state == "running"))
        return sorted((RunningTrial(*r) for r in self.session.execute(q)), key=lambda t: t.number)

    def waiting_trials(self, limit: int) -> list[TrialRow]:
        """The oldest ``limit`` enqueued trials not handed out yet, by number."""
        q = select(TrialRow).where(TrialRow.study_id == self.study.id, TrialRow.state == "waiting")
        return sorted(self.session.scalars(q), key=lambda t: t.number)[:limit]

    def trials_with_params(self, params: dict[str, Any]) -> list[TrialRow]:
        """Trials whose parameters include every ``params`` value (an enqueue's skip_if_exists)."""
        q = select(TrialRow).where(TrialRow.study_id == self.study.id)
        return [t for t in self.session.scalars(q)
                if all(k in t.params and t.params[k] == v for k, v in params.items())]

    def finished_keys_since(self, seq: int) -> list[tuple[str, int]]:
        """``(key, finish_seq)`` of every trial finished after position ``seq`` (0: all of them)."""
        q = (select(TrialRow.ukey, TrialRow.finish_seq)
             .where(TrialRow.study_id == self.study.id, TrialRow.finish_seq > seq))
        return [(k, n) for k, n in self.session.execute(q)]

    def snapshot_data(self, version: int) -> bytes | None:
        return self.session.scalar(
            select(SnapshotRow.data).where(SnapshotRow.study_id == self.study.id,
                                           SnapshotRow.version == version)
        )

    def trials(self, trial_ids: Sequence[int]) -> dict[int, TrialRow]:
        """This study's trials among ``trial_ids``, by id (absent ones are missing)."""
        q = select(TrialRow).where(TrialRow.study_id == self.study.id, TrialRow.id.in_(set(trial_ids)))
        return {t.id: t for t in self.session.scalars(q)}

    def asked_with(self, keys: Sequence[str]) -> dict[str, list[TrialRow]]:
        """The trials that earlier asks with these idempotency keys created, by key and number."""
        # no ORDER BY: sorting by number made SQLite walk the (study_id, number) index over every trial
        # of the study instead of looking the keys up; the few matches are sorted here
        q = select(TrialRow).where(TrialRow.study_id == self.study.id, TrialRow.ask_key.in_(set(keys)))
        out: dict[str, list[TrialRow]] = {}
        for t in sorted(self.session.scalars(q), key=lambda t: t.number):
            out.setdefault(t.ask_key, []).append(t)
        return out

    def trial(self, trial_id: int) -> TrialRow:
        t = self.session.scalar(
            select(TrialRow).where(TrialRow.id == trial_id, TrialRow.study_id == self.study.id)
        )
        if t is None:
            raise NotFound(f"trial {trial_id} not found in study {self.study.id}", field="trial_id")
        return t

    def report_at(self, trial_id: int, step: int) -> IntermediateRow | None:
        """The report of ``trial_id`` at ``step``, if there is one."""
        return self.session.scalar(select(IntermediateRow).where(IntermediateRow.trial_id == trial_id,
                                                                 IntermediateRow.step == step))

    def steps(self, trial_id: int) -> list[int]:
        """The steps ``trial_id`` has reported."""
        return list(self.session.scalars(select(IntermediateRow.step).where(IntermediateRow.trial_id == trial_id)))

    def curves(self) -> list[tuple[int, str, int, float]]:
        """Every report of the study: ``(trial number, trial state, step, value)``."""
        q = (select(TrialRow.number, TrialRow.state, IntermediateRow.step, IntermediateRow.value)
             .join(TrialRow, TrialRow.id == IntermediateRow.trial_id)
             .where(IntermediateRow.study_id == self.study.id))
        return [tuple(r) for r in self.session.execute(q)]

    # ---------------------------------------------------------------- writes
    def add_report(self, trial: TrialRow, step: int, value: float, should_prune: bool) -> None:
        """Store a running trial's learning-curve point."""
        self.session.add(IntermediateRow(study_id=self.study.id, trial_id=trial.id, step=step, value=value,
                                         should_prune=should_prune, reported_at=now()))

    def add_trials(self, trials: Sequence[dict[str, Any]], state: str = "running") -> list[dict[str, Any]]:
        """Record new running (or ``waiting``: enqueued) trials, numbered densely from the study's counter;
        their ids and numbers.

        Each spec has ``params``, ``ukey`` and optionally ``prediction``, ``points``,
        ``snapshot_version``, ``worker_id``, ``ask_key``, ``origin`` and ``user_attrs``.
        """
        if not trials:
            return []
        t0 = now()
        first = self.study.next_number
        running = state == "running"
        rows = [{
            "study_id": self.study.id, "number": first + i, "state": state, "params": spec["params"],
            "ukey": spec["ukey"], "prediction": spec.get("prediction"), "points": spec.get("points"),
            "snapshot_version": spec.get("snapshot_version"), "worker_id": spec.get("worker_id"), "asked_at": t0,
            "heartbeat_at": t0 if running else None, "ask_key": spec.get("ask_key"), "origin": spec.get("origin"),
            "user_attrs": spec.get("user_attrs"),
        } for i, spec in enumerate(trials)]
        self.study.next_number = first + len(rows)
        ids = {n: i for i, n in self.session.execute(
            insert(TrialRow).returning(TrialRow.id, TrialRow.number, sort_by_parameter_order=True), rows)}
        return [{"id": ids[r["number"]], "number": r["number"]} for r in rows]

    def assign(self, trial: TrialRow, spec: dict[str, Any]) -> None:
        """Hand an enqueued (waiting) trial out: it runs with ``spec``'s full parameters and key, and
        ``spec``'s ``user_attrs`` merged into its own."""
        t0 = now()
        trial.state = "running"
        trial.params = spec["params"]
        trial.ukey = spec["ukey"]
        trial.worker_id = spec.get("worker_id")
        trial.ask_key = spec.get("ask_key")
        trial.asked_at = t0
        trial.heartbeat_at = t0
        if spec.get("user_attrs"):
            trial.user_attrs = {**(trial.user_attrs or {}), **spec["user_attrs"]}

    def finish(self, trial: TrialRow, state: str, value: float | None,
               record: dict[str, Any] | None = None, better: bool = False, *,
               constraints: list[float] | None = None, values: list[float] | None = None,
               user_attrs: dict[str, Any] | None = None) -> None:
        """Move a running trial to ``state``; on completion update the counter and the best."""
        self.study.finish_seq += 1
        trial.state = state
        trial.value = value
        trial.record = record
        trial.finished_at = now()
        trial.finish_seq = self.study.finish_seq
        if constraints is not None:
            trial.constraints = constraints
        if values is not None:
            trial.values = values
        if user_attrs:
            trial.user_attrs = {**(trial.user_attrs or {}), **user_attrs}
        if state == "complete":
            self.study.n_complete += 1
            if better:
                self.study.best_trial_id = trial.id
                self.study.best_value = value

    def add_finished(self, specs: Sequence[dict[str, Any]], better) -> list[TrialRow]:
        """Record trials evaluated elsewhere, already finished (``complete`` or ``failed``), numbered from
        the study's counter; ``better(value)`` says whether a feasible completed value beats the best.

        Each spec has ``params``, ``ukey``, ``state``, ``value``, and optionally ``constraints``,
        ``values``, ``user_attrs`` and ``origin`` (``added`` by default).
        """
        t0 = now()
        out = []
        for spec in specs:
            self.study.finish_seq += 1
            row = TrialRow(study_id=self.study.id, number=self.study.next_number, state=spec["state"],
                           params=spec["params"], ukey=spec["ukey"], value=spec.get("value"),
                           constraints=spec.get("constraints"), values=spec.get("values"),
                           user_attrs=spec.get("user_attrs"), origin=spec.get("origin", "added"),
                           asked_at=spec.get("asked_at") or t0, finished_at=t0, finish_seq=self.study.finish_seq)
            self.study.next_number += 1
            self.session.add(row)
            out.append(row)
        self.session.flush()
        for row in out:
            if row.state == "complete":
                self.study.n_complete += 1
                if feasible(row.constraints) and better(row.value):
                    self.study.best_trial_id = row.id
                    self.study.best_value = row.value
        return out

    def set_adaptive(self, states: list[dict[str, Any]], heads: dict[str, Any] | None = None) -> None:
        """The study's ACI/DtACI states after the tells of this transaction (``heads``: those of its
        constraints / further objectives)."""
        self.study.adaptive = states
        if heads is not None:
            self.study.head_adaptive = heads

    def keep_alive(self, trial: TrialRow, cutoff: datetime) -> bool:
        """A sign of life of ``trial`` (heartbeat, report): whether it is running and was heard from
        since ``cutoff``, in which case its heartbeat is now; a running trial silent since before
        ``cutoff`` has expired and is failed (see ``not_alive`` for the answer to give)."""
        if trial.state != "running":
            return False
        if as_utc(trial.heartbeat_at or trial.asked_at) < cutoff:
            self.expire(trial)
            return False
        trial.heartbeat_at = now()
        return True

    def expire(self, trial: TrialRow) -> None:
        """Fail a running trial whose worker fell silent (see ``expired``)."""
        self.finish(trial, "failed", None, {"reason": EXPIRED})

    def fail_stale(self, trials: Sequence[RunningTrial], cutoff: datetime) -> list[RunningTrial]:
        """Fail running trials whose last sign of life is older than ``cutoff``; the others."""
        stale = {t.id for t in trials if as_utc(t.heartbeat_at or t.asked_at) < cutoff}
        if stale:
            for row in self.trials(list(stale)).values():
                if row.state == "running":
                    self.expire(row)
            log.info("study %s: failed %d running trials whose heartbeats stopped", self.study.id, len(stale))
        return [t for t in trials if t.id not in stale]


class Storage:
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

    # -------------------------------------------------------------- studies
    def create_study(self, name: str, definition: dict[str, Any], adaptive: list[dict[str, Any]],
                     head_adaptive: dict[str, Any] | None = None,
                     user_attrs: dict[str, Any] | None = None) -> tuple[StudyInfo, bool]:
        """Create, or return the existing study if its definition is identical.

        Returns ``(study, created)``; a different definition under the same name
        is a Conflict.
        """
        existing = self._by_name(name)
        if existing is None:
            try:
                with self._write() as s:
                    row = StudyRow(name=name, definition=definition, created_at=now(), next_number=0,
                                   n_complete=0, adaptive=adaptive, snapshot_version=0, snapshot_n_obs=0,
                                   head_adaptive=head_adaptive, user_attrs=user_attrs or None)
                    s.add(row)
                    s.flush()
                    study_id = row.id
                return self.get_study(study_id), True
            except IntegrityError:  # a concurrent create of the same name won the race
                existing = self._by_name(name)
                if existing is None:
                    raise
        if existing.definition != definition:
            raise Conflict(f"a study named {name!r} exists with a different definition", field="name",
                           code="name_conflict")
        return self.get_study(existing.id), False

    def _by_name(self, name: str) -> StudyRow | None:
        with self._read() as s:
            return s.scalar(select(StudyRow).where(StudyRow.name == name))

    def exists(self, name: str) -> bool:
        with self._read() as s:
            return s.scalar(select(StudyRow.id).where(StudyRow.name == name)) is not None

    def finished_trials(self, study_id: int) -> list[TrialRow]:
        """Every finished trial of the study, by number."""
        with self._read() as s:
            q = (select(TrialRow).where(TrialRow.study_id == study_id, TrialRow.state.in_(FINISHED_STATES))
                 .order_by(TrialRow.number))
            return list(s.scalars(q))

    def objective_rows(self, study_id: int) -> list[tuple[int, list[float], list[float] | None]]:
        """``(trial id, values, constraints)`` of a multi-objective study's completed trials, in the
        order they completed."""
        with self._read() as s:
            if s.get(StudyRow, study_id) is None:
                raise NotFound(f"study {study_id} not found", field="study")
            q = (select(TrialRow.id, TrialRow.values, TrialRow.constraints)
                 .where(TrialRow.study_id == study_id, TrialRow.state == "complete", TrialRow.values.is_not(None))
                 .order_by(TrialRow.finish_seq, TrialRow.id))
            return [tuple(r) for r in s.execute(q)]

    def trials_by_id(self, study_id: int, ids: Sequence[int]) -> list[TrialRow]:
        """The study's trials with these ids, by number."""
        if not ids:
            return []
        with self._read() as s:
            q = (select(TrialRow).where(TrialRow.study_id == study_id, TrialRow.id.in_(list(ids)))
                 .order_by(TrialRow.number))
            return list(s.scalars(q))

    def study_id(self, name: str) -> int:
        """The id of the study named ``name``; NotFound naming it."""
        with self._read() as s:
            sid = s.scalar(select(StudyRow.id).where(StudyRow.name == name))
        if sid is None:
            raise NotFound(f"no study named {name!r}", field="study")
        return sid

    def set_study_attrs(self, study_id: int, attrs: dict[str, Any]) -> None:
        """Merge ``attrs`` into the study's user attributes."""
        with self.locked(study_id) as tx:
            tx.study.user_attrs = {**(tx.study.user_attrs or {}), **attrs}

    def _counts(self, s: Session, study_ids: Sequence[int] | None = None) -> dict[int, dict[str, int]]:
        q = select(TrialRow.study_id, TrialRow.state, func.count()).group_by(TrialRow.study_id, TrialRow.state)
        if study_ids is not None:
            q = q.where(TrialRow.study_id.in_(study_ids))
        out: dict[int, dict[str, int]] = {}
        for sid, state, n in s.execute(q):
            out.setdefault(sid, {})[state] = n
        return out

    def get_study(self, study_id: int) -> StudyInfo:
        with self._read() as s:
            row = s.get(StudyRow, study_id)
            if row is None:
                raise NotFound(f"study {study_id} not found", field="study")
            info = _info(row, self._counts(s, [study_id]).get(study_id, {}))
            if row.best_trial_id is not None:
                best = s.get(TrialRow, row.best_trial_id)
                if best is not None:
                    info.best_trial = best_trial_of(best)
            snap = s.execute(
                select(SnapshotRow.fit_seconds, SnapshotRow.method, SnapshotRow.device)
                .where(SnapshotRow.study_id == study_id, SnapshotRow.version == row.snapshot_version)
            ).first()
            if snap is not None:
                info.fit_seconds, info.fit_method, info.fit_device = snap
            return info

    def list_studies(self, limit: int = 100, offset: int = 0, name: str | None = None
                     ) -> tuple[list[StudyInfo], int]:
        """A page of studies by id (optionally only the one named ``name``), and how many there are."""
        with self._read() as s:
            where = [StudyRow.name == name] if name is not None else []
            total = s.scalar(select(func.count()).select_from(StudyRow).where(*where)) or 0
            rows = list(s.scalars(select(StudyRow).where(*where).order_by(StudyRow.id).limit(limit).offset(offset)))
            counts = self._counts(s, [r.id for r in rows])
            best_ids = [r.best_trial_id for r in rows if r.best_trial_id is not None]
            best = {t.id: t for t in s.scalars(select(TrialRow).where(TrialRow.id.in_(best_ids)))} if best_ids else {}
            out = []
            for r in rows:
                info = _info(r, counts.get(r.id, {}))
                t = best.get(r.best_trial_id)
                if t is not None:
                    info.best_trial = best_trial_of(t)
                out.append(info)
            return out, int(total)

    def definition(self, study_id: int) -> dict[str, Any]:
        with self._read() as s:
            d = s.scalar(select(StudyRow.definition).where(StudyRow.id == study_id))
        if d is None:
            raise NotFound(f"study {study_id} not found", field="study")
        return d

    def delete_study(self, study_id: int) -> None:
        with self._write() as s:
            if s.get(StudyRow, study_id) is None:
                raise NotFound(f"study {study_id} not found", field="study")
            # explicit, so the cascade does not depend on the database's FK enforcement
            s.execute(delete(SnapshotRow).where(SnapshotRow.study_id == study_id))
            s.execute(delete(IntermediateRow).where(IntermediateRow.study_id == study_id))
            s.execute(delete(TrialRow).where(TrialRow.study_id == study_id))
            s.execute(delete(StudyRow).where(StudyRow.id == study_id))

    def progress(self, study_id: int) -> tuple[int, int, int]:
        """``(completed trials, observations in the newest snapshot, running trials)``."""
        with self._read() as s:
            row = s.execute(select(StudyRow.n_complete, StudyRow.snapshot_n_obs)
                            .where(StudyRow.id == study_id)).first()
            if row is None:
                raise NotFound(f"study {study_id} not found", field="study")
            running = s.scalar(select(func.count()).select_from(TrialRow)
                               .where(TrialRow.study_id == study_id, TrialRow.state == "running"))
            return row[0], row[1], int(running or 0)

    # --------------------------------------------------------------- trials
    def list_trials(self, study_id: int, state: str | None, limit: int, offset: int,
                    user_attrs: dict[str, str] | None = None, origin: str | None = None
                    ) -> tuple[list[TrialRow], int]:
        """A page of trials by number: in ``state``, of ``origin`` (``asked`` for those an ask chose), and
        whose string user attribute ``k`` is ``v`` for every ``k: v`` of ``user_attrs``."""
        with self._read() as s:
            if s.get(StudyRow, study_id) is None:
                raise NotFound(f"study {study_id} not found", field="study")
            where = [TrialRow.study_id == study_id]
            if state is not None:
                where.append(TrialRow.state == state)
            if origin is not None:
                where.append(TrialRow.origin.is_(None) if origin == "asked" else TrialRow.origin == origin)
            for k, v in (user_attrs or {}).items():
                where.append(TrialRow.user_attrs[k].as_string() == v)
            total = s.scalar(select(func.count()).select_from(TrialRow).where(*where)) or 0
            rows = list(s.scalars(select(TrialRow).where(*where).order_by(TrialRow.number)
                                  .limit(limit).offset(offset)))
            return rows, int(total)

    def get_trial(self, study_id: int, trial_id: int) -> TrialRow:
        with self._read() as s:
            t = s.scalar(select(TrialRow).where(TrialRow.id == trial_id, TrialRow.study_id == study_id))
            if t is None:
                if s.get(StudyRow, study_id) is None:
                    raise NotFound(f"study {study_id} not found", field="study")
                raise NotFound(f"trial {trial_id} not found in study {study_id}", field="trial_id")
            return t

    def heartbeat(self, study_id: int, trial_id: int, timeout: float) -> None:
        """Mark a running trial alive, unless it was silent for longer than ``timeout`` seconds.

        The rule for a late heartbeat: the trial has expired. It is failed (if
        the reaper has not done so yet) and the heartbeat answers Conflict
        ``trial_expired``; a tell of it is still recorded (see ``expired``).
        """
        t0 = now()
        cutoff = t0 - timedelta(seconds=timeout)
        with self._write() as s:
            res = s.execute(update(TrialRow)
                            .where(TrialRow.id == trial_id, TrialRow.study_id == study_id,
                                   TrialRow.state == "running", TrialRow.heartbeat_at >= cutoff)
                            .values(heartbeat_at=t0))
            if res.rowcount:
                return
        with self.locked(study_id) as tx:
            t = tx.trial(trial_id)
            if tx.keep_alive(t, cutoff):  # a heartbeat raced this one
                return
        raise not_alive(t, timeout)

    def oldest_heartbeats(self) -> dict[int, datetime]:
        """For every study with running trials, the oldest last sign of life among them."""
        with self._read() as s:
            # per study, so the (study_id, state) index answers rather than a scan of every trial
            oldest = (select(func.min(TrialRow.heartbeat_at))
                      .where(TrialRow.study_id == StudyRow.id, TrialRow.state == "running")
                      .scalar_subquery())
            return {sid: as_utc(t) for sid, t in s.execute(select(StudyRow.id, oldest)) if t is not None}

    def reap(self, study_id: int, cutoff: datetime) -> int:
        """Fail the study's running trials silent since before ``cutoff``; how many."""
        try:
            with self.locked(study_id) as tx:
                running = tx.running_trials()
                return len(running) - len(tx.fail_stale(running, cutoff))
        except NotFound:
            return 0  # deleted meanwhile

    def calibration_rows(self, study_id: int) -> list[tuple[int, int, dict[str, Any], dict[str, Any]]]:
        """``(trial id, number, params, record)`` of completed trials that had a prediction."""
        with self._read() as s:
            if s.get(StudyRow, study_id) is None:
                raise NotFound(f"study {study_id} not found", field="study")
            q = (select(TrialRow.id, TrialRow.number, TrialRow.params, TrialRow.record)
                 .where(TrialRow.study_id == study_id, TrialRow.state == "complete",
                        TrialRow.record.is_not(None))
                 .order_by(TrialRow.finished_at, TrialRow.id))
            return [tuple(r) for r in s.execute(q)]

    def recent_records(self, study_id: int, n: int) -> list[dict[str, Any]]:
        """Calibration records of the study's last ``n`` predicted trials, oldest first."""
        with self._read() as s:
            q = (select(TrialRow.record).where(TrialRow.study_id == study_id, TrialRow.state == "complete",
                                               TrialRow.record.is_not(None))
                 .order_by(TrialRow.finish_seq.desc()).limit(n))
            return list(reversed(s.scalars(q).all()))

    def curves(self, study_id: int, limit: int, offset: int) -> tuple[list[tuple[int, int, str, int, float]], int]:
        """A page of the study's learning curves, by trial number: ``(trial id, number, state, step,
        value)`` rows of the trials ``offset .. offset + limit`` among those with reports; and how
        many trials have reports."""
        with self._read() as s:
            if s.get(StudyRow, study_id) is None:
                raise NotFound(f"study {study_id} not found", field="study")
            reported = (select(TrialRow.id, TrialRow.number).join(IntermediateRow, IntermediateRow.trial_id == TrialRow.id)
                        .where(TrialRow.study_id == study_id).distinct())
            total = s.scalar(select(func.count()).select_from(reported.subquery())) or 0
            page = reported.order_by(TrialRow.number).limit(limit).offset(offset).subquery()
            q = (select(TrialRow.id, TrialRow.number, TrialRow.state, IntermediateRow.step, IntermediateRow.value)
                 .join(page, page.c.id == TrialRow.id)
                 .join(IntermediateRow, IntermediateRow.trial_id == TrialRow.id)
                 .order_by(TrialRow.number, IntermediateRow.step))
            return [tuple(r) for r in s.execute(q)], total

    # ----------------------------------------------------------------- fits
    def fit_inputs(self, study_id: int) -> FitInputs | None:
        """What a fit of ``study_id`` needs, or None if the study is gone."""
        with self._read() as s:
            row = s.execute(select(StudyRow.definition, StudyRow.snapshot_n_obs)
                            .where(StudyRow.id == study_id)).first()
            if row is None:
                return None
            # pruned trials feed the fit with their last value only when the study's pruner says so
            fed = ("complete", "pruned") if (row[0].get("pruner") or {}).get("feed_pruned") else ("complete",)
            constrained = bool(row[0].get("constraints"))
            several = bool(row[0].get("directions"))  # a multi-objective study: each value is a list
            obs = s.execute(select(TrialRow.params, TrialRow.value, TrialRow.constraints, TrialRow.values)
                            .where(TrialRow.study_id == study_id, TrialRow.state.in_(fed),
                                   TrialRow.value.is_not(None))
                            .order_by(TrialRow.number))
            observations, constraints = [], []
            for p, v, c, vs in obs:
                if (constrained and c is None) or (several and vs is None):  # a pruned trial told without them
                    continue
                observations.append((p, [float(x) for x in vs] if several else float(v)))
                constraints.append([float(x) for x in c or ()])
            running = s.execute(select(TrialRow.params)
                                .where(TrialRow.study_id == study_id, TrialRow.state == "running")
                                .order_by(TrialRow.number)).scalars().all()
            return FitInputs(row[0], observations, row[1], list(running),
                             constraints if constrained else None)

    def save_snapshot(self, study_id: int, *, n_obs: int, method: str, fit_seconds: float,
                      data: bytes, device: str | None = None) -> int | None:
        """Store a fit's snapshot if it is newer than the study's; return its version."""
        try:
            with self.locked(study_id) as tx:
                st = tx.study
                if n_obs <= st.snapshot_n_obs:
                    return None
                version = st.snapshot_version + 1
                tx.session.add(SnapshotRow(study_id=study_id, version=version, n_obs=n_obs, method=method,
                                           fit_seconds=fit_seconds, device=device, created_at=now(),
                                           data=data))
                st.snapshot_version = version
                st.snapshot_n_obs = n_obs
                st.fitted_at = now()
                st.fit_error = None
                tx.session.execute(delete(SnapshotRow).where(SnapshotRow.study_id == study_id,
                                                             SnapshotRow.version <= version - SNAPSHOTS_KEPT))
                return version
        except NotFound:
            return None  # deleted while it was being fitted

    def record_fit_error(self, study_id: int, message: str) -> None:
        with self._write() as s:
            s.execute(update(StudyRow).where(StudyRow.id == study_id).values(fit_error=message[:4000]))

    def studies_needing_fit(self, min_obs: int = 4, skip_failed: bool = False) -> list[int]:
        """Studies whose newest snapshot lags their completed trials (e.g. after a restart); with
        ``skip_failed``, not those whose last fit failed (they are fitted again at their next tell)."""
        q = select(StudyRow.id).where(StudyRow.n_complete > StudyRow.snapshot_n_obs, StudyRow.n_complete >= min_obs)
        if skip_failed:
            q = q.where(StudyRow.fit_error.is_(None))
        with self._read() as s:
            return list(s.scalars(q))


__all__ = ["EXPIRED", "FINISHED_STATES", "best_trial_of", "feasible", "TRIAL_STATES", "FitInputs", "RunningTrial", "Storage", "StudyInfo", "StudyTx",
           "as_utc", "expired", "not_alive", "now"]
