"""CaliboSampler's remote mode: the suggestions come from a calibo server, not a fit in each process.

``CaliboSampler(url=..., token=...)`` keeps Optuna's side unchanged (its storage, its trials,
``study.optimize`` in as many processes and machines as the user runs) and hands the choice of
each trial's relative parameters to one calibo server, so every worker shares one surrogate
(fitted once per result, on the server's workers), one ACI/DtACI calibration state and the
crowd-aware select (a trial asked by any process is pending for every other).

* **The server's study**: for each learned space (``_space.learn_space``: the parameters of the
  completed trials, with their conditions), a calibo study named after the Optuna study and the
  space's signature, created idempotently by whichever process needs it first, with the real
  parameter names. A categorical keeps its choices; a stepped float or int is the index of its
  grid; the engine settings given to the sampler are the study's settings, and its seed mixed with
  the space's signature is the study's seed (a new space's warm-start points are not the old ones).
* **Independent draws** (the first trials, parameters no completed trial holds yet): seeded per
  Optuna trial and parameter (``TrialSeededRandom``), so processes sharing a seed draw distinct
  values, unless the sampler was given its own ``independent_sampler``.
* **Ask**: one trial per Optuna trial, with the Idempotency-Key ``optuna-<trial number>`` (a
  restarted process asking again for the same trial gets the same suggestion) and the Optuna
  trial number in its ``user_attrs`` (``optuna_trial``). The server's trial id is kept in the
  Optuna trial's system attributes: the only mapping, in Optuna's storage.
* **Tell** (``after_trial``): complete with its value(s), failed, or pruned with its last
  intermediate value. A trial whose final parameters are not what the server suggested (an
  enqueued trial, fixed parameters) is told failed there and its result added as an added trial
  (it counts in the fit, never in the calibration).
* **History**: the completed trials a new server study does not hold yet (those before it
  existed, under an earlier space, or sampled independently) are added the first time a process
  sees that study, each by the process that ran it (the Optuna trial's ``calibo:worker``
  attribute), and only when the server lacks its Optuna trial number: so each once. Trials no
  process of this mode ran (an earlier sampler's) are added by every process that finds them
  missing, so several processes meeting a new server study at once may add such a trial twice;
  the trials of a process that was restarted (a new pid) are not added to later server studies.

No engine code runs in the worker processes in this mode: no fit, no select, no adapt.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import threading
from collections.abc import Sequence
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from calibo import Client
from calibo.errors import CaliboError

from ._space import Encoding, signature

__all__ = ["RemoteBackend", "TrialSeededRandom"]

_ATTR = "calibo:remote"  # the Optuna trial's system attribute: {"study", "trial", "params"}
_OWNER = "calibo:worker"  # the process (host-pid) that ran the Optuna trial
_NAME_LIMIT = 200  # calibo's study-name bound leaves room; Optuna names can be longer


class _Wire:
    """A learned space as the server's space (real names) and the values both ways."""

    def __init__(self, distributions: dict[str, BaseDistribution],
                 conditions: dict[str, tuple[str, list[Any]]]) -> None:
        self.enc = Encoding(distributions, conditions)
        self.index = {n: i for i, n in enumerate(self.enc.names)}
        self.spec: dict[str, dict[str, Any]] = {}
        params = {q.name: q for q in self.enc.space.params}
        for i, (name, d) in enumerate(zip(self.enc.names, self.enc.dists, strict=True)):
            item = params[f"p{i}"].to_dict()
            item.pop("condition", None)
            if isinstance(d, CategoricalDistribution):
                item["choices"] = list(d.choices)
            if name in self.enc.conditions:
                parent, values = self.enc.conditions[name]
                item["condition"] = {"parent": parent,
                                     "values": [self._out(parent, self.enc._one(self._dist(parent), v))
                                                for v in values]}
            self.spec[name] = item

    def _dist(self, name: str) -> BaseDistribution:
        return self.enc.dists[self.index[name]]

    def _out(self, name: str, x: Any) -> Any:
        d = self._dist(name)
        return d.choices[int(x)] if isinstance(d, CategoricalDistribution) else x

    def to_wire(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """An Optuna trial's parameters as the server's values (None: not a configuration)."""
        coded = self.enc.encode(params)
        if coded is None:
            return None
        return {self.enc.names[int(k[1:])]: self._out(self.enc.names[int(k[1:])], v) for k, v in coded.items()}

    def from_wire(self, values: dict[str, Any]) -> dict[str, Any]:
        coded = {}
        for name, v in values.items():
            d = self._dist(name)
            coded[f"p{self.index[name]}"] = d.to_internal_repr(v) if isinstance(d, CategoricalDistribution) else v
        return self.enc.decode(coded)


class TrialSeededRandom(RandomSampler):
    """Random sampling seeded by (seed, Optuna study, trial number, parameter).

    The independent sampler of the remote mode: processes that share a sampler seed draw distinct
    values for their trials (a process-wide ``RandomSampler(seed)`` would draw the same values for
    each process's first trial), and one trial's values stay reproducible.
    """

    def __init__(self, seed: int | None) -> None:
        super().__init__(seed=seed)
        self._base = seed

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        if self._base is None:
            return super().sample_independent(study, trial, param_name, param_distribution)
        key = f"{self._base}-{study.study_name}-{trial.number}-{param_name}"
        one = RandomSampler(seed=int(hashlib.sha1(key.encode()).hexdigest()[:8], 16))
        return one.sample_independent(study, trial, param_name, param_distribution)


def _value_of(trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> Any:
    if state == TrialState.COMPLETE and values is not None:
        return [float(v) for v in values] if len(values) > 1 else float(values[0])
    if state == TrialState.PRUNED and trial.intermediate_values:
        last = trial.intermediate_values[max(trial.intermediate_values)]
        return float(last) if math.isfinite(last) else None
    return None


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class RemoteBackend:
    """What ``CaliboSampler(url=...)`` does instead of fitting: see the module docstring."""

    def __init__(self, url: str, token: str | None, study_name: str | None, seed: int | None,
                 create: dict[str, Any], client: Client | None = None) -> None:
        self.client = client or Client(url, token if token is not None else os.environ.get("CALIBO_TOKEN"))
        self.study_name = study_name
        self.seed = seed
        self.create = create  # surrogate, acquisition, settings for the server's study
        self.worker = f"{socket.gethostname()}-{os.getpid()}"
        self._lock = threading.Lock()
        self._studies: dict[str, int] = {}  # server study name -> id, those this process has synced
        self._wires: dict[int, _Wire] = {}  # server study id -> its space
        self._latest: dict[str, int] = {}  # Optuna study name -> the server study last asked

    # ------------------------------------------------------------ server study
    def _name(self, study: Study, sig: str) -> str:
        base = self.study_name or f"optuna-{study.study_name}"
        return f"{base[:_NAME_LIMIT]}-{hashlib.sha1(sig.encode()).hexdigest()[:10]}"

    def _study(self, study: Study, wire: _Wire, sig: str) -> int:
        name = self._name(study, sig)
        with self._lock:
            if name in self._studies:
                return self._studies[name]
        directions = ["minimize" if d.name == "MINIMIZE" else "maximize" for d in study.directions]
        kw: dict[str, Any] = {k: v for k, v in self.create.items() if v is not None}
        if len(directions) > 1:
            kw["directions"] = directions
        else:
            kw["direction"] = directions[0]
        # a seed of its own per space: a new server study's warm-start sequence must not replay the
        # points the previous space's study already handed out
        seed = None if self.seed is None else int(hashlib.sha1(f"{self.seed}-{sig}".encode()).hexdigest()[:7], 16)
        view = self.client.create_study(name, wire.spec, seed=seed, **kw, user_attrs={
            "optuna_study": study.study_name}).view
        sid = int(view["id"])
        self._sync_history(study, sid, wire)
        with self._lock:
            self._studies[name] = sid
            self._wires[sid] = wire
        return sid

    def _sync_history(self, study: Study, sid: int, wire: _Wire) -> None:
        """Add the finished Optuna trials the server's study lacks (by Optuna trial number)."""
        held = set()
        for t in self.client.iter_trials(sid, page_size=1000):
            n = (t.get("user_attrs") or {}).get("optuna_trial")
            if n is not None and t.get("state") in ("complete", "pruned"):
                held.add(int(n))
        rows = []
        for t in study._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED),
                                   use_cache=False):
            owner = t.system_attrs.get(_OWNER)
            if t.number in held or owner not in (None, self.worker):
                continue  # on the server already, or another process's to add
            row = self._row(t, wire, t.state, t.values)
            if row is not None:
                rows.append(row)
        if rows:
            self.client.add_trials(sid, rows)

    def _row(self, t: FrozenTrial, wire: _Wire, state: TrialState,
             values: Sequence[float] | None) -> dict[str, Any] | None:
        """An Optuna trial as an added trial of the server's study (None: nothing to add)."""
        params = wire.to_wire(t.params)
        value = _value_of(t, state, values)
        if params is None or value is None:
            return None
        row: dict[str, Any] = {"params": params, "user_attrs": {"optuna_trial": t.number}}
        if state == TrialState.PRUNED:
            row["state"] = "pruned"
        if isinstance(value, list):
            if not all(map(math.isfinite, value)):
                return None
            row["values"] = value
        else:
            if not math.isfinite(value):
                return None
            row["value"] = value
        return row

    def _add(self, sid: int, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        """A finished trial the server did not suggest, as an added trial of study ``sid``."""
        wire = self._wires.get(sid)
        row = None if wire is None else self._row(trial, wire, state, values)
        if row is not None:  # else (not a configuration of that space) the next history sync may
            self.client.add_trials(sid, [row])

    # ------------------------------------------------------------ Optuna hooks
    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        study._storage.set_trial_system_attr(trial._trial_id, _OWNER, self.worker)

    def sample_relative(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution],
                        conditions: dict[str, tuple[str, list[Any]]]) -> dict[str, Any]:
        wire = _Wire(search_space, conditions)
        sig = signature(search_space, wire.enc.conditions)
        sid = self._study(study, wire, sig)
        self._latest[study.study_name] = sid
        asked = self.client.ask(sid, 1, self.worker, f"optuna-{trial.number}",
                                user_attrs={"optuna_trial": trial.number})[0]
        params = wire.from_wire(asked.params)
        study._storage.set_trial_system_attr(trial._trial_id, _ATTR, json.dumps(
            {"study": sid, "trial": asked.id, "params": params}))
        return params

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        stored = trial.system_attrs.get(_ATTR)
        if stored is None:  # never asked from the server (all its parameters fixed, or independent)
            sid = self._latest.get(study.study_name)
            if sid is not None:  # else the next server study's history sync adds it
                self._add(sid, trial, state, values)
            return
        stored = json.loads(stored)
        sid, tid = int(stored["study"]), int(stored["trial"])
        # a suggested parameter the objective did not use does not change the result (it is told as
        # suggested); one it used with another value (enqueued, fixed) does
        same = all(n not in trial.params or _key(trial.params[n]) == _key(v) for n, v in stored["params"].items())
        value = _value_of(trial, state, values)
        try:
            if not same:
                self.client.tell(sid, tid, state="failed", user_attrs={
                    "fail_reason": "the Optuna trial ran other parameters than suggested; added as told"})
                self._add(sid, trial, state, values)
                return
            if state == TrialState.COMPLETE and value is not None:
                self.client.tell(sid, tid, value)
            elif state == TrialState.PRUNED:
                self.client.tell(sid, tid, value, state="pruned")
            else:
                self.client.tell(sid, tid, state="failed")
        except CaliboError as exc:
            if exc.status != 409:  # 409: told already (a retried after_trial)
                raise

