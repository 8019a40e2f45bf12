"""The wire contract (v1) as pydantic models: every request and answer body, in one place.

Request models say in their JSON Schema exactly what the server accepts:
every size and number is bounded (the engine's bounds come from
``calibo.engine.limits``), integers are JSON integers (``1.0`` is one,
``"1"`` and ``true`` are not), floats are finite JSON numbers, and names are
strings without control characters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    WithJsonSchema,
    create_model,
)
from typing_extensions import TypeAliasType

from calibo.engine.acquisition import ACQUISITIONS
from calibo.engine.adaptive import ADAPTERS
from calibo.engine.crowd import CROWD_MODES
from calibo.engine.limits import (
    INT_SETTINGS,
    MAX_CHOICE_TEXT,
    MAX_CHOICES,
    MAX_PARAM_NAME,
    MAX_PARAMS,
    OPEN_RANGES,
    SETTING_RANGES,
    SURROGATE_CHOICES,
    SURROGATE_OPTIONS,
    bad_text,
)
from calibo.engine.optimizer import (
    CONFORMAL_MODES,
    EARLY_SCORES,
    INCUMBENTS,
    MAX_CONSTRAINTS,
    MAX_OBJECTIVES,
    SPLIT_SCORES,
    WARP_REFERENCES,
)
from calibo.engine.pruning import PRUNERS
from calibo.engine.shift import SHIFT_MODES
from calibo.engine.surrogates import SURROGATES
from calibo.engine.warp import WARPS

from ..studies import SERVICE_SETTINGS
from ..studies.attrs import MAX_DEPTH, MAX_USER_ATTRS_BYTES, MAX_USER_ATTRS_KEYS, storable_attrs

Direction = Literal["minimize", "maximize"]
TrialState = Literal["waiting", "running", "complete", "failed", "pruned"]

BRANIN_SPACE = {"x1": {"type": "float", "low": -5, "high": 10},
                "x2": {"type": "float", "low": 0, "high": 15}}

# what a name may not contain, for the JSON Schema (the validator also refuses unpaired surrogates)
NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"
MAX_NAME = 255  # study names and worker ids
IDEMPOTENCY_KEY = r"^[A-Za-z0-9_-]{1,64}$"


def _integral(v: Any) -> Any:
    """A JSON integer: an int, or a float with no fraction (JSON Schema's reading); not str or bool."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("must be an integer")
    if isinstance(v, float):
        if not v.is_integer():
            raise ValueError("must be an integer")
        return int(v)
    return v


def _text(v: Any) -> Any:
    if isinstance(v, str):
        why = bad_text(v)
        if why is not None:
            raise ValueError(why)
    return v


def json_int(**bounds: Any) -> Any:
    """A JSON integer within ``bounds`` (ge/le/gt/lt); bounds must come before the validator for the
    JSON Schema to show them as minimum/maximum."""
    return Annotated[StrictInt, Field(**bounds), BeforeValidator(_integral)]


JsonInt = json_int()
Real = Annotated[StrictFloat, Field(allow_inf_nan=False)]
Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME, pattern=NO_CONTROL), BeforeValidator(_text)]
ParamName = Annotated[str, Field(min_length=1, max_length=MAX_PARAM_NAME, pattern=NO_CONTROL),
                      BeforeValidator(_text)]
Choice = (Annotated[StrictStr, Field(max_length=MAX_CHOICE_TEXT, pattern=NO_CONTROL), BeforeValidator(_text)]
          | Real | JsonInt | StrictBool | None)


# a map keyed by parameter names: a key the name pattern refuses is refused (the JSON Schema's
# patternProperties alone would let it through as an additional property)
CLOSED_KEYS = {"additionalProperties": False}

class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# What user attributes may hold, as JSON Schema can say it (``storable_attrs`` checks the rest: at
# most MAX_DEPTH deep, finite numbers, MAX_USER_ATTRS_BYTES in all, and gives the precise error).
STORABLE = r"^[^\x00]*$"  # unpaired surrogates are refused too; a JSON Schema regex cannot name them
AttrText = Annotated[str, WithJsonSchema({"type": "string", "pattern": STORABLE})]
AttrValue = TypeAliasType(  # type: ignore[misc]
    "AttrValue", "AttrText | float | int | bool | None | list[AttrValue] "
    "| Annotated[dict[AttrText, AttrValue], Field(json_schema_extra=CLOSED_KEYS)]")
UserAttrs = Annotated[dict[Annotated[str, Field(max_length=MAX_PARAM_NAME),
                                     WithJsonSchema({"type": "string", "maxLength": MAX_PARAM_NAME,
                                                     "pattern": STORABLE})], AttrValue],
                      Field(max_length=MAX_USER_ATTRS_KEYS, json_schema_extra=CLOSED_KEYS,
                            description=f"a JSON object of at most {MAX_USER_ATTRS_KEYS} keys and "
                            f"{MAX_USER_ATTRS_BYTES // 1024} KiB as compact JSON, nested at most {MAX_DEPTH} deep, "
                            "finite numbers, strings and keys without NUL or unpaired surrogates: run ids, git "
                            "hashes, artifact paths...", examples=[{"git": "4f2a9c1", "run": "exp-17"}]),
                      AfterValidator(storable_attrs)]
Values = Annotated[list[Real], Field(min_length=1, max_length=MAX_CONSTRAINTS)]


# ---------------------------------------------------------------- errors
class Difference(BaseModel):
    field: str = Field(description="the create request's field", examples=["seed"])
    existing: Any = Field(description="the existing study's value (null: not set)", examples=[0])
    requested: Any = Field(description="this request's value (null: not set)", examples=[42])


class ErrorDetail(BaseModel):
    code: str = Field(examples=["invalid_request"])
    message: str = Field(examples=["low must be strictly less than high"])
    field: str | None = Field(None, examples=["space.x1.low"])
    differences: list[Difference] | None = Field(
        None, description="409 name_conflict: every field whose value differs from the existing study's")


class ErrorBody(BaseModel):
    error: ErrorDetail


# ----------------------------------------------------------------- space
class Condition(_Request):
    """The parameter is active only when ``parent`` (a categorical, ordinal or int parameter) is
    active and takes one of ``values``."""

    parent: ParamName
    values: list[Choice] = Field(min_length=1, max_length=MAX_CHOICES)


ConditionField = Field(None, description="active only when the parent takes one of the values (nesting "
                       "allowed, no cycles); ask returns only active parameters, tell and add take exactly those")


class FloatParam(_Request):
    type: Literal["float"]
    low: Real
    high: Real = Field(description="greater than low; the range must be a finite number")
    log: StrictBool = Field(False, description="sample on a log scale (low > 0)")
    condition: Condition | None = ConditionField


class IntParam(_Request):
    type: Literal["int"]
    low: JsonInt
    high: JsonInt = Field(description="greater than low")
    log: StrictBool = Field(False, description="sample on a log scale (low > 0)")
    condition: Condition | None = ConditionField


class CategoricalParam(_Request):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1, max_length=MAX_CHOICES, description="distinct values")
    condition: Condition | None = ConditionField


class OrdinalParam(_Request):
    type: Literal["ordinal"]
    choices: list[Choice] = Field(min_length=1, max_length=MAX_CHOICES, description="distinct values, in order")
    condition: Condition | None = ConditionField


ParamSpec = Annotated[FloatParam | IntParam | CategoricalParam | OrdinalParam, Field(discriminator="type")]
PARAM_TYPES = ("float", "int", "categorical", "ordinal")


# --------------------------------------------------------------- studies
def _bounded(name: str, kind: Any, lo: float, hi: float, open_lo: bool = False, open_hi: bool = False,
             what: str = "") -> tuple[Any, Any]:
    bounds = {"gt" if open_lo else "ge": lo, "lt" if open_hi else "le": hi}
    typ = json_int(**bounds) if kind is JsonInt else Annotated[kind, Field(**bounds)]
    return typ | None, Field(None, description=what or None)


def _option(key: str) -> tuple[Any, Any]:
    """An option as the schema shows it: the widest range of the surrogates that take it."""
    takers = {n: o[key] for n, o in SURROGATE_OPTIONS.items() if key in o}
    kind = next(iter(takers.values()))[0]
    lo, hi = min(r[1] for r in takers.values()), max(r[2] for r in takers.values())
    what = "; ".join(f"{n}: [{r[1]:g}, {r[2]:g}]" for n, r in takers.items())
    return _bounded(key, JsonInt if kind == "int" else Real, lo, hi, what=what)


def _choice(key: str) -> tuple[Any, Any]:
    takers = {n: o[key] for n, o in SURROGATE_CHOICES.items() if key in o}
    words = tuple(dict.fromkeys(w for ws in takers.values() for w in ws))
    what = "; ".join(f"{n}: {', '.join(ws)}" for n, ws in takers.items())
    return Literal[words] | None, Field(None, description=what)  # type: ignore[valid-type]


SurrogateOptions = create_model(
    "SurrogateOptions", __config__=ConfigDict(extra="forbid"),
    __doc__="options of the study's surrogate (each only for the surrogates its description names)",
    **{key: _option(key) for opts in SURROGATE_OPTIONS.values() for key in opts},
    **{key: _choice(key) for opts in SURROGATE_CHOICES.values() for key in opts},
)

StudySettings = create_model(
    "StudySettings", __config__=ConfigDict(extra="forbid"),
    __doc__="engine and service settings; null or absent means the default (see the study view)",
    adapter=(Literal[ADAPTERS] | None, Field(None, description="aci (default), dtaci or none")),  # type: ignore[valid-type]
    conformal=(Literal[CONFORMAL_MODES] | None, Field(None, description="adaptive (default: raw, then CV+, then split), split, cv+, crossval (CrossVal-CP), jab+ (Jackknife+-after-bootstrap) or raw")),  # type: ignore[valid-type]
    crowd=(Literal[CROWD_MODES] | None, Field(None, description="how running trials condition a choice: "  # type: ignore[valid-type]
           "believer (default; GP surrogates: spread conditioned on the running points, others penalize), "
           "penalize (local penalisation with the model's Lipschitz constant) or radius (fixed diversity radius)")),
    warp=(Literal[WARPS] | None, Field(None, description="output warp before the fit: yeo-johnson (default: "  # type: ignore[valid-type]
          "a power transform fitted to the values, for heavy-tailed and quantized metrics), yeo-johnson-tail "
          "(the same transform on the side it compresses only) or none")),
    incumbent=(Literal[INCUMBENTS] | None, Field(None, description="what improvement acquisitions improve on: "  # type: ignore[valid-type]
               "observed (default: the best observed value) or model (the surrogate's least median at the "
               "observed configurations, the plug-in incumbent of noisy expected improvement)")),
    warp_reference=(Literal[WARP_REFERENCES] | None, Field(None, description="the observations the output "  # type: ignore[valid-type]
                    "warp's centre and scale come from: observed (default: all), warmup (the warm-up's) or "
                    "declustered (each weighted by its share of its neighbourhood)")),
    noise_free=(StrictBool | None, Field(None, description="improvement acquisitions score the objective, the "
                "calibrated quantiles narrowed by the surrogate's signal fraction (default true)")),
    split_refit=(StrictBool | None, Field(None, description="split conformal shows and searches the GP "
                 "conditioned on every observation, with the split model's scores (default true)")),
    split_scores=(Literal[SPLIT_SCORES] | None, Field(None, description="with split_refit, the calibration "  # type: ignore[valid-type]
                  "scores: held-out (the split model's, added as they are), transported (default: the split "
                  "model's, each candidate's correction scaled by the refit's spread over the split model's) "
                  "or loo (no split: the leave-one-out predictions of the GP on every observation)")),
    early_scores=(Literal[EARLY_SCORES] | None, Field(None, description="the adaptive schedule's calibration "  # type: ignore[valid-type]
                  "below split_from: cv+ (fold models' scores) or loo (the jackknife: the leave-one-out "
                  "predictions of the GP on every observation; other surrogates use cv+)")),
    shift=(Literal[SHIFT_MODES] | None, Field(None, description="none (default) or fcs: split-rule intervals "  # type: ignore[valid-type]
           "weighted for the feedback covariate shift of the selection (Fannjiang et al. 2022); not with "
           "conformal cv+ or raw")),
    levels=(Annotated[list[Real], Field(min_length=2, max_length=int(SETTING_RANGES["n_levels"][1]))] | None,
            Field(None, description="explicit quantile levels: even count, increasing, symmetric about 0.5, "
                  "inside (0, 1); replaces n_levels")),
    ucb_pair=_bounded("ucb_pair", JsonInt, 0, int(SETTING_RANGES["n_levels"][1]) // 2 - 1,
                      what="interval pair UCB reads (0: the widest); below n_levels / 2"),
    surrogate_options=(SurrogateOptions | None, None),
    multi_acquisition=(Literal["auto", "ehvi", "parego"] | None, Field(
        None, description="a multi-objective study's acquisition: auto (default: ehvi for 2 objectives, parego "
        "for 3-4), ehvi (expected hypervolume improvement, 2 or 3 objectives) or parego (random Chebyshev "
        "scalarisations)")),
    reference_point=(Annotated[list[Real], Field(min_length=2, max_length=MAX_OBJECTIVES)] | None, Field(
        None, description="a multi-objective study's hypervolume reference point, one value per objective in its "
        "own units (default: each objective's worst observed value plus a tenth of its observed range)")),
    **{name: _bounded(name, JsonInt if name in INT_SETTINGS else Real, lo, hi, *OPEN_RANGES.get(name, (False, False)))
       for name, (lo, hi) in SETTING_RANGES.items()},
    ask_wait_seconds=_bounded("ask_wait_seconds", Real, *SERVICE_SETTINGS["ask_wait_seconds"],
                              what="how long an ask by a sequential user may wait for a fit covering the "
                              "latest tells (default: the server's)"),
    heartbeat_timeout_seconds=_bounded("heartbeat_timeout_seconds", Real, *SERVICE_SETTINGS["heartbeat_timeout_seconds"],
                                       what="running trials silent for longer are failed (default: the "
                                       "server's); a late tell is still recorded"),
)


class PrunerSpec(_Request):
    """A pruner and its settings (every setting optional)."""

    name: Literal[PRUNERS] = Field(description="none, median, sh (asynchronous successive halving), hb "  # type: ignore[valid-type]
                                   "(hyperband), sh+ / hb+ (UQ-guided: keep counts from the rung's confidence curve)")
    min_resource: json_int(ge=1, le=1_000_000) | None = Field(None, description="steps to the first rung (1)")
    max_resource: json_int(ge=1, le=1_000_000) | None = Field(
        None, description="steps of a full run (100): no pruning at or past it")
    reduction_factor: json_int(ge=2, le=100) | None = Field(None, description="eta: rungs grow by it (3)")
    window: json_int(ge=1, le=1000) | None = Field(
        None, description="sh+/hb+: a curve's uncertainty is the std of its last window + 1 values (10)")
    n_startup_trials: json_int(ge=0, le=10_000) | None = Field(
        None, description="median: completed trials with a value at the step before it prunes (5)")
    n_warmup_steps: json_int(ge=0, le=1_000_000) | None = Field(None, description="median: no pruning before (0)")
    min_early_stopping_rate: json_int(ge=0, le=30) | None = Field(
        None, description="sh/sh+: the first rung at min_resource * reduction_factor ** rate (0)")
    feed_pruned: StrictBool | None = Field(
        None, description="pruned trials told with a value feed the surrogate with it (false)")

    def plain(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


PrunerName = Literal[PRUNERS]  # type: ignore[valid-type]


def _pruner_name(v: Any) -> Any:
    """``"sh+"`` is short for ``{"name": "sh+"}`` (so errors name the field in either form)."""
    return {"name": v} if isinstance(v, str) else v


class StudyCreate(_Request):
    name: Name = Field(examples=["branin-demo"])
    space: dict[ParamName, ParamSpec] = Field(
        min_length=1, max_length=MAX_PARAMS, json_schema_extra=CLOSED_KEYS,
        description=f"1 to {MAX_PARAMS} parameters; at most {MAX_CHOICES} choices each and 2048 encoded "
        "features in all (numeric parameters plus every categorical choice)",
        examples=[BRANIN_SPACE],
    )
    direction: Direction = "minimize"
    directions: Annotated[list[Direction], Field(min_length=2, max_length=MAX_OBJECTIVES)] | None = Field(
        None, description=f"several objectives (2 to {MAX_OBJECTIVES}), instead of direction: every completed "
        "trial is told `values`, one per objective, and the study's best trials are its Pareto front",
        examples=[["minimize", "minimize"]])
    surrogate: Literal[tuple(SURROGATES)] | None = Field(None, description="qgp (default), qgbm, qrf, ql, qe")  # type: ignore[valid-type]
    acquisition: Literal[ACQUISITIONS] | None = Field(
        None, description="logei (default: log expected improvement on the calibrated distribution), ei, pi, "
        "ucb, ts, its, obs, mean")  # type: ignore[valid-type]
    seed: json_int(ge=0, le=2**32 - 1) | None = Field(None, description="default: derived from the name")
    pruner: Annotated[PrunerSpec, BeforeValidator(_pruner_name, json_schema_input_type=PrunerName | PrunerSpec)
                      ] | None = Field(
        None, description="multi-fidelity early stopping of reported trials: a name or an object (default none)",
        examples=["sh+", {"name": "hb", "max_resource": 81, "reduction_factor": 3}])
    settings: StudySettings = Field(default_factory=StudySettings, examples=[{"n_warmup": 10, "ask_wait_seconds": 2.0}])  # type: ignore[valid-type]
    constraints: list[ParamName] | None = Field(
        None, max_length=MAX_CONSTRAINTS, description=f"names of outcome constraints (at most {MAX_CONSTRAINTS}): "
        "every completed trial is told one value per constraint and is feasible when each is <= 0; the best "
        "trial is the best feasible one", examples=[["model_mb", "latency_ms"]])
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
    method: str | None = Field(description="raw, cv+, split, crossval or jab+")
    fitted_at: datetime | None
    fit_seconds: float | None
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
    user_attrs: dict[str, Any] = {}
    settings: dict[str, Any]
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
    created_at: datetime
    trials: TrialCounts
    best_trial: BestTrial | None


class StudyPage(BaseModel):
    studies: list[StudySummary]
    total: int = Field(description="studies matching the query")
    limit: int
    offset: int


# ---------------------------------------------------------------- trials
MAX_COUNT = 256


class AskRequest(_Request):
    count: json_int(ge=1, le=MAX_COUNT) = Field(1, description="how many configurations (distinct, kept apart)")
    worker_id: Name | None = Field(None, examples=["gpu-node-3/pid-4121"])
    user_attrs: UserAttrs | None = Field(None, description="set on every trial this ask hands out "
                                         "(merged into an enqueued trial's own)")


class AskedTrial(BaseModel):
    id: int
    number: int
    study_id: int
    params: dict[str, Any] = Field(description="the active parameters")
    origin: Literal["enqueued"] | None = Field(None, description="enqueued: handed out from the queue")
    user_attrs: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = Field(
        description="calibrated quantiles, mean and intervals the configuration was chosen on; "
        "null during the quasi-random warm start"
    )


class AskResponse(BaseModel):
    trials: list[AskedTrial]


Objectives = Annotated[list[Real], Field(min_length=2, max_length=MAX_OBJECTIVES)]


class TellRequest(_Request):
    value: Real | None = Field(None, examples=[0.3979])
    values: Objectives | None = Field(None, description="a multi-objective study's objectives, one per "
                                      "direction (instead of value)")
    state: Literal["complete", "failed", "pruned"] | None = Field(
        None, description="default complete (needs value); failed or pruned"
    )
    constraints: Values | None = Field(None, description="one value per study constraint, in order; feasible "
                                       "when each is <= 0 (a completed trial of a constrained study needs them)")
    user_attrs: UserAttrs | None = Field(None, description="merged into the trial's attributes")


class EnqueueRequest(_Request):
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


class AddedTrial(_Request):
    params: dict[ParamName, Choice] = Field(max_length=MAX_PARAMS, json_schema_extra=CLOSED_KEYS,
                                            description="exactly the active parameters")
    value: Real | None = Field(None, description="the objective (a completed trial)")
    values: Objectives | None = Field(None, description="a multi-objective study's objectives (instead of value)")
    state: Literal["complete", "failed"] | None = Field(None, description="complete (default, needs value) or "
                                                        "failed (no value)")
    constraints: Values | None = Field(None, description="one value per study constraint (a completed trial "
                                       "of a constrained study needs them)")
    user_attrs: UserAttrs | None = None


class AddTrialsRequest(_Request):
    trials: list[AddedTrial] = Field(min_length=1, max_length=MAX_ADDED,
                                     description=f"1 to {MAX_ADDED} trials, stored all or none")


def _add_shape(v: Any) -> str:
    return "batch" if isinstance(v, dict) and "trials" in v else "single"


# one trial or {"trials": [...]}, told apart by the key: a bad field is reported in the shape sent
# (the union alone reported both shapes' errors, the batch's first)
AddBody = Annotated[Annotated[AddTrialsRequest, Tag("batch")] | Annotated[AddedTrial, Tag("single")],
                    Discriminator(_add_shape)]
UNION_TAGS = frozenset({"batch", "single"})  # not part of a field's name (api.errors)


class CopyRequest(_Request):
    name: Name = Field(description="the new study's name (must not exist)")
    user_attrs: UserAttrs | None = None


class ReportRequest(_Request):
    step: json_int(ge=0, le=1_000_000_000) = Field(description="the resource so far: epochs, iterations...")  # type: ignore[valid-type]
    value: Real = Field(description="the objective at that step (same direction as the study's)",
                        examples=[0.231])


class ReportResponse(BaseModel):
    should_prune: bool = Field(description="stop this trial now (then tell it with state pruned)")


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
    user_attrs: dict[str, Any] = {}
    prediction: dict[str, Any] | None
    worker_id: str | None
    asked_at: datetime
    heartbeat_at: datetime | None
    finished_at: datetime | None


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


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "down"] | None = Field(
        None, description="readiness: whether the database answered (checked at most once a second)")
    fit_pool: Literal["ok", "starting", "down"] | None = Field(
        None, description="readiness: every fit process alive and warmed up (ok), some still warming up "
        "(starting: at start, or after a dead one was replaced), or none alive (down). With "
        "CALIBO_WORKER_MODE=queue: ok while this replica can queue fits (the queue is in the database "
        "checked above; `calibo worker` processes report through their own healthcheck)")
