"""What a wire field may hold: JSON integers, finite reals, names, choices, user attributes; and the
base of every request body (unknown keys refused)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)
from pydantic.config import JsonDict
from typing_extensions import TypeAliasType

from calibo.engine.limits import MAX_CHOICE_TEXT, MAX_PARAM_NAME, bad_text
from calibo.engine.outcomes import MAX_CONSTRAINTS

from ...studies.attrs import MAX_DEPTH, MAX_USER_ATTRS_BYTES, MAX_USER_ATTRS_KEYS, storable_attrs

Direction = Literal["minimize", "maximize"]
TrialState = Literal["waiting", "running", "complete", "failed", "pruned"]

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


# a JSON integer's validator, after its bounds: ``Annotated[StrictInt, Field(ge=..., le=...), Integral]``
# (what ``json_int`` builds, written out where a type checker reads the annotation)
Integral = BeforeValidator(_integral)


def json_int(**bounds: Any) -> Any:
    """A JSON integer within ``bounds`` (ge/le/gt/lt); bounds must come before the validator for the
    JSON Schema to show them as minimum/maximum."""
    return Annotated[StrictInt, Field(**bounds), Integral]


JsonInt = Annotated[StrictInt, Field(), Integral]  # json_int(), as a type alias
Real = Annotated[StrictFloat, Field(allow_inf_nan=False)]
Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME, pattern=NO_CONTROL), BeforeValidator(_text)]
ParamName = Annotated[str, Field(min_length=1, max_length=MAX_PARAM_NAME, pattern=NO_CONTROL),
                      BeforeValidator(_text)]
Choice = (Annotated[StrictStr, Field(max_length=MAX_CHOICE_TEXT, pattern=NO_CONTROL), BeforeValidator(_text)]
          | Real | JsonInt | StrictBool | None)


# a map keyed by parameter names: a key the name pattern refuses is refused (the JSON Schema's
# patternProperties alone would let it through as an additional property)
CLOSED_KEYS: JsonDict = {"additionalProperties": False}

class RequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


# What user attributes may hold, as JSON Schema can say it (``storable_attrs`` checks the rest: at
# most MAX_DEPTH deep, finite numbers, MAX_USER_ATTRS_BYTES in all, and gives the precise error).
STORABLE = r"^[^\x00]*$"  # unpaired surrogates are refused too; a JSON Schema regex cannot name them
AttrText = Annotated[str, WithJsonSchema({"type": "string", "pattern": STORABLE})]
AttrValue = TypeAliasType(  # type: ignore[misc]  # a recursive alias, its value a string mypy does not read
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


def _distributions(d: dict[str, Any]) -> dict[str, Any]:
    """Each parameter's distribution as the caller gives it: a JSON object (Optuna's form:
    ``{"name": "FloatDistribution", "attributes": {...}}``), storable like user attributes."""
    for name, v in d.items():
        if not isinstance(v, dict):
            raise ValueError(f"{name}: must be a JSON object (a distribution)")
        try:
            storable_attrs(v)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    return d


# what a define-by-run caller drew each parameter from (a trial's ``distributions``)
Distributions = Annotated[dict[ParamName, dict[str, Any]],
                          Field(max_length=128, json_schema_extra=CLOSED_KEYS,
                                description="the distribution each parameter was drawn from, as a JSON object "
                                "the server keeps as given (an Optuna storage's: its JSON form); merged by "
                                "parameter"), AfterValidator(_distributions)]
MAX_STEP = 1_000_000_000
StepKey = Annotated[str, Field(pattern=r"^(0|[1-9][0-9]{0,9})$")]
Steps = Annotated[dict[StepKey, Real], Field(max_length=10_000, json_schema_extra={"propertyNames": {
                  "pattern": r"^(0|[1-9][0-9]{0,9})$"}},
                  description=f"learning-curve points: step (0 to {MAX_STEP}, as a JSON key) -> finite value")]
