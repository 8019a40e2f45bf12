"""Trials on the wire: ask, tell, enqueue, add, report, and the views of trials and curves."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, StrictBool, StrictInt, Tag

from calibo.engine.config import MAX_OBJECTIVES
from calibo.engine.limits import MAX_PARAMS

from .fields import (
    CLOSED_KEYS,
    Choice,
    Direction,
    Distributions,
    Integral,
    Name,
    ParamName,
    Real,
    RequestBody,
    Steps,
    TrialState,
    UserAttrs,
    Values,
)

MAX_COUNT = 256


class AskRequest(RequestBody):
    count: Annotated[StrictInt, Field(ge=1, le=MAX_COUNT), Integral] = Field(
        default=1, description="how many configurations (distinct, kept apart)")
    worker_id: Name | None = Field(default=None, examples=["gpu-node-3/pid-4121"])
    user_attrs: UserAttrs | None = Field(default=None, description="set on every trial this ask hands out "
                                         "(merged into an enqueued trial's own)")


class AskedTrial(BaseModel):
    id: int
    number: int
    study_id: int
    params: dict[str, Any] = Field(description="the active parameters")
    origin: Literal["enqueued"] | None = Field(None, description="enqueued: handed out from the queue")
    user_attrs: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = Field(
        description="calibrated quantiles, mean and intervals the configuration was chosen on (an "
        "interval's end is null where it is unbounded: too few scores for its coverage); null during the "
        "quasi-random warm start"
    )


class AskResponse(BaseModel):
    trials: list[AskedTrial]


Objectives = Annotated[list[Real], Field(min_length=2, max_length=MAX_OBJECTIVES)]


class TellRequest(RequestBody):
    value: Real | None = Field(None, examples=[0.3979])
    values: Objectives | None = Field(None, description="a multi-objective study's objectives, one per "
                                      "direction (instead of value)")
    state: Literal["complete", "failed", "pruned"] | None = Field(
        None, description="default complete (needs value); failed or pruned"
    )
    constraints: Values | None = Field(None, description="one value per study constraint, in order; feasible "
                                       "when each is <= 0 (a completed trial of a constrained study needs them)")
    user_attrs: UserAttrs | None = Field(None, description="merged into the trial's attributes")
    interrupted: StrictBool = Field(
        False, description="with state failed: the run was stopped from outside (a signal, a shutdown, "
        "parameters other than suggested), not by its configuration; the study's model of where trials "
        "succeed does not learn from it")


class EnqueueRequest(RequestBody):
    params: dict[ParamName, Choice] = Field(max_length=MAX_PARAMS, json_schema_extra=CLOSED_KEYS,
                                            description="all of a configuration's "
                                            "parameters, or some: the others are chosen when an ask hands it out",
                                            examples=[{"C": 10.0, "kernel": "rbf"}])
    skip_if_exists: StrictBool = Field(True, description="answer the existing trial (200) when one already has "
                                       "these parameter values, instead of enqueueing another")
    user_attrs: UserAttrs | None = None


class EnqueuedTrial(BaseModel):
    id: int
    number: int
    params: dict[str, Any]
    state: TrialState
    origin: str
    user_attrs: dict[str, Any] = {}


MAX_ADDED = 1000


class AddedTrial(RequestBody):
    params: dict[ParamName, Choice] = Field(max_length=MAX_PARAMS, json_schema_extra=CLOSED_KEYS,
                                            description="exactly the active parameters; a running or waiting "
                                            "trial: those set so far (PATCH the trial to set more)")
    value: Real | None = Field(None, description="the objective (a completed trial)")
    values: Objectives | None = Field(None, description="a multi-objective study's objectives (instead of value)")
    state: Literal["complete", "failed", "pruned", "running", "waiting"] | None = Field(
        None, description="complete (default, needs value), failed (no value) or pruned (a single-objective "
        "trial's last reported value, optionally); running: a trial the caller runs itself, choosing its "
        "parameters (define-by-run: PATCH sets them, tell ends it); waiting: one that starts later (PATCH "
        "`state: running` starts it)")
    constraints: Values | None = Field(None, description="one value per study constraint (a completed trial "
                                       "of a constrained study needs them)")
    user_attrs: UserAttrs | None = None
    system_attrs: UserAttrs | None = Field(None, description="attributes kept apart from the user's (an Optuna "
                                           "storage's system attributes); the bounds of user_attrs")
    distributions: Distributions | None = None
    intermediate_values: Steps | None = None
    started_at: datetime | None = Field(None, description="when it started (an imported trial's; default: now "
                                        "for a running or finished one, none for a waiting one); no zone: UTC")
    finished_at: datetime | None = Field(None, description="when a finished trial finished (default: now)")


class AddTrialsRequest(RequestBody):
    trials: list[AddedTrial] = Field(min_length=1, max_length=MAX_ADDED,
                                     description=f"1 to {MAX_ADDED} trials, stored all or none")


def _add_shape(v: Any) -> str:
    return "batch" if isinstance(v, dict) and "trials" in v else "single"


# one trial or {"trials": [...]}, told apart by the key: a bad field is reported in the shape sent
# (the union alone reported both shapes' errors, the batch's first)
AddBody = Annotated[Annotated[AddTrialsRequest, Tag("batch")] | Annotated[AddedTrial, Tag("single")],
                    Discriminator(_add_shape)]
UNION_TAGS = frozenset({"batch", "single"})  # not part of a field's name (api.errors)


class ReportRequest(RequestBody):
    step: Annotated[StrictInt, Field(ge=0, le=1_000_000_000), Integral] = Field(
        description="the resource so far: epochs, iterations...")
    value: Real = Field(description="the objective at that step (same direction as the study's)",
                        examples=[0.231])


class ReportResponse(BaseModel):
    should_prune: bool = Field(description="stop this trial now (then tell it with state pruned)")


class TrialChange(RequestBody):
    """A change of a trial its caller runs itself (added running or waiting): see PATCH .../trials/{tid}."""

    params: dict[ParamName, Choice] | None = Field(
        None, max_length=MAX_PARAMS, json_schema_extra=CLOSED_KEYS,
        description="parameters to set or replace (known to the space, valid values, active as the "
        "trial's parameters set so far make them)", examples=[{"lr": 0.01}])
    distributions: Distributions | None = None
    user_attrs: UserAttrs | None = Field(None, description="merged into the trial's")
    system_attrs: UserAttrs | None = Field(None, description="merged into the trial's system attributes")
    intermediate_values: Steps | None = Field(None, description="learning-curve points set or replaced (no "
                                              "pruning decision: POST .../report asks the study's pruner)")
    state: Literal["running"] | None = Field(None, description="running: start a waiting trial (409 "
                                             "`trial_running` when it has started already)")


class CurveView(BaseModel):
    trial_id: int
    number: int
    state: TrialState
    steps: list[int]
    values: list[float]


class CurvePage(BaseModel):
    curves: list[CurveView] = Field(description="learning curves of reported trials, by trial number")
    total: int = Field(description="trials with reports")
    limit: int
    offset: int


class TrialView(BaseModel):
    id: int
    study_id: int
    number: int
    state: TrialState
    params: dict[str, Any]
    value: float | None
    values: list[float] | None = None
    constraints: list[float] | None = None
    feasible: bool | None = Field(None, description="every constraint <= 0 (null without constraints)")
    origin: Literal["asked", "enqueued", "added", "copied"] = "asked"
    failure: Literal["crashed", "interrupted", "expired"] | None = Field(
        None, description="a failed trial: crashed (its run failed; the study learns from it unless created "
        "with learn_failures false), interrupted (told so: stopped from outside) or expired (no heartbeat "
        "within the timeout); null otherwise")
    user_attrs: dict[str, Any] = {}
    system_attrs: dict[str, Any] = Field({}, description="attributes kept apart from the user's (an Optuna "
                                         "storage's system attributes)")
    distributions: dict[str, Any] | None = Field(None, description="the distribution each parameter was drawn "
                                                 "from, where its caller gave one (null: the study's space)")
    prediction: dict[str, Any] | None
    worker_id: str | None
    asked_at: datetime
    started_at: datetime | None = Field(None, description="when it started running (null: a waiting trial)")
    heartbeat_at: datetime | None
    finished_at: datetime | None
    intermediate_values: dict[str, float] | None = Field(None, description="with `curves=true`: the "
                                                         "learning-curve points, step (as a key) -> value")


class TrialList(BaseModel):
    trials: list[TrialView]


class HypervolumePoint(BaseModel):
    trials: int = Field(description="completed trials so far")
    hypervolume: float


class ParetoView(BaseModel):
    """A multi-objective study's Pareto front: its non-dominated (feasible) completed trials."""

    study_id: int
    directions: list[Direction]
    trials: list[TrialView] = Field(description="the front, by trial number")
    hypervolume: float = Field(description="the front's hypervolume up to reference_point")
    reference_point: list[float] | None = Field(description="the study's (settings.reference_point), or each "
                                                "objective's worst observed value plus a tenth of its observed "
                                                "range (null before any completed trial)")
    history: list[HypervolumePoint] = Field(description="the hypervolume after each completed trial, against "
                                            "this reference point (at most 200 points, evenly spread)")


class TrialPage(BaseModel):
    trials: list[TrialView]
    total: int
    limit: int
    offset: int
