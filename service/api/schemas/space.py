"""A study's search space on the wire: the four parameter types and their conditions."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool

from calibo.engine.limits import MAX_CHOICES

from .fields import Choice, JsonInt, ParamName, Real, RequestBody

BRANIN_SPACE = {"x1": {"type": "float", "low": -5, "high": 10},
                "x2": {"type": "float", "low": 0, "high": 15}}


class Condition(RequestBody):
    """The parameter is active only when ``parent`` (a categorical, ordinal or int parameter) is
    active and takes one of ``values``."""

    parent: ParamName
    values: list[Choice] = Field(min_length=1, max_length=MAX_CHOICES)


ConditionField = Field(None, description="active only when the parent takes one of the values (nesting "
                       "allowed, no cycles); ask returns only active parameters, tell and add take exactly those")
GrownField = Field(False, description="added to the space after trials were told (PATCH .../space sets it): a "
                   "configuration may lack it, as those trials do (it is inactive for them); every ask holds it "
                   "where it is active")


class FloatParam(RequestBody):
    type: Literal["float"]
    low: Real
    high: Real = Field(description="greater than low; the range must be a finite number")
    log: StrictBool = Field(False, description="sample on a log scale (low > 0)")
    condition: Condition | None = ConditionField
    grown: StrictBool = GrownField


class IntParam(RequestBody):
    type: Literal["int"]
    low: JsonInt
    high: JsonInt = Field(description="greater than low")
    log: StrictBool = Field(False, description="sample on a log scale (low > 0)")
    condition: Condition | None = ConditionField
    grown: StrictBool = GrownField


class CategoricalParam(RequestBody):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1, max_length=MAX_CHOICES, description="distinct values")
    condition: Condition | None = ConditionField
    grown: StrictBool = GrownField


class OrdinalParam(RequestBody):
    type: Literal["ordinal"]
    choices: list[Choice] = Field(min_length=1, max_length=MAX_CHOICES, description="distinct values, in order")
    condition: Condition | None = ConditionField
    grown: StrictBool = GrownField


ParamSpec = Annotated[FloatParam | IntParam | CategoricalParam | OrdinalParam, Field(discriminator="type")]
PARAM_TYPES = ("float", "int", "categorical", "ordinal")
