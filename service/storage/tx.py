"""One locked transaction on one study: the reads and writes of an ask, a tell, a report."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from ..errors import NotFound
from .info import EXPIRED, RunningTrial, as_utc, blameless, feasible, now
from .models import IntermediateRow, SnapshotRow, StudyRow, TrialRow

log = logging.getLogger("calibo.storage")

# what a trial its caller runs itself may carry beyond an asked one's (``add_trials``)
_CALLER_RUN = ("system_attrs", "distributions", "started_at")


class StudyTx:
    """One locked transaction on one study (see :meth:`Storage.locked`)."""

    def __init__(self, session: Session, study: StudyRow) -> None:
        self.session = session
        self.study = study

    # ----------------------------------------------------------------- reads
    def running_trials(self) -> list[RunningTrial]:
        # sorted here, not by ORDER BY: that made SQLite walk the (study_id, number) index over every
        # trial of the study (1.7 ms at 5000 trials) instead of the (study_id, state) one (0.3 ms)
        q = (select(TrialRow.id, TrialRow.number, TrialRow.params, TrialRow.asked_at, TrialRow.heartbeat_at,
                    TrialRow.origin)
             .where(TrialRow.study_id == self.study.id, TrialRow.state == "running"))
        return sorted((RunningTrial(*r) for r in self.session.execute(q)), key=lambda t: t.number)

    def waiting_trials(self, limit: int | None = None) -> list[TrialRow]:
        """The oldest ``limit`` (None: all) enqueued trials not handed out yet, by number."""
        q = select(TrialRow).where(TrialRow.study_id == self.study.id, TrialRow.state == "waiting")
        return sorted(self.session.scalars(q), key=lambda t: t.number)[:limit]

    def trials_with_params(self, params: dict[str, Any]) -> list[TrialRow]:
        """Trials whose parameters include every ``params`` value (an enqueue's skip_if_exists), by
        number: the first is the one a skipped enqueue answers with, on either backend (PostgreSQL
        returns rows in no set order)."""
        q = select(TrialRow).where(TrialRow.study_id == self.study.id)
        return sorted((t for t in self.session.scalars(q)
                       if all(k in t.params and t.params[k] == v for k, v in params.items())),
                      key=lambda t: t.number)

    def finished_keys_since(self, seq: int) -> list[tuple[str, int]]:
        """``(key, finish_seq)`` of every trial finished after position ``seq`` (0: all of them)."""
        q = (select(TrialRow.ukey, TrialRow.finish_seq)
             .where(TrialRow.study_id == self.study.id, TrialRow.finish_seq > seq))
        return cast(list[tuple[str, int]], [(k, n) for k, n in self.session.execute(q)])  # never NULL: > seq

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
            assert t.ask_key is not None  # one of keys
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
        return [(number, state, step, value) for number, state, step, value in self.session.execute(q)]

    # ---------------------------------------------------------------- writes
    def add_report(self, trial: TrialRow, step: int, value: float, should_prune: bool) -> None:
        """Store a running trial's learning-curve point."""
        self.session.add(IntermediateRow(study_id=self.study.id, trial_id=trial.id, step=step, value=value,
                                         should_prune=should_prune, reported_at=now()))

    def add_trials(self, trials: Sequence[dict[str, Any]], state: str = "running") -> list[dict[str, Any]]:
        """Record new running (or ``waiting``: enqueued) trials, numbered densely from the study's counter;
        their ids and numbers.

        Each spec has ``params``, ``ukey`` and optionally ``prediction``, ``points``,
        ``snapshot_version``, ``worker_id``, ``ask_key``, ``origin`` and ``user_attrs``; a trial its
        caller runs itself (origin ``added``) also ``system_attrs``, ``distributions``, ``started_at`` and
        ``intermediate_values``.
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
            "user_attrs": spec.get("user_attrs"), **{k: spec[k] for k in _CALLER_RUN if spec.get(k) is not None},
        } for i, spec in enumerate(trials)]
        self.study.next_number = first + len(rows)
        # one column set for the whole insert (executemany): a key one row lacks is null in it
        keys = {k for r in rows for k in r}
        rows = [{k: r.get(k) for k in keys} for r in rows]
        ids = {n: i for i, n in self.session.execute(
            insert(TrialRow).returning(TrialRow.id, TrialRow.number, sort_by_parameter_order=True), rows)}
        for spec, r in zip(trials, rows, strict=True):
            for step, value in (spec.get("intermediate_values") or {}).items():
                self.session.add(IntermediateRow(study_id=self.study.id, trial_id=ids[r["number"]], step=step,
                                                 value=value, should_prune=False, reported_at=t0))
        return [{"id": ids[r["number"]], "number": r["number"]} for r in rows]

    def update_trial(self, trial: TrialRow, change: dict[str, Any]) -> None:
        """A waiting or running trial the caller runs itself, changed (``StudyService.update_trial`` has
        checked ``change``): ``params`` and ``distributions`` merged into its own, ``user_attrs`` and
        ``system_attrs`` merged, ``intermediate_values`` (``{step: value}``) stored or replaced, ``state``
        running starting a waiting trial. Any change is a sign of life of a running trial."""
        t0 = now()
        if change.get("params"):
            trial.params = {**trial.params, **change["params"]}
            trial.ukey = change["ukey"]
        for key in ("distributions", "user_attrs", "system_attrs"):
            if change.get(key):
                setattr(trial, key, {**(getattr(trial, key) or {}), **change[key]})
        steps = change.get("intermediate_values") or {}
        if steps:
            have = {r.step: r for r in self.session.scalars(
                select(IntermediateRow).where(IntermediateRow.trial_id == trial.id,
                                              IntermediateRow.step.in_(list(steps))))}
            for step, value in steps.items():
                if step in have:
                    have[step].value = value
                    have[step].reported_at = t0
                else:
                    self.session.add(IntermediateRow(study_id=self.study.id, trial_id=trial.id, step=step,
                                                     value=value, should_prune=False, reported_at=t0))
        if change.get("state") == "running" and trial.state == "waiting":
            trial.state = "running"
            trial.started_at = trial.started_at or t0
        if trial.state == "running":
            trial.heartbeat_at = t0

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

    def remove_waiting(self, trial: TrialRow) -> None:
        """Take an enqueued trial that no ask has handed out yet off the queue (its number is not reused)."""
        self.session.delete(trial)

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
        if state == "failed" and not blameless(record):
            self.study.n_failed = (self.study.n_failed or 0) + 1
        if state == "complete":
            self.study.n_complete += 1
            if better:
                self.study.best_trial_id = trial.id
                self.study.best_value = value

    def add_finished(self, specs: Sequence[dict[str, Any]], better) -> list[TrialRow]:
        """Record trials evaluated elsewhere, already finished (``complete`` or ``failed``), numbered from
        the study's counter; ``better(value)`` says whether a feasible completed value beats the best.

        Each spec has ``params``, ``ukey``, ``state``, ``value``, and optionally ``constraints``,
        ``values``, ``user_attrs``, ``origin`` (``added`` by default), ``record`` (a copied trial's,
        where it says why the service failed it), and an imported trial's ``system_attrs``,
        ``distributions``, ``intermediate_values``, ``started_at`` and ``finished_at``.
        """
        t0 = now()
        out = []
        for spec in specs:
            self.study.finish_seq += 1
            row = TrialRow(study_id=self.study.id, number=self.study.next_number, state=spec["state"],
                           params=spec["params"], ukey=spec["ukey"], value=spec.get("value"),
                           constraints=spec.get("constraints"), values=spec.get("values"),
                           user_attrs=spec.get("user_attrs"), origin=spec.get("origin", "added"),
                           record=spec.get("record"), system_attrs=spec.get("system_attrs"),
                           distributions=spec.get("distributions"), started_at=spec.get("started_at"),
                           asked_at=spec.get("asked_at") or t0, finished_at=spec.get("finished_at") or t0,
                           finish_seq=self.study.finish_seq)
            self.study.next_number += 1
            self.session.add(row)
            out.append(row)
        self.session.flush()
        for spec, row in zip(specs, out, strict=True):
            for step, value in (spec.get("intermediate_values") or {}).items():
                self.session.add(IntermediateRow(study_id=self.study.id, trial_id=row.id, step=step, value=value,
                                                 should_prune=False, reported_at=t0))
        for row in out:
            if row.state == "failed" and not blameless(row.record):
                self.study.n_failed = (self.study.n_failed or 0) + 1
            if row.state == "complete":
                self.study.n_complete += 1
                if feasible(row.constraints) and better(row.value):
                    self.study.best_trial_id = row.id
                    self.study.best_value = row.value
        return out

    def definition(self) -> dict[str, Any]:
        """The study's stored definition, read in this transaction (the lock does not load it)."""
        return self.study.definition

    def grow(self, definition: dict[str, Any], key_of: Callable[[dict[str, Any], str, str], str]) -> None:
        """Store ``definition``, whose space has grown: the revision moves on (other processes'
        cached definitions are stale), every trial's configuration key is ``key_of(params, state, old
        key)`` under the new space, and the snapshots of the old space are deleted, so that no ask serves
        their candidates: until the first fit of the new space, asks draw from the study's
        quasi-random sequence."""
        st = self.study
        st.definition = definition
        st.revision = (st.revision or 0) + 1
        rows = self.session.execute(select(TrialRow.id, TrialRow.params, TrialRow.state, TrialRow.ukey)
                                    .where(TrialRow.study_id == st.id)).all()
        changed = [{"id": tid, "ukey": k} for tid, params, state, old in rows
                   if (k := key_of(params, state, old)) != old]
        if changed:
            self.session.execute(update(TrialRow), changed)  # by primary key, in executemany batches
        self.session.execute(delete(SnapshotRow).where(SnapshotRow.study_id == st.id))
        st.snapshot_version = 0
        st.snapshot_n_obs = 0
        st.snapshot_n_failed = 0
        st.fitted_at = None
        st.fit_error = None

    def set_state(self, state: dict[str, Any]) -> None:
        """The study's adaptive state after the tells of this transaction (``StudyState.to_dict``)."""
        self.study.state = state

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
