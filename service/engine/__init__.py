"""calibo's engine: calibrated quantile surrogates, usable in-process on its own.

No web or SQL code lives here. The three pure steps are ``fit``, ``select`` and
``adapt``; ``Optimizer`` is the in-process ask/tell home for them.
"""

# ruff: noqa: E402 - the import-name guard comes before the imports it protects
if __name__ != "calibo.engine":  # service/engine/ installs as calibo.engine only: one name, one copy
    raise ImportError(f"calibo's engine is the package calibo.engine, not {__name__!r}")

from .adaptive import ACIState, DtACIState, new_state
from .errors import ConfigError, FieldError, ParamError, SpaceError
from .optimizer import (
    EngineConfig,
    Optimizer,
    Suggestion,
    adapt,
    fit,
    initial_states,
    select,
)
from .snapshot import Snapshot
from .space import SearchSpace

__all__ = [
    "ACIState",
    "ConfigError",
    "DtACIState",
    "EngineConfig",
    "FieldError",
    "Optimizer",
    "ParamError",
    "SearchSpace",
    "Snapshot",
    "SpaceError",
    "Suggestion",
    "adapt",
    "fit",
    "initial_states",
    "new_state",
    "select",
]
