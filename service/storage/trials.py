"""Trials outside a study's lock: listings, signs of life, the reaper, calibration and curve reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, String, and_, bindparam, exists, func, select, update

from ..errors import NotFound
from .info import as_utc, not_alive, now
from .models import FINISHED_STATES, IntermediateRow, StudyRow, TrialRow
from .sessions import Sessions


class TrialQueries(Sessions):
    """:class:`~calibo.server.storage.Storage`'s trial methods, mixed into it (they use its
    ``_read``, ``_write`` and ``locked``)."""

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
            # values is never NULL here (the WHERE)
            return cast(list[tuple[int, list[float], list[float] | None]], [tuple(r) for r in s.execute(q)])

    def trials_by_id(self, study_id: int, ids: Sequence[int]) -> list[TrialRow]:
        """The study's trials with these ids, by number."""
        if not ids:
            return []
        with self._read() as s:
            q = (select(TrialRow).where(TrialRow.study_id == study_id, TrialRow.id.in_(list(ids)))
                 .order_by(TrialRow.number))
            return list(s.scalars(q))

    def list_trials(self, study_id: int, state: str | None, limit: int, offset: int,
                    user_attrs: dict[str, str] | None = None, origin: str | None = None,
                    number_from: int | None = None) -> tuple[list[TrialRow], int]:
        """A page of trials by number: in ``state``, of ``origin`` (``asked`` for those an ask chose),
        whose string user attribute ``k`` is ``v`` for every ``k: v`` of ``user_attrs``, numbered
        ``number_from`` or later."""
        with self._read() as s:
            if s.get(StudyRow, study_id) is None:
                raise NotFound(f"study {study_id} not found", field="study")
            where = [TrialRow.study_id == study_id]
            if state is not None:
                where.append(TrialRow.state == state)
            if origin is not None:
                where.append(TrialRow.origin.is_(None) if origin == "asked" else TrialRow.origin == origin)
            where.extend(self._string_attr(k, v) for k, v in (user_attrs or {}).items())
            if number_from is not None:
                where.append(TrialRow.number >= number_from)
            total = s.scalar(select(func.count()).select_from(TrialRow).where(*where)) or 0
            rows = list(s.scalars(select(TrialRow).where(*where).order_by(TrialRow.number)
                                  .limit(limit).offset(offset)))
            return rows, int(total)

    def _string_attr(self, key: str, value: str) -> ColumnElement[bool]:
        """A trial's user attribute ``key`` is the string ``value``: the key and value as bound
        parameters, never part of a JSON path (SQLite's paths cannot quote every key: a ``"`` is an
        error, and ``\\`` or non-ASCII text reads another key), and a number or ``true`` whose text is
        ``value`` does not match, on either backend."""
        if self.dialect == "postgresql":
            attr = TrialRow.user_attrs.op("->")(bindparam(None, key, type_=String))
            return and_(func.json_typeof(attr) == "string",
                        TrialRow.user_attrs.op("->>")(bindparam(None, key, type_=String)) == value)
        each = func.json_each(TrialRow.user_attrs).table_valued("key", "type", "value")
        return exists().where(each.c.key == key, each.c.type == "text", each.c.value == value)

    def get_trial(self, study_id: int, trial_id: int) -> TrialRow:
        with self._read() as s:
            t = s.scalar(select(TrialRow).where(TrialRow.id == trial_id, TrialRow.study_id == study_id))
            if t is None:
                if s.get(StudyRow, study_id) is None:
                    raise NotFound(f"study {study_id} not found", field="study")
                raise NotFound(f"trial {trial_id} not found in study {study_id}", field="trial_id")
            return t

    def trial_by_id(self, trial_id: int) -> TrialRow:
        """A trial of any study, by its id (ids are unique across studies); NotFound naming it."""
        with self._read() as s:
            t = s.get(TrialRow, trial_id)
            if t is None:
                raise NotFound(f"trial {trial_id} not found", field="trial_id")
            return t

    def intermediate_of(self, trial_ids: Sequence[int]) -> dict[int, dict[int, float]]:
        """The learning-curve points of these trials: ``{trial id: {step: value}}`` (trials without
        points are missing)."""
        out: dict[int, dict[int, float]] = {}
        if not trial_ids:
            return out
        with self._read() as s:
            q = (select(IntermediateRow.trial_id, IntermediateRow.step, IntermediateRow.value)
                 .where(IntermediateRow.trial_id.in_(list(trial_ids))).order_by(IntermediateRow.step))
            for tid, step, value in s.execute(q):
                out.setdefault(tid, {})[step] = value
        return out

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
            if cast(CursorResult[Any], res).rowcount:  # an UPDATE's result is a CursorResult
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
            reported = (select(TrialRow.id, TrialRow.number)
                        .join(IntermediateRow, IntermediateRow.trial_id == TrialRow.id)
                        .where(TrialRow.study_id == study_id).distinct())
            total = s.scalar(select(func.count()).select_from(reported.subquery())) or 0
            page = reported.order_by(TrialRow.number).limit(limit).offset(offset).subquery()
            q = (select(TrialRow.id, TrialRow.number, TrialRow.state, IntermediateRow.step, IntermediateRow.value)
                 .join(page, page.c.id == TrialRow.id)
                 .join(IntermediateRow, IntermediateRow.trial_id == TrialRow.id)
                 .order_by(TrialRow.number, IntermediateRow.step))
            return [(tid, number, state, step, value) for tid, number, state, step, value in s.execute(q)], total
