"""What a tell or an added trial may carry: its state, value(s) and constraint values, checked
against the study's definition; InvalidRequest naming the field."""

from __future__ import annotations

from typing import Any

from calibo.engine import outcomes as engine_outcomes
from calibo.engine.errors import FieldError

from ..errors import InvalidRequest
from .definitions import StudyDef


def same_value(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and float(a) == float(b))


def check_outcome(sd: StudyDef, state: str, value: Any, values: Any = None) -> tuple[float | None, list[float] | None]:
    """A tell's or an added trial's ``(value, values)`` for ``state`` (``engine.outcomes.check_outcome``);
    InvalidRequest naming the field."""
    try:
        return engine_outcomes.check_outcome(sd.directions, state, value, values)
    except FieldError as e:
        raise InvalidRequest(e.message, field=e.field) from None


def check_constraints(sd: StudyDef, state: str, constraints: Any) -> list[float] | None:
    """A trial's constraint values (``engine.outcomes.check_constraint_values``); InvalidRequest
    naming the field."""
    try:
        return engine_outcomes.check_constraint_values(sd.constraints, state, constraints)
    except FieldError as e:
        raise InvalidRequest(e.message, field=e.field) from None
