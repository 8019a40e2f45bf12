"""What the storage hands out, detached from any session (a study with its counts, a fit's inputs,
a running trial), and the rules it keeps about trials and times."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, overload

from ..errors import Conflict
from .models import TrialRow

EXPIRED = "heartbeat timeout"  # the ``reason`` recorded on a running trial failed for silence
INTERRUPTED = "interrupted"  # the ``reason`` recorded on a trial told failed because its run was stopped


def expired(trial: TrialRow) -> bool:
    """Failed by the service because its worker fell silent, not told by anyone."""
    return trial.state == "failed" and (trial.record or {}).get("reason") == EXPIRED


def failure_of(trial: TrialRow) -> str | None:
    """How a failed trial failed: ``crashed`` (its run failed: the study learns from it),
    ``interrupted`` (its run was stopped from outside) or ``expired`` (its worker fell silent); None
    for a trial that did not fail."""
    if trial.state != "failed":
        return None
    reason = (trial.record or {}).get("reason")
    return "expired" if reason == EXPIRED else "interrupted" if reason == INTERRUPTED else "crashed"


def blameless(record: dict[str, Any] | None) -> bool:
    """A failed trial's record says it was not its configuration that failed (the service failed it
    for silence, or its run was interrupted): no fit learns from it."""
    return (record or {}).get("reason") in (EXPIRED, INTERRUPTED)


def not_alive(trial: TrialRow, timeout: float) -> Conflict:
    """The answer to a sign of life of a trial that is no longer running (``StudyTx.keep_alive``)."""
    if expired(trial):
        return Conflict(f"trial {trial.id} expired: no heartbeat for over {timeout:g} s; its result "
                        "can still be told", field="trial_id", code="trial_expired")
    return Conflict(f"trial {trial.id} is already {trial.state}", field="trial_id", code="trial_finished")


def now() -> datetime:
    return datetime.now(UTC)


@overload
def as_utc(t: datetime) -> datetime: ...
@overload
def as_utc(t: None) -> None: ...
@overload
def as_utc(t: datetime | None) -> datetime | None: ...


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
    state: dict[str, Any]  # the engine's StudyState.to_dict()
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
    fit_kind: str | None = None  # full, update (engine.retune) or extend (engine.extend)
    user_attrs: dict[str, Any] | None = None
    system_attrs: dict[str, Any] | None = None  # an Optuna storage's (CaliboStorage)
    revision: int = 0  # changes of the definition (its space grew)
    n_failed: int = 0  # failed trials a fit learns from (not those failed for a silent worker)
    snapshot_n_failed: int = 0  # how many of them the newest snapshot learned


@dataclass
class FitInputs:
    definition: dict[str, Any]
    # completed trials, by trial number: a value each, or a multi-objective study's list of them
    observations: list[tuple[dict[str, Any], float | list[float]]]
    snapshot_n_obs: int
    running: list[dict[str, Any]] = field(default_factory=list)  # params of the running trials, by number
    constraints: list[list[float]] | None = None  # each observation's constraint values (constrained studies)
    revision: int = 0  # the definition's revision: a snapshot fitted on another is not saved
    failed: list[dict[str, Any]] = field(default_factory=list)  # params of the failed trials a fit learns from
    snapshot_n_failed: int = 0  # failures the newest snapshot learned
    tuned: dict[str, Any] | None = None  # the newest snapshot's hyperparameters for the next fit (engine.retune)
    previous: bytes | None = None  # the newest snapshot itself where it kept hyperparameters: a fit may extend it


class Progress(NamedTuple):
    """Where a study's newest snapshot stands against its trials (``Storage.progress``)."""

    n_complete: int
    fitted_on: int  # observations the newest snapshot saw
    running: int
    n_failed: int = 0  # failures a fit learns from
    fitted_failures: int = 0  # how many of them the newest snapshot learned
    trial_seconds: float | None = None  # with ``pace``: the median trial's run time
    fit_seconds: float | None = None  # with ``pace``: the newest fit's time


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
    origin: str | None = None  # added: its caller runs it and sets its parameters (they may be some only)
