"""Studies on the wire: the create request and the views of a study."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool, StrictInt

from calibo.engine.acquisition import ACQUISITIONS
from calibo.engine.config import MAX_OBJECTIVES
from calibo.engine.limits import MAX_CHOICES, MAX_PARAM_NAME, MAX_PARAMS
from calibo.engine.outcomes import MAX_CONSTRAINTS
from calibo.engine.surrogates import SURROGATES

from ...studies.attrs import MAX_USER_ATTRS_BYTES, MAX_USER_ATTRS_KEYS
from .fields import (
    CLOSED_KEYS,
    STORABLE,
    Direction,
    Integral,
    Name,
    ParamName,
    RequestBody,
    UserAttrs,
)
from .settings import Pruner, StudySettings
from .space import BRANIN_SPACE, ParamSpec


class StudyCreate(RequestBody):
    name: Name = Field(examples=["branin-demo"])
    space: dict[ParamName, ParamSpec] = Field(
        max_length=MAX_PARAMS, json_schema_extra=CLOSED_KEYS,
        description=f"up to {MAX_PARAMS} parameters; at most {MAX_CHOICES} choices each and 2048 encoded "
        "features in all (numeric parameters plus every categorical choice). An empty space (an Optuna "
        "storage's new study) grows with PATCH .../space; its asks answer 409 `empty_space` until then",
        examples=[BRANIN_SPACE],
    )
    direction: Direction = "minimize"
    directions: Annotated[list[Direction], Field(min_length=2, max_length=MAX_OBJECTIVES)] | None = Field(
        None, description=f"several objectives (2 to {MAX_OBJECTIVES}), instead of direction: every completed "
        "trial is told `values`, one per objective, and the study's best trials are its Pareto front",
        examples=[["minimize", "minimize"]])
    surrogate: Literal[tuple(SURROGATES)] | None = Field(  # type: ignore[valid-type]  # a run-time tuple
        None, description="qgp (default), qgbm, qrf, ql, qe")
    acquisition: Literal[ACQUISITIONS] | None = Field(  # type: ignore[valid-type]  # a run-time tuple
        None, description="logei (default: log expected improvement on the calibrated distribution), ei, pi, "
        "ucb, ts, its, obs, mean")
    seed: Annotated[StrictInt, Field(ge=0, le=2**32 - 1), Integral] | None = Field(
        None, description="default: derived from the name")
    pruner: Pruner | None = Field(
        None, description="multi-fidelity early stopping of reported trials: a name or an object (default none)",
        examples=["sh+", {"name": "hb", "max_resource": 81, "reduction_factor": 3}])
    settings: StudySettings = Field(default_factory=StudySettings,
                                    examples=[{"n_warmup": 10, "ask_wait_seconds": 2.0}])
    constraints: list[ParamName] | None = Field(
        None, max_length=MAX_CONSTRAINTS, description=f"names of outcome constraints (at most {MAX_CONSTRAINTS}): "
        "every completed trial is told one value per constraint and is feasible when each is <= 0; the best "
        "trial is the best feasible one", examples=[["model_mb", "latency_ms"]])
    learn_failures: StrictBool = Field(
        True, description="failed trials train a calibrated model of where trials succeed, which weighs every "
        "candidate by its probability of success, and near-duplicates of a failed configuration are not asked "
        "again (docs: concepts/failures); false: failures are only recorded")
    user_attrs: UserAttrs | None = None

    def plain_space(self) -> dict[str, Any]:
        return {k: v.model_dump(exclude_unset=True) for k, v in self.space.items()}

    def plain_settings(self) -> dict[str, Any]:
        return self.settings.model_dump(exclude_none=True)

    def plain_pruner(self) -> Any:
        return self.pruner.plain() if self.pruner is not None else None


class TrialCounts(BaseModel):
    waiting: int = Field(0, description="enqueued, not handed out yet")
    running: int
    complete: int
    failed: int
    pruned: int
    total: int


class BestTrial(BaseModel):
    """The best *feasible* completed trial (the best completed one when the study has no constraints)."""

    id: int
    number: int
    params: dict[str, Any]
    value: float | None
    constraints: list[float] | None = None
    values: list[float] | None = None


class SurrogateStatus(BaseModel):
    snapshot_version: int | None = Field(description="newest stored fit; null before the first")
    fitted_on: int = Field(description="completed trials that fit saw")
    lag: int = Field(description="completed trials told since that fit")
    fitted_failures: int = Field(0, description="failed trials that fit learned from (none where the study "
                                 "does not learn from failures)")
    method: str | None = Field(description="raw, cv+, split, crossval or jab+")
    fitted_at: datetime | None
    fit_seconds: float | None
    fit_kind: str | None = Field(None, description="how that fit was made: full (the GP's hyperparameters tuned "
                                 "on the data), update (those of the newest full refit kept) or extend (the "
                                 "newest snapshot brought up to date at its own candidates)")
    device: str | None = Field(description="where that fit trained: cpu or cuda (torch surrogates)")
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
    constraints: list[list[AdaptivePair]] = Field([], description="each constraint's interval pairs")
    objectives: list[list[AdaptivePair]] = Field(
        [], description="a multi-objective study: the interval pairs of each objective after the first (the "
        "first objective's are `pairs`)")


class ParetoSummary(BaseModel):
    """A multi-objective study's front, in short (GET .../pareto has its trials)."""

    size: int = Field(description="non-dominated feasible completed trials")
    hypervolume: float = Field(description="the hypervolume they dominate up to reference_point")
    reference_point: list[float] | None = Field(description="the study's, or each objective's worst observed "
                                                "value plus a tenth of its observed range; null before any trial")


class StudyView(BaseModel):
    id: int
    name: str
    space: dict[str, Any]
    direction: Direction
    directions: list[Direction] | None = Field(None, description="a multi-objective study's directions")
    seed: int
    surrogate: str
    acquisition: str
    pruner: dict[str, Any] = Field(description="the pruner and its settings")
    constraints: list[str] = Field([], description="outcome constraint names")
    learn_failures: bool = Field(True, description="whether failed trials train the model of where trials succeed")
    user_attrs: dict[str, Any] = {}
    system_attrs: dict[str, Any] | None = Field(None, description="with `system_attrs=true`: the attributes kept "
                                                "apart from the user's (an Optuna storage's system attributes)")
    settings: dict[str, Any]
    removed_settings: dict[str, Any] | None = Field(None, description="settings the study was created with "
                                                    "that are no longer settings, with the values it named: it "
                                                    "runs with the constants they became (docs: settings)")
    created_at: datetime
    trials: TrialCounts
    best_trial: BestTrial | None = Field(description="the best feasible completed trial; null in a "
                                         "multi-objective study, whose best trials are its front (pareto)")
    pareto: ParetoSummary | None = Field(None, description="a multi-objective study's front")
    surrogate_status: SurrogateStatus
    adaptive: AdaptiveSummary


class StudySummary(BaseModel):
    """A study as listings show it: GET /v1/studies/{id} has the whole view."""

    id: int
    name: str
    direction: Direction
    directions: list[Direction] | None = None
    seed: int
    surrogate: str
    acquisition: str
    constraints: list[str] = []
    user_attrs: dict[str, Any] = {}
    system_attrs: dict[str, Any] | None = Field(None, description="with `system_attrs=true`")
    created_at: datetime
    trials: TrialCounts
    best_trial: BestTrial | None


class StudyPage(BaseModel):
    studies: list[StudySummary]
    total: int = Field(description="studies matching the query")
    limit: int
    offset: int


class CopyRequest(RequestBody):
    name: Name = Field(description="the new study's name (must not exist)")
    user_attrs: UserAttrs | None = None


AttrKey = Annotated[str, Field(max_length=MAX_PARAM_NAME, pattern=STORABLE)]


class StudyAttrsChange(RequestBody):
    """A change of a study's user attributes: keys to set (added or replaced) and keys to delete."""

    set: UserAttrs | None = Field(None, description="keys to add or replace, with their values; the study's "
                                  f"user_attrs after the change must stay within {MAX_USER_ATTRS_KEYS} keys and "
                                  f"{MAX_USER_ATTRS_BYTES // 1024} KiB", examples=[{"owner": "ml-team"}])
    delete: list[AttrKey] | None = Field(None, max_length=MAX_USER_ATTRS_KEYS,
                                         description="keys to remove (a key the study lacks is ignored)",
                                         examples=[["draft"]])


class SpaceGrowth(RequestBody):
    """New parameters, and existing ones' grown definitions: see ``PATCH /v1/studies/{study}/space``."""

    space: dict[ParamName, ParamSpec | None] = Field(
        min_length=1, max_length=MAX_PARAMS, json_schema_extra=CLOSED_KEYS,
        description="each parameter to add (a name the space lacks), or an existing parameter's whole new "
        "definition: more choices (a categorical's new ones go after the existing), a wider range, a "
        "condition's new parent values. Parameters left out stay as they are; null (removing one) is refused. "
        "The space after the change keeps create's bounds",
        examples=[{"booster": {"type": "categorical", "choices": ["gbtree", "linear", "dart"]},
                   "rate_drop": {"type": "float", "low": 0.0, "high": 0.5,
                                 "condition": {"parent": "booster", "values": ["dart"]}}}])

    def plain_space(self) -> dict[str, Any]:
        return {k: None if v is None else v.model_dump(exclude_unset=True) for k, v in self.space.items()}


class StudyAttrs(BaseModel):
    user_attrs: dict[str, Any] = Field(description="the study's user attributes after the change")


class StudySystemAttrs(BaseModel):
    system_attrs: dict[str, Any] = Field(description="the keys set, with their values (a study's system "
                                         "attributes may hold many: GET the study with `system_attrs=true`)")
