"""The wire contract (v1) as pydantic models: every request and answer body.

Request models say in their JSON Schema exactly what the server accepts:
every size and number is bounded (the engine's bounds come from
``calibo.engine.limits``), integers are JSON integers (``1.0`` is one,
``"1"`` and ``true`` are not), floats are finite JSON numbers, and names are
strings without control characters.

``fields`` (what a field may hold, and the base of request bodies), ``space``
(parameters), ``settings`` (study settings, surrogate options, the pruner),
``studies``, ``trials``, ``errors`` (the error body) and ``health``.
"""

from .errors import Difference, ErrorBody, ErrorDetail
from .fields import IDEMPOTENCY_KEY, MAX_NAME, Direction, Name, TrialState, UserAttrs
from .health import Health
from .settings import PrunerSpec, StudySettings, SurrogateOptions
from .space import CategoricalParam, Condition, FloatParam, IntParam, OrdinalParam, ParamSpec
from .studies import (
    AdaptivePair,
    AdaptiveSummary,
    BestTrial,
    CopyRequest,
    ParetoSummary,
    SpaceGrowth,
    StudyAttrs,
    StudyAttrsChange,
    StudyCreate,
    StudyPage,
    StudySummary,
    StudySystemAttrs,
    StudyView,
    SurrogateStatus,
    TrialCounts,
)
from .trials import (
    MAX_COUNT,
    UNION_TAGS,
    AddBody,
    AddedTrial,
    AddTrialsRequest,
    AskedTrial,
    AskRequest,
    AskResponse,
    CurvePage,
    CurveView,
    EnqueuedTrial,
    EnqueueRequest,
    HypervolumePoint,
    ParetoView,
    ReportRequest,
    ReportResponse,
    TellRequest,
    TrialChange,
    TrialList,
    TrialPage,
    TrialView,
)

__all__ = [
    "IDEMPOTENCY_KEY", "MAX_COUNT", "MAX_NAME", "UNION_TAGS", "AdaptivePair", "AdaptiveSummary", "AddBody",
    "AddTrialsRequest", "AddedTrial", "AskRequest", "AskResponse", "AskedTrial", "BestTrial", "CategoricalParam",
    "Condition", "CopyRequest", "CurvePage", "CurveView", "Difference", "Direction", "EnqueueRequest",
    "EnqueuedTrial", "ErrorBody", "ErrorDetail", "FloatParam", "Health", "HypervolumePoint", "IntParam", "Name",
    "OrdinalParam", "ParamSpec", "ParetoSummary", "ParetoView", "PrunerSpec", "ReportRequest", "ReportResponse",
    "SpaceGrowth",
    "StudyAttrs", "StudyAttrsChange", "StudyCreate", "StudyPage", "StudySettings", "StudySummary", "StudySystemAttrs",
    "StudyView",
    "SurrogateOptions",
    "SurrogateStatus", "TellRequest", "TrialChange", "TrialCounts", "TrialList", "TrialPage", "TrialState", "TrialView",
    "UserAttrs",
]
