"""What a report does: store a learning-curve point and answer whether the study's pruner stops it.

The decision is ``engine.pruning.decide`` over every curve of the study as stored
when the report commits, taken under the study's lock (so reports and tells of
other replicas are ordered), and stored with the point: a repeated report of the
same step and value answers the stored decision, and the database alone
reproduces every answer.
"""

from __future__ import annotations

import math
from datetime import timedelta

from calibo.engine.pruning import Curve, decide, may_prune

from ..errors import Conflict, InvalidRequest
from ..storage import Storage, StudyTx, not_alive, now
from ..storage.models import TrialRow
from .definitions import StudyDef


def report(storage: Storage, sd: StudyDef, trial_id: int, step: int, value: float, heartbeat_timeout: float
           ) -> bool:
    if not math.isfinite(value):
        raise InvalidRequest("must be a finite number", field="value")
    with storage.locked(sd.id) as tx:
        trial = tx.trial(trial_id)
        stored = tx.report_at(trial_id, step)
        if stored is not None:  # idempotent per (trial, step), whatever the trial's state now
            if stored.value != value:
                raise Conflict(f"trial {trial.number} reported {stored.value!r} at step {step} already",
                               field="value", code="step_reported")
            return stored.should_prune
        if tx.keep_alive(trial, now() - timedelta(seconds=heartbeat_timeout)):  # a report is a heartbeat
            return _decide(tx, sd, trial, step, value)
    raise not_alive(trial, heartbeat_timeout)  # after the commit: a late report expires the trial


def _decide(tx: StudyTx, sd: StudyDef, trial: TrialRow, step: int, value: float) -> bool:
    prune = False
    if may_prune(sd.pruner, trial.number, step, tx.steps(trial.id), sd.seed):  # else no curve is read
        curves: dict[int, Curve] = {}
        for number, state, s, v in tx.curves():
            curves.setdefault(number, Curve(number, state)).values[s] = v
        curves.setdefault(trial.number, Curve(trial.number, trial.state)).values[step] = value
        prune = decide(sd.pruner, sd.direction, trial.number, step, list(curves.values()), sd.seed).should_prune
    tx.add_report(trial, step, value, prune)
    return prune
