"""Persistence: SQLAlchemy 2.0 models and the only code that writes SQL."""

from .db import make_engine, upgrade, write_engine
from .models import FINISHED_STATES, ORIGINS, TRIAL_STATES, SnapshotRow, StudyRow, TrialRow
from .repo import (
    EXPIRED,
    FitInputs,
    Storage,
    StudyInfo,
    StudyTx,
    as_utc,
    best_trial_of,
    expired,
    feasible,
    not_alive,
    now,
)

__all__ = [
    "EXPIRED",
    "FINISHED_STATES",
    "ORIGINS",
    "TRIAL_STATES",
    "FitInputs",
    "SnapshotRow",
    "Storage",
    "StudyInfo",
    "StudyRow",
    "StudyTx",
    "TrialRow",
    "as_utc",
    "best_trial_of",
    "feasible",
    "expired",
    "not_alive",
    "make_engine",
    "now",
    "upgrade",
    "write_engine",
]
