"""Studies: create (idempotent by name), find, list, describe, delete."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..errors import Conflict, NotFound
from .info import Progress, StudyInfo, as_utc, best_trial_of, blameless, now
from .models import FINISHED_STATES, TRIAL_STATES, IntermediateRow, SnapshotRow, StudyRow, TrialRow
from .sessions import Sessions
from .tx import StudyTx


def _info(row: StudyRow, counts: dict[str, int]) -> StudyInfo:
    full = {s: 0 for s in TRIAL_STATES} | counts
    full["total"] = sum(full[s] for s in TRIAL_STATES)
    return StudyInfo(
        id=row.id, name=row.name, definition=row.definition, created_at=as_utc(row.created_at),
        next_number=row.next_number, n_complete=row.n_complete, state=row.state,
        best_trial_id=row.best_trial_id, best_value=row.best_value,
        snapshot_version=row.snapshot_version, snapshot_n_obs=row.snapshot_n_obs,
        fitted_at=as_utc(row.fitted_at), fit_error=row.fit_error, counts=full,
        user_attrs=row.user_attrs, system_attrs=row.system_attrs, revision=row.revision or 0,
        n_failed=row.n_failed or 0,
        snapshot_n_failed=row.snapshot_n_failed or 0,
    )


class StudyQueries(Sessions):
    """:class:`~calibo.server.storage.Storage`'s study methods, mixed into it (they use its
    ``_read``, ``_write`` and ``locked``)."""

    def create_study(self, name: str, definition: dict[str, Any], state: dict[str, Any],
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
                                   n_complete=0, state=state, snapshot_version=0, snapshot_n_obs=0,
                                   user_attrs=user_attrs or None)
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

    def copy_study(self, source_id: int, name: str, definition: dict[str, Any], state: dict[str, Any],
                   user_attrs: dict[str, Any] | None, better: Callable[[float, float | None], bool],
                   ) -> tuple[StudyInfo, int]:
        """A new study ``name`` (``definition``, initial ``state``) holding a copy of every finished
        trial of study ``source_id``, in one transaction: the copy is whole or absent. Conflict
        ``name_conflict`` when the name is taken, also by a create or copy racing this one (the
        unique name decides: the loser's transaction stores nothing); ``(study, trials copied)``.
        ``better(value, best)``: whether a feasible completed value beats the best so far. The copy's space
        is the source's as read in this transaction (its space may have grown since ``definition`` was
        read: the trials' keys are of the space they are read with)."""
        conflict = Conflict(f"a study named {name!r} exists", field="name", code="name_conflict")
        try:
            with self._write() as s:
                src = s.get(StudyRow, source_id)
                if src is None:
                    raise NotFound(f"study {source_id} not found", field="study")
                definition = {**definition, "space": src.definition["space"]}
                if s.scalar(select(StudyRow.id).where(StudyRow.name == name)) is not None:
                    raise conflict
                row = StudyRow(name=name, definition=definition, created_at=now(), next_number=0, n_complete=0,
                               state=state, snapshot_version=0, snapshot_n_obs=0, user_attrs=user_attrs or None)
                s.add(row)
                s.flush()
                source = s.scalars(select(TrialRow).where(TrialRow.study_id == source_id,
                                                          TrialRow.state.in_(FINISHED_STATES))
                                   .order_by(TrialRow.number)).all()
                # a trial failed for a silent worker or an interrupted run stays one (its record says
                # so): no fit learns from it
                specs = [{"params": t.params, "ukey": t.ukey, "state": t.state, "value": t.value, "values": t.values,
                          "constraints": t.constraints, "user_attrs": t.user_attrs, "origin": "copied",
                          "record": t.record if t.state == "failed" and blameless(t.record) else None}
                         for t in source]
                tx = StudyTx(s, row)
                tx.add_finished(specs, lambda v: better(v, row.best_value))
                study_id = row.id
        except IntegrityError:  # a concurrent create or copy of the same name committed first
            raise conflict from None
        return self.get_study(study_id), len(specs)

    def _by_name(self, name: str) -> StudyRow | None:
        with self._read() as s:
            return s.scalar(select(StudyRow).where(StudyRow.name == name))

    def exists(self, name: str) -> bool:
        with self._read() as s:
            return s.scalar(select(StudyRow.id).where(StudyRow.name == name)) is not None

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

    def change_study_attrs(self, study_id: int, change: Callable[[dict[str, Any]], dict[str, Any]],
                           kind: str = "user_attrs") -> dict[str, Any]:
        """The study's user attributes (``kind="system_attrs"``: its system attributes) replaced by
        ``change(current)`` under the study's lock (so concurrent changes of different keys all land);
        the new attributes. An exception from ``change`` stores nothing."""
        if kind not in ("user_attrs", "system_attrs"):
            raise ValueError(kind)
        with self.locked(study_id) as tx:
            attrs = change(dict(getattr(tx.study, kind) or {}))
            setattr(tx.study, kind, attrs or None)
            return attrs

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
                select(SnapshotRow.fit_seconds, SnapshotRow.method, SnapshotRow.device, SnapshotRow.kind)
                .where(SnapshotRow.study_id == study_id, SnapshotRow.version == row.snapshot_version)
            ).first()
            if snap is not None:
                info.fit_seconds, info.fit_method, info.fit_device, info.fit_kind = snap
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
                t = best.get(r.best_trial_id) if r.best_trial_id is not None else None
                if t is not None:
                    info.best_trial = best_trial_of(t)
                out.append(info)
            return out, int(total)

    def definition_at(self, study_id: int) -> tuple[dict[str, Any], int]:
        """The study's definition and its revision, read together."""
        with self._read() as s:
            row = s.execute(select(StudyRow.definition, StudyRow.revision).where(StudyRow.id == study_id)).first()
        if row is None:
            raise NotFound(f"study {study_id} not found", field="study")
        return row[0], int(row[1] or 0)

    def definition(self, study_id: int) -> dict[str, Any]:
        with self._read() as s:
            d = s.scalar(select(StudyRow.definition).where(StudyRow.id == study_id))
        if d is None:
            raise NotFound(f"study {study_id} not found", field="study")
        return d

    def delete_study(self, study_id: int) -> None:
        with self._write() as s:
            # the study's row first, as every locked transaction takes it (Storage.locked): a delete that
            # took its trials' rows first deadlocked on PostgreSQL with a tell or a fit's store in flight
            if s.get(StudyRow, study_id, with_for_update=True) is None:
                raise NotFound(f"study {study_id} not found", field="study")
            # explicit, so the cascade does not depend on the database's FK enforcement
            s.execute(delete(SnapshotRow).where(SnapshotRow.study_id == study_id))
            s.execute(delete(IntermediateRow).where(IntermediateRow.study_id == study_id))
            s.execute(delete(TrialRow).where(TrialRow.study_id == study_id))
            s.execute(delete(StudyRow).where(StudyRow.id == study_id))

    def progress(self, study_id: int, pace: bool = False, failures: bool = True) -> Progress:
        """Completed trials and learnable failures against those the newest snapshot saw, and the
        running trials; with ``pace``, also the trial and fit seconds in the same read (``_pace``),
        read only while trials run and the snapshot lags (None otherwise). ``failures`` False (a
        study that does not learn from them): no failure is news to a fit, ``n_failed`` is 0."""
        with self._read() as s:
            row = s.execute(select(StudyRow.n_complete, StudyRow.snapshot_n_obs, StudyRow.n_failed,
                                   StudyRow.snapshot_n_failed)
                            .where(StudyRow.id == study_id)).first()
            if row is None:
                raise NotFound(f"study {study_id} not found", field="study")
            running = int(s.scalar(select(func.count()).select_from(TrialRow)
                                   .where(TrialRow.study_id == study_id, TrialRow.state == "running")) or 0)
            out = Progress(row[0], row[1], running, int(row[2] or 0) if failures else 0, int(row[3] or 0))
            if pace and running and (row[1] < row[0] or out.fitted_failures < out.n_failed):
                trial_s, fit_s = _pace(s, study_id)
                out = out._replace(trial_seconds=trial_s, fit_seconds=fit_s)
            return out


def _pace(s: Session, study_id: int, last: int = 20) -> tuple[float | None, float | None]:
    """``(trial seconds, fit seconds)``: the median run time (ask to finish) of the study's ``last``
    trials completed by an ask, and the newest snapshot's fit time; None for either that the study
    does not have yet."""
    rows = s.execute(select(TrialRow.asked_at, TrialRow.finished_at)
                     .where(TrialRow.study_id == study_id, TrialRow.state == "complete",
                            TrialRow.origin.is_(None), TrialRow.finish_seq.is_not(None))
                     .order_by(TrialRow.finish_seq.desc()).limit(last)).all()
    fit = s.scalar(select(SnapshotRow.fit_seconds).where(SnapshotRow.study_id == study_id)
                   .order_by(SnapshotRow.version.desc()).limit(1))
    spans = sorted((as_utc(b) - as_utc(a)).total_seconds() for a, b in rows if a is not None and b is not None)
    trial = spans[len(spans) // 2] if spans else None
    return trial, None if fit is None else float(fit)
