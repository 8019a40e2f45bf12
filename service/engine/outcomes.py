"""A study's outcomes: directions, objective values and constraint names, checked at the boundary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .config import MAX_OBJECTIVES
from .errors import ConfigError, FieldError
from .limits import MAX_PARAM_NAME, check_text
from .space import ParamError

DIRECTIONS = ("minimize", "maximize")
MAX_CONSTRAINTS = 16  # outcome constraints of a study


def sign_of(direction: str) -> float:
    """+1 to minimise, -1 to maximise: the engine works on minimised values."""
    if direction not in DIRECTIONS:
        raise ConfigError("direction", "must be 'minimize' or 'maximize'")
    return 1.0 if direction == "minimize" else -1.0


def check_constraint_names(names: Any) -> tuple[str, ...]:
    """Constraint names: distinct, printable, at most ``MAX_CONSTRAINTS``; ConfigError naming the field."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError("constraints", "must be a list of constraint names")
    if len(names) > MAX_CONSTRAINTS:
        raise ConfigError("constraints", f"at most {MAX_CONSTRAINTS} constraints (got {len(names)})")
    out = []
    for i, n in enumerate(names):
        try:
            out.append(check_text(n, f"constraints.{i}", MAX_PARAM_NAME))
        except FieldError as e:
            raise ConfigError(e.field, e.message) from None
    if len(set(out)) != len(out):
        raise ConfigError("constraints", "constraint names must be distinct")
    return tuple(out)


def check_directions(directions: Any) -> tuple[str, ...]:
    """A multi-objective study's directions: 2 to ``MAX_OBJECTIVES`` of minimize / maximize."""
    if isinstance(directions, str) or not isinstance(directions, (list, tuple)):
        raise ConfigError("directions", "must be a list of 'minimize' / 'maximize', one per objective")
    if not 2 <= len(directions) <= MAX_OBJECTIVES:
        raise ConfigError("directions", f"must name 2 to {MAX_OBJECTIVES} objectives (got {len(directions)})")
    for i, d in enumerate(directions):
        if d not in DIRECTIONS:
            raise ConfigError(f"directions.{i}", "must be 'minimize' or 'maximize'")
    return tuple(directions)


def check_values(values: Any, m: int, field: str = "values") -> list[float]:
    """One finite number per objective; ParamError naming ``field`` (and the position) otherwise."""
    return _numbers(values, m, field, f"must be a list of {m} numbers, one per objective")


def _numbers(values: Any, n: int, field: str, wrong_count: str) -> list[float]:
    """``n`` finite numbers; ParamError naming ``field`` (``wrong_count`` its message) or the position."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__") or len(values) != n:
        raise ParamError(field, wrong_count)
    out = []
    for i, v in enumerate(values):
        try:
            out.append(check_value(v))
        except ParamError as e:
            raise ParamError(f"{field}.{i}", e.message) from None
    return out


def check_value(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParamError("value", "must be a number")
    v = float(value)
    if not math.isfinite(v):
        raise ParamError("value", "must be finite (no NaN or infinity)")
    return v + 0.0  # -0.0 as 0.0: SQLite keeps no sign


def check_outcome(directions: Sequence[str], state: str, value: Any, values: Any = None,
                  values_field: str = "values") -> tuple[float | None, list[float] | None]:
    """A finished trial's ``(value, values)`` for ``state`` in a study of ``directions``; ParamError
    naming the field. Every home checks a tell here (the service, ``Optimizer``).

    A multi-objective study's completed trial has ``values`` (one per objective; ``values_field``
    names them where the caller calls them otherwise) and no ``value``; its ``value`` is then the
    first objective's (what the warm-up and listings count on)."""
    if state not in ("complete", "failed", "pruned"):
        raise ParamError("state", "must be complete, failed or pruned")
    if len(directions) > 1:
        if value is not None:
            raise ParamError("value", f"a multi-objective study is told values, one per objective {list(directions)}")
        if state == "complete" and values is None:
            raise ParamError(values_field, "a completed trial needs its values, one per objective "
                                           f"{list(directions)} (or give state failed/pruned)")
        if state != "complete" and values is not None:
            raise ParamError(values_field, f"a {state} trial has no values")
        if values is None:
            return None, None
        vs = check_values(values, len(directions), values_field)
        return vs[0], vs
    if values is not None:
        raise ParamError("values", "values are for a multi-objective study (directions); this one is told a value")
    if state == "complete" and value is None:
        raise ParamError("value", "a completed trial needs a value (or give state failed/pruned)")
    if state == "failed" and value is not None:
        raise ParamError("value", "a failed trial has no value")
    return None if value is None else check_value(value), None


def check_constraint_values(names: Sequence[str], state: str, constraints: Any) -> list[float] | None:
    """A finished trial's constraint values in a study constrained by ``names``: a completed trial
    carries one finite value per constraint (a failed or pruned one may); ParamError naming the field."""
    if constraints is None:
        if names and state == "complete":
            raise ParamError("constraints", f"a completed trial needs its {len(names)} constraint values "
                                            f"{list(names)}")
        return None
    if not names:
        raise ParamError("constraints", "the study has no constraints")
    return _numbers(constraints, len(names), "constraints", f"needs {len(names)} values, one per constraint "
                                                            f"{list(names)}")
