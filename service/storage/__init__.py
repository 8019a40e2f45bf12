"""Persistence: SQLAlchemy 2.0 models and the only code that writes SQL.

``models`` (the tables), ``db`` (engines, migrations), ``repo`` (Storage: sessions and the
per-study lock), ``studies`` / ``trials`` / ``fits`` (Storage's queries by concern, on what
``sessions`` declares of it), ``tx`` (StudyTx: one locked transaction on one study), ``info``
(what they hand out, and the rules about trials and times).
"""

from .db import make_engine, upgrade, write_engine
from .info import (
    EXPIRED,
    INTERRUPTED,
    FitInputs,
    Progress,
    StudyInfo,
    as_utc,
    best_trial_of,
    expired,
    failure_of,
    feasible,
    not_alive,
    now,
)
from .models import FINISHED_STATES, ORIGINS, TRIAL_STATES, SnapshotRow, StudyRow, TrialRow
from .repo import Storage
from .tx import StudyTx

__all__ = [
    "EXPIRED",
    "INTERRUPTED",
    "FINISHED_STATES",
    "ORIGINS",
    "TRIAL_STATES",
    "FitInputs",
    "Progress",
    "SnapshotRow",
    "Storage",
    "StudyInfo",
    "StudyRow",
    "StudyTx",
    "TrialRow",
    "as_utc",
    "best_trial_of",
    "failure_of",
    "feasible",
    "expired",
    "not_alive",
    "make_engine",
    "now",
    "upgrade",
    "write_engine",
]
