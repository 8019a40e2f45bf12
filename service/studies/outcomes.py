"""What a tell or an added trial may carry: its state, value(s) and constraint values, checked
against the study's definition; InvalidRequest naming the field."""

from __future__ import annotations

from typing import Any

from calibo.engine.errors import FieldError
from calibo.engine.outcomes import check_value, check_values

from ..errors import InvalidRequest
from .definitions import StudyDef


def same_value(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and float(a) == float(b))


def check_outcome(sd: StudyDef, state: str, value: Any, values: Any = None) -> tuple[float | None, list[float] | None]:
    """A tell's or an added trial's ``(value, values)`` for ``state``; InvalidRequest naming the field.

    A multi-objective study's completed trial has ``values`` (one per objective) and no ``value``;
    its stored ``value`` is the first objective's (what the warm-up and listings count on)."""
    if state not in ("complete", "failed", "pruned"):
        raise InvalidRequest("must be complete, failed or pruned", field="state")
    if sd.multi:
        if value is not None:
            raise InvalidRequest(f"a multi-objective study is told values, one per objective {list(sd.directions)}",
                                 field="value")
        if state == "complete" and values is None:
            raise InvalidRequest("a completed trial needs its values, one per objective "
                                 f"{list(sd.directions)} (or give state failed/pruned)", field="values")
        if state != "complete" and values is not None:
            raise InvalidRequest(f"a {state} trial has no values", field="values")
        if values is None:
            return None, None
        try:
            vs = check_values(values, len(sd.directions))
        except FieldError as e:
            raise InvalidRequest(e.message, field=e.field) from None
        return vs[0], vs
    if values is not None:
        raise InvalidRequest("values are for a multi-objective study (directions); this one is told a value",
                             field="values")
    return _check_value(state, value), None


def _check_value(state: str, value: Any) -> float | None:
    if state == "complete" and value is None:
        raise InvalidRequest("a completed trial needs a value (or give state failed/pruned)", field="value")
    if state == "failed" and value is not None:
        raise InvalidRequest("a failed trial has no value", field="value")
    if value is None:
        return None
    try:
        return check_value(value)
    except FieldError as e:
        raise InvalidRequest(e.message, field="value") from None


def check_constraints(sd: StudyDef, state: str, constraints: Any) -> list[float] | None:
    """A completed trial of a constrained study carries one finite value per constraint (others may)."""
    if constraints is None:
        if sd.constraints and state == "complete":
            raise InvalidRequest(f"a completed trial needs its {len(sd.constraints)} constraint values "
                                 f"{list(sd.constraints)}", field="constraints")
        return None
    if not sd.constraints:
        raise InvalidRequest("the study has no constraints", field="constraints")
    if not isinstance(constraints, (list, tuple)) or len(constraints) != len(sd.constraints):
        raise InvalidRequest(f"needs {len(sd.constraints)} values, one per constraint {list(sd.constraints)}",
                             field="constraints")
    out = []
    for i, c in enumerate(constraints):
        try:
            out.append(check_value(c))
        except FieldError as e:
            raise InvalidRequest(e.message, field=f"constraints.{i}") from None
    return out
