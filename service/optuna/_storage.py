"""``CaliboStorage``: Optuna's storage API over a calibo server's REST API (never its database).

Unmodified Optuna code reads and writes calibo studies through it: ``optuna.load_study``,
``study.optimize`` with any sampler, ``optuna.visualization``, optuna-dashboard, Optuna's gRPC
proxy (``calibo optuna-grpc``). Optuna's concepts map one to one:

* **Study**: a calibo study, the same id and name; its direction(s); user attributes; system
  attributes (kept apart on the server). A study Optuna creates starts with an empty space.
* **Trial**: a calibo trial, the same id and number. One Optuna creates runs itself
  (``POST .../trials`` with ``state: running``, origin ``added``): each ``set_trial_param`` sets one
  parameter (``PATCH .../trials/{id}``), growing the study's space first where it lacks the parameter
  or a wider range; ``set_trial_state_values`` tells it. The surrogate fits on it like any other, and
  calibo's dashboard shows it. A trial calibo's ``ask`` handed out reads as Optuna's running trial.
* **Distributions**: calibo's ``float`` / ``int`` are Optuna's ``FloatDistribution`` /
  ``IntDistribution``, ``categorical`` and ``ordinal`` its ``CategoricalDistribution``. The
  distribution a trial's parameter was drawn from is kept with the trial (its step, a narrower
  range), so reads give back exactly the one set. Optuna's compatibility rule holds against the
  study's space: one kind and scale per name, a categorical's choices as they are.
* **States, values, intermediate values, datetimes**: one to one (naive local datetimes, as Optuna
  writes them; the server keeps UTC).

What calibo cannot hold is an error naming it, raised before anything is sent: a non-finite
objective or intermediate value, more than four objectives, an empty study name, a categorical
choice that is not a finite number, a string, a bool or None. Non-finite floats inside attributes
are kept, written as ``{"__float__": "nan" | "inf" | "-inf"}`` on the server.

The storage keeps no state beyond caches: the study of each trial id, each study's space, and the
views of the trials it runs and of finished ones it has read (its own writes keep them current, as
Optuna's ``_CachedStorage`` does for the trials it runs; at most ``KNOWN``), and each study's finished
trials, so that a listing reads only the trials from the first one not known finished
(``number_from``). It pickles (Optuna's
process pools) and is thread-safe.
"""

from __future__ import annotations

import copy
import json
import math
import threading
import uuid
from collections import OrderedDict
from collections.abc import Container, Sequence
from datetime import UTC, datetime
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    check_distribution_compatibility,
    distribution_to_json,
    json_to_distribution,
)
from optuna.exceptions import DuplicatedStudyError, UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
from optuna.study import StudyDirection
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial, TrialState

from calibo import Client
from calibo.errors import Conflict, InvalidRequest, NotFound

__all__ = ["CaliboStorage"]

MAX_OBJECTIVES = 4  # a calibo study's directions
PAGE = 1000  # the server's largest page of trials
KNOWN = 10_000  # trial views kept (the trials this storage runs, finished ones it read)

_STATES = {"waiting": TrialState.WAITING, "running": TrialState.RUNNING, "complete": TrialState.COMPLETE,
           "failed": TrialState.FAIL, "pruned": TrialState.PRUNED}
_WIRE_STATES = {v: k for k, v in _STATES.items()}
_TAG = "__float__"


def _pack(v: Any) -> Any:
    """An attribute value as calibo stores it: a non-finite float tagged (JSON has none)."""
    if isinstance(v, float) and not math.isfinite(v):
        return {_TAG: "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, dict):
        return {k: _pack(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_pack(x) for x in v]
    return v


def _unpack(v: Any) -> Any:
    if isinstance(v, dict):
        if len(v) == 1 and _TAG in v and v[_TAG] in ("nan", "inf", "-inf"):
            return float(v[_TAG])
        return {k: _unpack(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_unpack(x) for x in v]
    return v


def _finite(value: float, what: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"calibo holds finite numbers only: {what} is {value!r}")
    return value


def _wire_time(t: datetime | None) -> str | None:
    """A datetime as the server takes it: Optuna's naive local time, as UTC."""
    return None if t is None else t.astimezone(UTC).isoformat()


def _local_time(text: str | None) -> datetime | None:
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


def _holding(spec: dict[str, Any], value: Any) -> dict[str, Any]:
    """A float or int parameter's ``spec`` widened to hold ``value`` (Optuna's storages keep a value
    outside its distribution as they are given it)."""
    if value is None or spec["type"] not in ("float", "int") or spec["low"] <= value <= spec["high"]:
        return spec
    return {**spec, "low": min(spec["low"], value), "high": max(spec["high"], value)}


def _grown(spec: dict[str, Any], d: BaseDistribution, value: Any, name: str) -> dict[str, Any] | None:
    """``spec`` grown to hold ``d`` and ``value`` (a wider range), None when it holds them already;
    ValueError (Optuna's compatibility rule) when ``d`` is another kind, scale or set of choices than
    ``spec``'s."""
    check_distribution_compatibility(optuna_distribution(spec), d)  # raises ValueError as Optuna's storages do
    if isinstance(d, CategoricalDistribution):
        return None
    want = _holding(calibo_param(d, name), value)
    if want["low"] >= spec["low"] and want["high"] <= spec["high"]:
        return None
    return {k: v for k, v in spec.items() if k not in ("grown",)} | {
        "low": min(spec["low"], want["low"]), "high": max(spec["high"], want["high"])}


class CaliboStorage(BaseStorage):
    """Optuna's ``BaseStorage`` over a calibo server at ``url`` (``token``: its API token, when the
    server asks for one; ``timeout`` per request; ``retry_deadline``: seconds a call retries a server that
    stopped answering, or answers 503, before it raises). ``optuna.load_study(study_name=...,
    storage=CaliboStorage(url))``."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 retry_deadline: float = 60.0) -> None:
        self.url = url
        self.token = token
        self.timeout = timeout
        self.retry_deadline = retry_deadline  # how long a call retries a server that stopped answering
        self._lock = threading.RLock()
        self._client = Client(url, token=token, timeout=timeout, retry_deadline=retry_deadline)
        self._study_of: dict[int, int] = {}  # trial id -> study id (never changes)
        # the trials this storage runs (created running) and finished ones: their views as the server answered
        # its writes, with their learning-curve points; a read of one costs no request (Optuna's _CachedStorage
        # keeps the trials it runs likewise)
        self._known: OrderedDict[int, dict[str, Any]] = OrderedDict()  # the newest KNOWN of them
        self._done: dict[int, dict[int, dict[str, Any]]] = {}  # study id -> number -> a settled trial's view
        self._spaces: dict[int, dict[str, dict[str, Any]]] = {}  # study id -> its space, as last read

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "token": self.token, "timeout": self.timeout,
                "retry_deadline": self.retry_deadline}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["token"], timeout=state["timeout"],  # type: ignore[misc]
                      retry_deadline=state.get("retry_deadline", 60.0))

    def close(self) -> None:
        """Close its HTTP connections (the storage takes no calls after)."""
        self._client.close()

    def remove_session(self) -> None:
        pass

    # ------------------------------------------------------------------ studies
    def create_new_study(self, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        if study_name is None:
            study_name = f"{DEFAULT_STUDY_NAME_PREFIX}{uuid.uuid4()}"
        if not study_name:
            raise ValueError("calibo study names are 1 to 255 characters: got an empty name")
        if not 1 <= len(directions) <= MAX_OBJECTIVES:
            raise ValueError(f"a calibo study has 1 to {MAX_OBJECTIVES} objectives: got {len(directions)} directions")
        names = ["minimize" if d == StudyDirection.MINIMIZE else "maximize" for d in directions]
        if any(d == StudyDirection.NOT_SET for d in directions):
            raise ValueError("a calibo study's directions are minimize or maximize: got NOT_SET")
        with self._errors():
            if self._client.list_studies(name=study_name):
                raise DuplicatedStudyError(f"Another study with name '{study_name}' already exists.")
            view = self._client.create_study(study_name, {}, names[0] if len(names) == 1 else None,
                                             directions=names if len(names) > 1 else None).view
        return int(view["id"])

    def delete_study(self, study_id: int) -> None:
        with self._errors():
            self._client.get_study(study_id)  # NotFound: KeyError, as Optuna's storages answer
            self._client.delete_study(study_id)
        with self._lock:
            self._spaces.pop(study_id, None)
            self._done.pop(study_id, None)

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        with self._errors():
            self._client.set_study_user_attr(study_id, key, _pack(value))

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        with self._errors():
            self._client.set_study_system_attr(study_id, key, _pack(value))

    def get_study_id_from_name(self, study_name: str) -> int:
        with self._errors():
            found = self._client.list_studies(name=study_name) if study_name else []
        if not found:
            raise KeyError(f"No such study {study_name}.")
        return int(found[0]["id"])

    def get_study_name_from_id(self, study_id: int) -> str:
        return str(self._study(study_id)["name"])

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._directions(self._study(study_id))

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return dict(_unpack(self._study(study_id).get("user_attrs") or {}))

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return dict(_unpack(self._study(study_id, system_attrs=True).get("system_attrs") or {}))

    def get_all_studies(self) -> list[FrozenStudy]:
        with self._errors():
            summaries = self._client.list_studies(system_attrs=True)
        return [FrozenStudy(study_name=s["name"], direction=None, directions=self._directions(s),
                            user_attrs=_unpack(s.get("user_attrs") or {}),
                            system_attrs=_unpack(s.get("system_attrs") or {}), study_id=int(s["id"]))
                for s in summaries]

    # ------------------------------------------------------------------ trials
    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        body: dict[str, Any] = {"params": {}, "state": "running"}
        if template_trial is not None:
            t = template_trial
            body = {"state": _WIRE_STATES[t.state], "params": self._params(study_id, t.params, t.distributions)}
            if t.distributions:
                body["distributions"] = {n: json.loads(distribution_to_json(d)) for n, d in t.distributions.items()}
            if t.user_attrs:
                body["user_attrs"] = _pack(t.user_attrs)
            if t.system_attrs:
                body["system_attrs"] = _pack(t.system_attrs)
            if t.intermediate_values:
                body["intermediate_values"] = {str(int(k)): _finite(v, f"intermediate value at step {k}")
                                               for k, v in t.intermediate_values.items()}
            if t.datetime_start is not None:
                body["started_at"] = _wire_time(t.datetime_start)
            if t.state.is_finished():
                if t.datetime_complete is not None:
                    body["finished_at"] = _wire_time(t.datetime_complete)
                body.update(self._outcome(study_id, t.state, t.values))
        with self._errors():
            view = self._client.start_trial(study_id, body)
        with self._lock:
            self._study_of[int(view["id"])] = study_id
        if view["state"] != "waiting":  # a waiting one may be started by another worker, or an ask
            self._keep(view, body.get("intermediate_values") or {})
        return int(view["id"])

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        study_id = self._study_id_of(trial_id)
        try:
            value = self._params(study_id, {param_name: distribution.to_external_repr(param_value_internal)},
                                 {param_name: distribution})
        except ValueError:
            self._check_updatable(trial_id)  # a finished trial's error first, as Optuna's storages
            raise
        with self._errors():
            self._kept(self._client.change_trial(study_id, trial_id, params=value, distributions={
                param_name: json.loads(distribution_to_json(distribution))}))

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        for t in self._views(study_id):
            if t["number"] == trial_number:
                return int(t["id"])
        raise KeyError(f"No trial with trial number {trial_number} exists in study with study_id {study_id}.")

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
                               ) -> bool:
        study_id = self._study_id_of(trial_id)
        view = self._trial_view(trial_id)
        if _STATES[view["state"]].is_finished():
            raise UpdateFinishedTrialError(f"Trial#{view['number']} has already finished and can not be updated.")
        with self._errors():
            if state == TrialState.RUNNING:
                if view["state"] == "running":
                    return False
                try:
                    self._client.change_trial(study_id, trial_id, state="running")
                except Conflict as e:
                    if e.code == "trial_running":
                        return False  # another worker started it first
                    raise
                return True
            if state == TrialState.WAITING:
                raise ValueError("a calibo trial that has started cannot wait again")
            outcome = self._outcome(study_id, state, values)
            self._kept(self._client.tell(study_id, trial_id, outcome.get("values", outcome.get("value")),
                                         state=None if state == TrialState.COMPLETE else outcome["state"]))
        return True

    def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
        value = _finite(intermediate_value, f"the intermediate value at step {step}")
        with self._errors():
            self._kept(self._client.change_trial(self._study_id_of(trial_id), trial_id,
                                                 intermediate_values={str(int(step)): value}), {str(int(step)): value})

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._errors():
            self._kept(self._client.change_trial(self._study_id_of(trial_id), trial_id, user_attrs={key: _pack(value)}))

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._errors():
            self._kept(self._client.change_trial(self._study_id_of(trial_id), trial_id,
                                                 system_attrs={key: _pack(value)}))

    def get_trial(self, trial_id: int) -> FrozenTrial:
        view = self._trial_view(trial_id)
        return self._frozen(view, self._space_of([view]))

    def _space_of(self, views: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The space of these views' study, read again if it lacks a parameter one of them holds without
        its own distribution (another process grew it since)."""
        study_id = int(views[0]["study_id"]) if views else None
        if study_id is None:
            return {}
        space = self._space(study_id)
        if any(n not in space and n not in (v.get("distributions") or {}) for v in views for n in v["params"]):
            space = self._space(study_id, fresh=True)
        return space

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        views = self._views(study_id)
        space = self._space_of(views)
        out = [self._frozen(v, space) for v in views]
        if states is not None:
            out = [t for t in out if t.state in states]
        return copy.deepcopy(out) if deepcopy else out

    def get_n_trials(self, study_id: int, state: tuple[TrialState, ...] | TrialState | None = None) -> int:
        counts = self._study(study_id)["trials"]
        if state is None:
            return int(counts["total"])
        wanted = (state,) if isinstance(state, TrialState) else state
        return sum(int(counts.get(_WIRE_STATES[s], 0)) for s in wanted)

    # ------------------------------------------------------------------ helpers
    def _errors(self) -> _Errors:
        return _Errors()

    def _study(self, study_id: int, system_attrs: bool = False) -> dict[str, Any]:
        with self._errors():
            view = self._client.get_study(int(study_id), system_attrs=system_attrs)
        with self._lock:
            self._spaces[int(study_id)] = view["space"]
        return view

    @staticmethod
    def _directions(view: dict[str, Any]) -> list[StudyDirection]:
        names = view.get("directions") or [view["direction"]]
        return [StudyDirection.MINIMIZE if d == "minimize" else StudyDirection.MAXIMIZE for d in names]

    def _space(self, study_id: int, fresh: bool = False) -> dict[str, dict[str, Any]]:
        with self._lock:
            space = self._spaces.get(study_id)
        if space is None or fresh:
            space = self._study(study_id)["space"]
        return space

    def _params(self, study_id: int, params: dict[str, Any], dists: dict[str, BaseDistribution]
                ) -> dict[str, Any]:
        """``params`` as calibo values, the study's space grown first where it lacks one of them or its range
        (ValueError, Optuna's, for a distribution the space's parameter is not compatible with)."""
        space = self._space(study_id)
        changes: dict[str, Any] = {}
        out = {}
        for name, v in params.items():
            d = dists[name]
            if isinstance(d, CategoricalDistribution):
                out[name] = v
            elif isinstance(d, IntDistribution):
                out[name] = int(v)
            else:
                out[name] = _finite(v, f"parameter {name!r}")
        for name, d in dists.items():
            if name not in space:
                space = self._space(study_id, fresh=True)
            if name in space:
                grown = _grown(space[name], d, out.get(name), name)
                if grown is not None:
                    changes[name] = grown
            else:
                changes[name] = _holding(calibo_param(d, name), out.get(name))
        if changes:
            with self._errors():
                view = self._client.grow_space(study_id, changes).view
            with self._lock:
                self._spaces[study_id] = view["space"]
        return out

    def _outcome(self, study_id: int, state: TrialState, values: Sequence[float] | None) -> dict[str, Any]:
        wire = _WIRE_STATES[state]
        if state == TrialState.COMPLETE:
            if values is None:
                raise ValueError("a complete trial has values")
            vs = [_finite(v, "an objective value") for v in values]
            return {"state": wire, **({"value": vs[0]} if len(vs) == 1 else {"values": vs})}
        if state == TrialState.PRUNED and values:
            return {"state": wire, "value": _finite(values[0], "a pruned trial's value")}
        return {"state": wire}

    def _study_id_of(self, trial_id: int) -> int:
        with self._lock:
            sid = self._study_of.get(trial_id)
        if sid is None:
            sid = int(self._trial_view(trial_id)["study_id"])
        return sid

    def _keep(self, view: dict[str, Any], points: dict[str, float]) -> None:
        with self._lock:
            self._known[int(view["id"])] = {**view, "intermediate_values": dict(points)}
            self._known.move_to_end(int(view["id"]))
            while len(self._known) > KNOWN:
                self._known.popitem(last=False)

    def _kept(self, view: dict[str, Any], points: dict[str, float] | None = None) -> None:
        """A view a write of this storage answered: kept, with the points known so far, for a trial it
        keeps (its learning-curve points are not in a write's answer)."""
        with self._lock:
            old = self._known.get(int(view["id"]))
        if old is not None:
            self._keep(view, {**old["intermediate_values"], **(points or {})})

    def _trial_view(self, trial_id: int) -> dict[str, Any]:
        with self._lock:
            known = self._known.get(int(trial_id))
        if known is not None:
            return copy.deepcopy(known)
        with self._errors():
            view = self._client.trial_by_id(int(trial_id), curves=True)
        with self._lock:
            self._study_of[int(trial_id)] = int(view["study_id"])
        if _settled(view):
            self._keep(view, view.get("intermediate_values") or {})
        return view

    def _check_updatable(self, trial_id: int) -> None:
        view = self._trial_view(trial_id)
        if _STATES[view["state"]].is_finished():
            raise UpdateFinishedTrialError(f"Trial#{view['number']} has already finished and can not be updated.")

    def _views(self, study_id: int) -> list[dict[str, Any]]:
        """Every trial of the study, by number: the finished ones read before from the cache (up to the
        first trial not known finished), the others from the server."""
        with self._lock:
            done = self._done.setdefault(study_id, {})
            start = 0
            while start in done:
                start += 1
            before = [done[n] for n in range(start)]
        with self._errors():
            fresh = list(self._client.iter_trials(study_id, page_size=PAGE, curves=True, number_from=start))
        with self._lock:
            for v in fresh:
                self._study_of[int(v["id"])] = study_id
                if _settled(v):
                    done[int(v["number"])] = v
        return before + fresh

    @staticmethod
    def _frozen(view: dict[str, Any], space: dict[str, dict[str, Any]]) -> FrozenTrial:
        state = _STATES[view["state"]]
        own = view.get("distributions") or {}
        dists: dict[str, BaseDistribution] = {}
        params: dict[str, Any] = {}
        for name, v in view["params"].items():
            d = _own(own.get(name), v) or optuna_distribution(space[name])
            dists[name] = d
            params[name] = d.to_external_repr(d.to_internal_repr(v))
        values: list[float] | None = None
        if view.get("values") is not None:
            values = [float(x) for x in view["values"]]
        elif view.get("value") is not None:
            values = [float(view["value"])]
        return FrozenTrial(
            number=int(view["number"]), state=state, value=None, values=values,
            datetime_start=_local_time(view.get("started_at")),
            datetime_complete=_local_time(view.get("finished_at")) if state.is_finished() else None,
            params=params, distributions=dists, user_attrs=_unpack(view.get("user_attrs") or {}),
            system_attrs=_unpack(view.get("system_attrs") or {}),
            intermediate_values={int(k): float(x) for k, x in (view.get("intermediate_values") or {}).items()},
            trial_id=int(view["id"]))


def _own(kept: Any, value: Any) -> BaseDistribution | None:
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


def _settled(view: dict[str, Any]) -> bool:
    """A finished trial that changes no more (one failed for silence may still be told)."""
    return _STATES[view["state"]].is_finished() and view.get("failure") != "expired"


class _Errors:
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
