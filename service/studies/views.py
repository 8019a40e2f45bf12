"""What clients see of trials and studies."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NotRequired, TypedDict

from calibo.engine import StudyState
from calibo.engine.config import migrate
from calibo.engine.prediction import public_prediction

from ..storage import StudyInfo, TrialRow, as_utc, failure_of, feasible


class AskedView(TypedDict):
    """A trial as an ask hands it out (``AskedTrial`` on the wire)."""

    id: int
    number: int
    study_id: int
    params: dict[str, Any]
    prediction: dict[str, Any] | None
    origin: NotRequired[str]
    user_attrs: NotRequired[dict[str, Any]]


class TrialView(TypedDict):
    """A trial as reads show it (``TrialView`` on the wire)."""

    id: int
    study_id: int
    number: int
    state: str
    params: dict[str, Any]
    value: float | None
    values: list[float] | None
    constraints: list[float] | None
    feasible: bool | None
    origin: str
    failure: str | None
    user_attrs: dict[str, Any]
    system_attrs: dict[str, Any]
    distributions: dict[str, Any] | None
    prediction: dict[str, Any] | None
    worker_id: str | None
    asked_at: datetime | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    intermediate_values: dict[str, float] | None  # asked for (``curves=true`` on a read): the points


class PairState(TypedDict):
    coverage: float
    target_alpha: float
    alpha: float
    steps: int


class AdaptiveSummary(TypedDict):
    """Each outcome's interval pairs: the objective's, each constraint's, each further objective's."""

    pairs: list[PairState]
    constraints: list[list[PairState]]
    objectives: list[list[PairState]]


class StudySummary(TypedDict):
    """A study as listings show it (``StudySummary`` on the wire)."""

    id: int
    name: str
    direction: str
    directions: list[str] | None
    seed: int
    surrogate: str
    acquisition: str
    constraints: list[Any]
    user_attrs: dict[str, Any]
    system_attrs: NotRequired[dict[str, Any]]
    created_at: datetime
    trials: dict[str, int]
    best_trial: dict[str, Any] | None


class EnqueuedView(TypedDict):
    """A trial as an enqueue answers it (``EnqueuedTrial`` on the wire)."""

    id: int
    number: int
    params: dict[str, Any]
    state: str
    origin: str
    user_attrs: dict[str, Any]


class HypervolumePoint(TypedDict):
    trials: int
    hypervolume: float


class Front(TypedDict):
    """A multi-objective study's front (``studies.pareto``): its trials' ids, their hypervolume, the
    reference point, and with a history the hypervolume over trials."""

    ids: list[int]
    size: int
    hypervolume: float
    reference_point: list[float] | None
    history: NotRequired[list[HypervolumePoint]]


class ParetoView(TypedDict):
    """``GET /v1/studies/{study}/pareto`` (``ParetoFront`` on the wire)."""

    study_id: int
    directions: list[str]
    trials: list[TrialView]
    hypervolume: float
    reference_point: list[float] | None
    history: list[HypervolumePoint]


class ImportanceView(TypedDict):
    """``GET /v1/studies/{study}/importance`` (``Importance`` on the wire)."""

    importances: list[dict[str, Any]]
    n_trials: int
    objective: int
    method: str | None
    fit: dict[str, Any] | None
    seconds: float
    computed_at: str | None
    cached: bool
    reason: NotRequired[str]


class CalibrationInterval(TypedDict):
    coverage: float
    alpha: float
    lower: float
    upper: float
    covered: bool
    width: float


class CalibratedTrial(TypedDict):
    """A completed trial's prediction at ask against its outcome."""

    trial_id: int
    number: int
    method: str
    value: float
    mean: float | None
    levels: list[float] | None
    quantiles: list[float] | None
    intervals: list[CalibrationInterval]
    beta: list[float] | None


class CalibrationBlock(TypedDict):
    """One outcome's calibration (a further objective's, a constraint's)."""

    name: str
    n: int
    cumulative_coverage: list[float]
    rolling_coverage: list[float]
    alpha_trajectory: list[list[float]]
    summary: dict[str, Any]
    conformal: dict[str, Any]
    current_alpha: list[float]
    direction: NotRequired[str]


class CalibrationView(TypedDict):
    """``GET /v1/studies/{study}/calibration`` (``Calibration`` on the wire)."""

    study_id: int
    n: int
    nominal: list[float]
    trials: list[CalibratedTrial]
    current_alpha: list[float]
    summary: dict[str, Any]
    conformal: dict[str, Any]
    cumulative_coverage: list[float]
    rolling_coverage: list[float]
    alpha_trajectory: list[list[float]]
    window: NotRequired[int]
    objectives: NotRequired[list[CalibrationBlock]]
    constraints: NotRequired[list[CalibrationBlock]]


def asked_view(t: TrialRow) -> AskedView:
    """A trial as the ask that created it answered it."""
    out: AskedView = {"id": t.id, "number": t.number, "study_id": t.study_id, "params": t.params,
           "prediction": public_prediction(t.prediction)}
    if t.origin is not None:
        out["origin"] = t.origin
    if t.user_attrs:
        out["user_attrs"] = t.user_attrs
    return out


def trial_view(t: TrialRow) -> TrialView:
    return {
        "id": t.id,
        "study_id": t.study_id,
        "number": t.number,
        "state": t.state,
        "params": t.params,
        "value": t.value if t.values is None else None,  # a multi-objective trial has values only
        "values": t.values,
        "constraints": t.constraints,
        "feasible": None if t.constraints is None else feasible(t.constraints),
        "origin": t.origin or "asked",
        "failure": failure_of(t),
        "user_attrs": t.user_attrs or {},
        "system_attrs": t.system_attrs or {},
        "distributions": t.distributions,
        "prediction": public_prediction(t.prediction),
        "worker_id": t.worker_id,
        "asked_at": as_utc(t.asked_at),
        "started_at": started_at(t),
        "heartbeat_at": as_utc(t.heartbeat_at),
        "finished_at": as_utc(t.finished_at),
        "intermediate_values": None,
    }


def started_at(t: TrialRow) -> datetime | None:
    """When ``t`` started running: its own start where one was set (a trial its caller runs, an imported
    one's), else its ask's; None for a waiting trial that has not started."""
    if t.started_at is not None:
        return as_utc(t.started_at)
    return None if t.state == "waiting" else as_utc(t.asked_at)


class StudyView(TypedDict):
    """A study as its read shows it (``StudyView`` on the wire)."""

    id: int
    name: str
    space: dict[str, Any]
    direction: str
    directions: list[str] | None
    seed: int
    surrogate: str
    acquisition: str
    pruner: dict[str, Any]
    constraints: list[Any]
    learn_failures: bool
    user_attrs: dict[str, Any]
    system_attrs: NotRequired[dict[str, Any]]
    settings: dict[str, Any]
    removed_settings: dict[str, Any] | None
    created_at: datetime
    trials: dict[str, int]
    best_trial: dict[str, Any] | None
    pareto: dict[str, Any] | None
    surrogate_status: dict[str, Any]
    adaptive: dict[str, Any]


def study_view(info: StudyInfo, default_ask_wait: float, fit: dict[str, bool],
               pareto: Front | None = None) -> StudyView:
    """The study view of the wire contract; ``fit`` is the fit pool's status for the study;
    ``pareto`` a multi-objective study's front (``studies.pareto``)."""
    d = info.definition
    config, removed = migrate(d["config"])
    surrogate, acquisition = config.pop("surrogate"), config.pop("acquisition")
    service = d.get("service", {})
    wait = service.get("ask_wait_seconds")
    settings = {**config, **service,
                "ask_wait_seconds": default_ask_wait if wait is None else wait}
    return {
        "id": info.id,
        "name": info.name,
        "space": d["space"],
        "direction": d["direction"],
        "directions": d.get("directions"),
        "seed": d["seed"],
        "surrogate": surrogate,
        "acquisition": acquisition,
        "pruner": d.get("pruner") or {"name": "none"},
        "constraints": d.get("constraints", []),
        "learn_failures": d.get("learn_failures", True) is not False,
        "user_attrs": info.user_attrs or {},
        "settings": settings,
        # settings the study was created with that are no longer settings: it runs with their constants
        "removed_settings": removed or None,
        "created_at": info.created_at,
        "trials": info.counts,
        "best_trial": info.best_trial,
        "pareto": None if pareto is None else {"size": pareto["size"], "hypervolume": pareto["hypervolume"],
                                               "reference_point": pareto["reference_point"]},
        "surrogate_status": {
            "snapshot_version": info.snapshot_version or None,
            "fitted_on": info.snapshot_n_obs,
            "lag": max(0, info.n_complete - info.snapshot_n_obs),  # fed pruned values count in n_obs
            "fitted_failures": info.snapshot_n_failed,
            "method": info.fit_method,
            "fitted_at": info.fitted_at,
            "fit_seconds": info.fit_seconds,
            "fit_kind": info.fit_kind,
            "device": info.fit_device,
            "last_error": info.fit_error,
            **fit,
        },
        "adaptive": {"adapter": config["adapter"], **adaptive_summary(StudyState.from_dict(info.state))},
    }


def adaptive_summary(state: StudyState) -> AdaptiveSummary:
    """Each outcome's per-pair states: target and current alpha, steps taken."""
    def pairs(states: list[Any]) -> list[PairState]:
        return [{"coverage": round(1.0 - s.target, 10), "target_alpha": s.target, "alpha": s.alpha,
                 "steps": s.steps} for s in states]

    return {"pairs": pairs(state.states), "constraints": [pairs(hs) for hs in state.constraints],
            "objectives": [pairs(hs) for hs in state.objectives]}


def study_summary(info: StudyInfo) -> StudySummary:
    """A study as listings show it (no space, settings or adaptive state)."""
    d = info.definition
    return {"id": info.id, "name": info.name, "direction": d["direction"], "directions": d.get("directions"),
            "seed": d["seed"],
            "surrogate": d["config"]["surrogate"], "acquisition": d["config"]["acquisition"],
            "constraints": d.get("constraints", []), "user_attrs": info.user_attrs or {},
            "created_at": info.created_at, "trials": info.counts, "best_trial": info.best_trial}
