"""The wire contract (v1) as pydantic models: every request and answer body, in one place."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

Direction = Literal["minimize", "maximize"]
TrialState = Literal["running", "complete", "failed", "pruned"]

BRANIN_SPACE = {"x1": {"type": "float", "low": -5, "high": 10},
                "x2": {"type": "float", "low": 0, "high": 15}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- errors
class ErrorDetail(BaseModel):
    code: str = Field(examples=["invalid_request"])
    message: str = Field(examples=["low must be strictly less than high"])
    field: str | None = Field(None, examples=["space.x1.low"])


class ErrorBody(BaseModel):
    error: ErrorDetail


# --------------------------------------------------------------- studies
class StudyCreate(_Request):
    name: str = Field(min_length=1, max_length=255, examples=["branin-demo"])
    space: dict[str, Any] = Field(
        description='{"name": {"type": "float"|"int"|"categorical"|"ordinal", "low", "high", "log", "choices"}}',
        examples=[BRANIN_SPACE],
    )
    direction: Direction = "minimize"
    surrogate: str | None = Field(None, description="qgp (default), qgbm, qrf, ql, qe")
    acquisition: str | None = Field(None, description="pi (default), ei, ucb, ts, obs, mean")
    seed: StrictInt | None = Field(None, ge=0, le=2**32 - 1, description="default: derived from the name")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="engine settings (n_warmup, n_candidates, adapter, conformal, n_levels, levels, ...) and "
        "service settings: ask_wait_seconds (how long an ask by a sequential user may wait for a fit "
        "covering the latest tells), heartbeat_timeout_seconds (running trials silent for longer are "
        "failed)",
        examples=[{"n_warmup": 10, "ask_wait_seconds": 2.0}],
    )


class TrialCounts(BaseModel):
    running: int
    complete: int
    failed: int
    pruned: int
    total: int


class BestTrial(BaseModel):
    id: int
    number: int
    params: dict[str, Any]
    value: float | None


class SurrogateStatus(BaseModel):
    snapshot_version: int | None = Field(description="newest stored fit; null before the first")
    fitted_on: int = Field(description="completed trials that fit saw")
    lag: int = Field(description="completed trials told since that fit")
    method: str | None = Field(description="raw, cv+ or split")
    fitted_at: datetime | None
    fit_seconds: float | None
    last_error: str | None
    fitting: bool = Field(description="a fit of this study is running in this server's pool")
    queued: bool = Field(description="another fit will follow it")


class AdaptivePair(BaseModel):
    coverage: float = Field(description="nominal coverage of the interval pair")
    target_alpha: float
    alpha: float = Field(description="current miscoverage after ACI/DtACI")
    steps: int


class AdaptiveSummary(BaseModel):
    adapter: str
    pairs: list[AdaptivePair]


class StudyView(BaseModel):
    id: int
    name: str
    space: dict[str, Any]
    direction: Direction
    seed: int
    surrogate: str
    acquisition: str
    settings: dict[str, Any]
    created_at: datetime
    trials: TrialCounts
    best_trial: BestTrial | None
    surrogate_status: SurrogateStatus
    adaptive: AdaptiveSummary


class StudyList(BaseModel):
    studies: list[StudyView]


# ---------------------------------------------------------------- trials
class AskRequest(_Request):
    count: StrictInt = Field(1, ge=1, le=256, description="how many configurations (distinct, kept apart)")
    worker_id: str | None = Field(None, max_length=255, examples=["gpu-node-3/pid-4121"])


class AskedTrial(BaseModel):
    id: int
    number: int
    params: dict[str, Any]
    prediction: dict[str, Any] | None = Field(
        description="calibrated quantiles, mean and intervals the configuration was chosen on; "
        "null during the quasi-random warm start"
    )


class AskResponse(BaseModel):
    trials: list[AskedTrial]


class TellRequest(_Request):
    value: StrictFloat | None = Field(None, allow_inf_nan=False, examples=[0.3979])
    state: Literal["complete", "failed", "pruned"] | None = Field(
        None, description="default complete (needs value); failed or pruned"
    )


class TrialView(BaseModel):
    id: int
    study_id: int
    number: int
    state: TrialState
    params: dict[str, Any]
    value: float | None
    prediction: dict[str, Any] | None
    worker_id: str | None
    asked_at: datetime
    heartbeat_at: datetime | None
    finished_at: datetime | None


class TrialPage(BaseModel):
    trials: list[TrialView]
    total: int
    limit: int
    offset: int


class Health(BaseModel):
    status: Literal["ok"]
