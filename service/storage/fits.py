"""Fits: what a fit reads, the snapshots it writes, and the studies that need one."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update

from ..errors import NotFound
from .info import FitInputs, blameless, now
from .models import SnapshotRow, StudyRow, TrialRow
from .sessions import Sessions

SNAPSHOTS_KEPT = 3  # newest snapshots per study; older ones are deleted when a fit lands


class FitQueries(Sessions):
    """:class:`~calibo.server.storage.Storage`'s fit methods, mixed into it (they use its
    ``_read``, ``_write`` and ``locked``)."""

    def fit_inputs(self, study_id: int) -> FitInputs | None:
        """What a fit of ``study_id`` needs, or None if the study is gone."""
        with self._read() as s:
            row = s.execute(select(StudyRow.definition, StudyRow.snapshot_n_obs, StudyRow.revision,
                                   StudyRow.snapshot_n_failed, StudyRow.snapshot_version)
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
            # the failed configurations, but for trials the service failed because their worker fell silent
            failed = [p for p, record in s.execute(select(TrialRow.params, TrialRow.record)
                                                   .where(TrialRow.study_id == study_id, TrialRow.state == "failed")
                                                   .order_by(TrialRow.number))
                      if not blameless(record)]
            # what a fit keeps of the newest snapshot: its tuned hyperparameters (engine.retune) and,
            # where it has them, the snapshot itself, which the fit may extend (engine.extend)
            newest = s.execute(select(SnapshotRow.tuned, SnapshotRow.data)
                               .where(SnapshotRow.study_id == study_id, SnapshotRow.version == row[4])
                               ).first() if row[4] else None
            tuned, previous = (newest[0], newest[1]) if newest is not None else (None, None)
            if tuned is None:  # a fit that keeps no hyperparameters makes no snapshot to extend
                previous = None
            return FitInputs(row[0], observations, row[1], list(running),
                             constraints if constrained else None, int(row[2] or 0), failed, int(row[3] or 0),
                             tuned, previous)

    def save_snapshot(self, study_id: int, *, n_obs: int, method: str, fit_seconds: float,
                      data: bytes, device: str | None = None, revision: int | None = None,
                      n_failed: int = 0, kind: str = "full", tuned: dict[str, Any] | None = None) -> int | None:
        """Store a fit's snapshot if it is newer than the study's; return its version. A fit on
        ``n_obs`` observations and ``n_failed`` failures is newer when it saw more observations, or
        as many and more failures (both only grow). ``revision``: the definition's revision the fit
        read (``FitInputs.revision``); a fit of a space that has grown since is not stored (its
        candidates lack the new parameters). ``kind``: ``full`` or ``update``; ``tuned``: the
        hyperparameters the next fit keeps (``engine.retune``)."""
        try:
            with self.locked(study_id) as tx:
                st = tx.study
                stale = (n_obs, n_failed) <= (st.snapshot_n_obs, st.snapshot_n_failed or 0)
                if stale or (revision is not None and revision != st.revision):
                    return None
                version = st.snapshot_version + 1
                tx.session.add(SnapshotRow(study_id=study_id, version=version, n_obs=n_obs, method=method,
                                           fit_seconds=fit_seconds, device=device, created_at=now(),
                                           data=data, kind=kind, tuned=tuned))
                st.snapshot_version = version
                st.snapshot_n_obs = n_obs
                st.snapshot_n_failed = n_failed
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
