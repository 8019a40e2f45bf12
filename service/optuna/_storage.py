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
(``number_from``). The mapping itself (values, attributes, distributions, errors) is ``_mapping``. It
pickles (Optuna's process pools) and is thread-safe.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Container, Sequence
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution, distribution_to_json
from optuna.exceptions import DuplicatedStudyError, UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
from optuna.study import StudyDirection
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial, TrialState

from calibo import Client
from calibo.errors import Conflict

from ._mapping import (
    STATES,
    WIRE_STATES,
    Errors,
    calibo_param,
    finite,
    frozen_trial,
    grown,
    holding,
    pack,
    settled,
    unpack,
    wire_time,
)

__all__ = ["CaliboStorage"]

MAX_OBJECTIVES = 4  # a calibo study's directions
PAGE = 1000  # the server's largest page of trials
KNOWN = 10_000  # trial views kept (the trials this storage runs, finished ones it read)

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
            self._client.set_study_user_attr(study_id, key, pack(value))

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        with self._errors():
            self._client.set_study_system_attr(study_id, key, pack(value))

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
        return dict(unpack(self._study(study_id).get("user_attrs") or {}))

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return dict(unpack(self._study(study_id, system_attrs=True).get("system_attrs") or {}))

    def get_all_studies(self) -> list[FrozenStudy]:
        with self._errors():
            summaries = self._client.list_studies(system_attrs=True)
        return [FrozenStudy(study_name=s["name"], direction=None, directions=self._directions(s),
                            user_attrs=unpack(s.get("user_attrs") or {}),
                            system_attrs=unpack(s.get("system_attrs") or {}), study_id=int(s["id"]))
                for s in summaries]

    # ------------------------------------------------------------------ trials
    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        body: dict[str, Any] = {"params": {}, "state": "running"}
        if template_trial is not None:
            t = template_trial
            body = {"state": WIRE_STATES[t.state], "params": self._params(study_id, t.params, t.distributions)}
            if t.distributions:
                body["distributions"] = {n: json.loads(distribution_to_json(d)) for n, d in t.distributions.items()}
            if t.user_attrs:
                body["user_attrs"] = pack(t.user_attrs)
            if t.system_attrs:
                body["system_attrs"] = pack(t.system_attrs)
            if t.intermediate_values:
                body["intermediate_values"] = {str(int(k)): finite(v, f"intermediate value at step {k}")
                                               for k, v in t.intermediate_values.items()}
            if t.datetime_start is not None:
                body["started_at"] = wire_time(t.datetime_start)
            if t.state.is_finished():
                if t.datetime_complete is not None:
                    body["finished_at"] = wire_time(t.datetime_complete)
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
        if STATES[view["state"]].is_finished():
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
        value = finite(intermediate_value, f"the intermediate value at step {step}")
        with self._errors():
            self._kept(self._client.change_trial(self._study_id_of(trial_id), trial_id,
                                                 intermediate_values={str(int(step)): value}), {str(int(step)): value})

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._errors():
            self._kept(self._client.change_trial(self._study_id_of(trial_id), trial_id, user_attrs={key: pack(value)}))

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._errors():
            self._kept(self._client.change_trial(self._study_id_of(trial_id), trial_id,
                                                 system_attrs={key: pack(value)}))

    def get_trial(self, trial_id: int) -> FrozenTrial:
        view = self._trial_view(trial_id)
        return frozen_trial(view, self._space_of([view]))

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
        out = [frozen_trial(v, space) for v in views]
        if states is not None:
            out = [t for t in out if t.state in states]
        return copy.deepcopy(out) if deepcopy else out

    def get_n_trials(self, study_id: int, state: tuple[TrialState, ...] | TrialState | None = None) -> int:
        counts = self._study(study_id)["trials"]
        if state is None:
            return int(counts["total"])
        wanted = (state,) if isinstance(state, TrialState) else state
        return sum(int(counts.get(WIRE_STATES[s], 0)) for s in wanted)

    # ------------------------------------------------------------------ helpers
    def _errors(self) -> Errors:
        return Errors()

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
                out[name] = finite(v, f"parameter {name!r}")
        for name, d in dists.items():
            if name not in space:
                space = self._space(study_id, fresh=True)
            if name in space:
                wider = grown(space[name], d, out.get(name), name)
                if wider is not None:
                    changes[name] = wider
            else:
                changes[name] = holding(calibo_param(d, name), out.get(name))
        if changes:
            with self._errors():
                view = self._client.grow_space(study_id, changes).view
            with self._lock:
                self._spaces[study_id] = view["space"]
        return out

    def _outcome(self, study_id: int, state: TrialState, values: Sequence[float] | None) -> dict[str, Any]:
        wire = WIRE_STATES[state]
        if state == TrialState.COMPLETE:
            if values is None:
                raise ValueError("a complete trial has values")
            vs = [finite(v, "an objective value") for v in values]
            return {"state": wire, **({"value": vs[0]} if len(vs) == 1 else {"values": vs})}
        if state == TrialState.PRUNED and values:
            return {"state": wire, "value": finite(values[0], "a pruned trial's value")}
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
        if settled(view):
            self._keep(view, view.get("intermediate_values") or {})
        return view

    def _check_updatable(self, trial_id: int) -> None:
        view = self._trial_view(trial_id)
        if STATES[view["state"]].is_finished():
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
                if settled(v):
                    done[int(v["number"])] = v
        return before + fresh
