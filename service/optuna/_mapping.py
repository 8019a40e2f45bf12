"""CaliboStorage's mapping between Optuna and calibo: states, values, attributes (non-finite floats
tagged), datetimes, distributions as a study's parameters and back, a trial view as a ``FrozenTrial``,
and calibo's errors as the exceptions Optuna's storages raise."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    check_distribution_compatibility,
    json_to_distribution,
)
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from calibo.errors import Conflict, InvalidRequest, NotFound

STATES = {"waiting": TrialState.WAITING, "running": TrialState.RUNNING, "complete": TrialState.COMPLETE,
           "failed": TrialState.FAIL, "pruned": TrialState.PRUNED}
WIRE_STATES = {v: k for k, v in STATES.items()}
_TAG = "__float__"


def pack(v: Any) -> Any:
    """An attribute value as calibo stores it: a non-finite float tagged (JSON has none)."""
    if isinstance(v, float) and not math.isfinite(v):
        return {_TAG: "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, dict):
        return {k: pack(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [pack(x) for x in v]
    return v


def unpack(v: Any) -> Any:
    if isinstance(v, dict):
        if len(v) == 1 and _TAG in v and v[_TAG] in ("nan", "inf", "-inf"):
            return float(v[_TAG])
        return {k: unpack(x) for k, x in v.items()}
    if isinstance(v, list):
        return [unpack(x) for x in v]
    return v


def finite(value: float, what: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"calibo holds finite numbers only: {what} is {value!r}")
    return value


def wire_time(t: datetime | None) -> str | None:
    """A datetime as the server takes it: Optuna's naive local time, as UTC."""
    return None if t is None else t.astimezone(UTC).isoformat()


def local_time(text: str | None) -> datetime | None:
    """A server time (UTC) as Optuna's naive local datetime."""
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone().replace(tzinfo=None)


def calibo_param(d: BaseDistribution, name: str = "") -> dict[str, Any]:
    """The calibo parameter a study's space holds for an Optuna distribution. A single-valued float or
    int spans its value and the next one (calibo's ranges are never empty); the trial keeps the
    distribution itself."""
    if isinstance(d, CategoricalDistribution):
        for c in d.choices:
            if not (c is None or isinstance(c, str | bool | int) or (isinstance(c, float) and math.isfinite(c))):
                raise ValueError(f"parameter {name!r}: calibo holds categorical choices that are finite numbers, "
                                 f"strings, bools or None: got {c!r}")
        return {"type": "categorical", "choices": list(d.choices)}
    if isinstance(d, IntDistribution):
        high = d.high if d.high > d.low else d.low + 1
        return {"type": "int", "low": int(d.low), "high": int(high), "log": bool(d.log)}
    if isinstance(d, FloatDistribution):
        top = d.high if d.high > d.low else math.nextafter(d.low, math.inf)
        return {"type": "float", "low": float(d.low), "high": float(top), "log": bool(d.log)}
    raise ValueError(f"parameter {name!r}: calibo has no parameter for {type(d).__name__}")


def optuna_distribution(spec: dict[str, Any]) -> BaseDistribution:
    """The Optuna distribution of a calibo parameter (a trial that keeps none of its own)."""
    kind = spec["type"]
    if kind in ("categorical", "ordinal"):
        return CategoricalDistribution(spec["choices"])
    if kind == "int":
        return IntDistribution(int(spec["low"]), int(spec["high"]), log=bool(spec.get("log", False)))
    return FloatDistribution(float(spec["low"]), float(spec["high"]), log=bool(spec.get("log", False)))


def holding(spec: dict[str, Any], value: Any) -> dict[str, Any]:
    """A float or int parameter's ``spec`` widened to hold ``value`` (Optuna's storages keep a value
    outside its distribution as they are given it)."""
    if value is None or spec["type"] not in ("float", "int") or spec["low"] <= value <= spec["high"]:
        return spec
    return {**spec, "low": min(spec["low"], value), "high": max(spec["high"], value)}


def grown(spec: dict[str, Any], d: BaseDistribution, value: Any, name: str) -> dict[str, Any] | None:
    """``spec`` grown to hold ``d`` and ``value`` (a wider range), None when it holds them already;
    ValueError (Optuna's compatibility rule) when ``d`` is another kind, scale or set of choices than
    ``spec``'s."""
    check_distribution_compatibility(optuna_distribution(spec), d)  # raises ValueError as Optuna's storages do
    if isinstance(d, CategoricalDistribution):
        return None
    want = holding(calibo_param(d, name), value)
    if want["low"] >= spec["low"] and want["high"] <= spec["high"]:
        return None
    return {k: v for k, v in spec.items() if k not in ("grown",)} | {
        "low": min(spec["low"], want["low"]), "high": max(spec["high"], want["high"])}


def frozen_trial(view: dict[str, Any], space: dict[str, dict[str, Any]]) -> FrozenTrial:
    """A trial view as Optuna's ``FrozenTrial``: its own distributions where it kept them, else the
    study's ``space``'s; Optuna's naive local datetimes."""
    state = STATES[view["state"]]
    own = view.get("distributions") or {}
    dists: dict[str, BaseDistribution] = {}
    params: dict[str, Any] = {}
    for name, v in view["params"].items():
        d = own_distribution(own.get(name), v) or optuna_distribution(space[name])
        dists[name] = d
        params[name] = d.to_external_repr(d.to_internal_repr(v))
    values: list[float] | None = None
    if view.get("values") is not None:
        values = [float(x) for x in view["values"]]
    elif view.get("value") is not None:
        values = [float(view["value"])]
    return FrozenTrial(
        number=int(view["number"]), state=state, value=None, values=values,
        datetime_start=local_time(view.get("started_at")),
        datetime_complete=local_time(view.get("finished_at")) if state.is_finished() else None,
        params=params, distributions=dists, user_attrs=unpack(view.get("user_attrs") or {}),
        system_attrs=unpack(view.get("system_attrs") or {}),
        intermediate_values={int(k): float(x) for k, x in (view.get("intermediate_values") or {}).items()},
        trial_id=int(view["id"]))


def own_distribution(kept: Any, value: Any) -> BaseDistribution | None:
    """A trial's own distribution of a parameter, as kept with it, when it is one that holds ``value``
    (another REST client may have written anything there: then the study's space answers)."""
    if not isinstance(kept, dict):
        return None
    try:
        d = json_to_distribution(json.dumps(kept))
        d.to_internal_repr(value)
    except (ValueError, TypeError, KeyError):
        return None
    return d


def settled(view: dict[str, Any]) -> bool:
    """A finished trial that changes no more (one failed for silence may still be told)."""
    return STATES[view["state"]].is_finished() and view.get("failure") != "expired"


class Errors:
    """calibo's errors as Optuna's storages raise them: unknown study or trial KeyError, a finished trial
    UpdateFinishedTrialError, an invalid field ValueError naming it; any other passes as it is."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: Any) -> None:
        if isinstance(e, NotFound):
            raise KeyError(str(e)) from e
        if isinstance(e, Conflict) and e.code in ("trial_finished", "trial_expired"):
            raise UpdateFinishedTrialError(str(e)) from e
        if isinstance(e, InvalidRequest):
            raise ValueError(f"calibo refused {e.field or 'the request'}: {e}") from e
