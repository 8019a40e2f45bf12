"""calibo's engine: calibrated quantile surrogates, usable in-process on its own.

No web or SQL code lives here. The three pure steps are ``fit`` (``engine.fit``),
``select`` (``engine.select``) and ``adapt`` (``StudyState.adapt``, ``engine.state``), on the
typed objects of ``engine.state``; ``Optimizer`` is the in-process ask/tell home for them.
"""

# ruff: noqa: E402 - the import-name guard comes before the imports it protects
if __name__ != "calibo.engine":  # service/engine/ installs as calibo.engine only: one name, one copy
    raise ImportError(f"calibo's engine is the package calibo.engine, not {__name__!r}")

from .adaptive import ACIState, DtACIState, new_state
from .config import EngineConfig
from .errors import ConfigError, FieldError, ParamError, SpaceError
from .fit import fit
from .optimizer import Optimizer
from .prediction import CalibrationRecord, Prediction
from .select import Suggestion, select
from .snapshot import Snapshot
from .space import SearchSpace
from .state import StudyState, adapt

__all__ = [
    "ACIState",
    "CalibrationRecord",
    "ConfigError",
    "DtACIState",
    "EngineConfig",
    "FieldError",
    "Optimizer",
    "ParamError",
    "Prediction",
    "SearchSpace",
    "Snapshot",
    "SpaceError",
    "StudyState",
    "Suggestion",
    "adapt",
    "fit",
    "new_state",
    "select",
]
