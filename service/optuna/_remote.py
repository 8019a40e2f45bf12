"""CaliboSampler's remote mode: the suggestions come from a calibo server, not a fit in each process.

``CaliboSampler(url=..., token=...)`` keeps Optuna's side unchanged (its storage, its trials,
``study.optimize`` in as many processes and machines as the user runs) and hands the choice of
each trial's relative parameters to one calibo server, so every worker shares one surrogate
(fitted once per result, on the server's workers), one ACI/DtACI calibration state and the
crowd-aware select (a trial asked by any process is pending for every other).

* **One server study per Optuna study**, named after it (``study_name=`` names it otherwise; a name
  longer than the server takes is cut and suffixed with a hash of the whole). The first process that
  needs it finds it by name, or creates it with the space learned so far (``_space.learn_space``:
  the parameters of the completed trials, with their conditions), the real parameter names, the
  Optuna study's direction(s) and the sampler's seed and engine settings; a study of that name that
  already exists is used as it is (its settings), if its direction(s) are the Optuna study's.
* **Its space grows** (``PATCH /v1/studies/{study}/space``) as the define-by-run study reveals
  parameters: a parameter learned that the server's study lacks is added, with its learned
  condition; a categorical's new choices, a wider range and a condition's new parent values grow the
  server's parameter. The trials told before keep their values, the new parameter inactive for them.
  What the server holds otherwise stays as it is (a parameter learned conditional later that the
  server holds unconditionally: the server's suggestion of it is unused where the objective does not
  ask for it; a suggestion that would so run, or run as a trial told before a parameter was added
  ran, another Optuna trial's configuration is told failed, interrupted, and asked again). A
  parameter whose Optuna distribution the server's cannot become by growth (another type or
  scale, a narrower range, fewer choices: a study name reused by another Optuna study) is a
  ``ValueError`` naming it. A categorical keeps its choices; a stepped float or int is the index of
  its grid (a reused name with another grid of the same size is not detected).
* **Independent draws** (the first trials, parameters no completed trial holds yet): seeded per
  Optuna trial and parameter (``TrialSeededRandom``), so processes sharing a seed draw distinct
  values, unless the sampler was given its own ``independent_sampler``.
* **Ask**: one trial per Optuna trial, with the Idempotency-Key ``optuna-<run>-<trial number>`` (a
  restarted process asking again for the same trial gets the same suggestion) and the Optuna
  trial number and run in its ``user_attrs`` (``optuna_trial``, ``optuna_run``). The run names
  the Optuna study in its storage (a hash of its trial 0's id and start), so that two Optuna
  studies of one name (two storages) using one server study keep their trials apart. The server's
  trial id is kept in the Optuna trial's system attributes: the only mapping, in Optuna's storage.
  Of the server's parameters, those in the trial's relative search space are its relative sample.
* **Tell** (``after_trial``): complete with its value(s), failed, or pruned with its last
  intermediate value. A trial that ran a suggested parameter with another value (an enqueued
  trial, fixed parameters) is told failed there and its result added as an added trial (it counts
  in the fit, never in the calibration); a suggested parameter the objective did not ask for
  changes nothing.
* **History**: the completed trials the server's study does not hold (those before a relative
  space existed, or sampled independently) are added the first time a process meets the study,
  each by the process that ran it (the Optuna trial's ``calibo:worker`` attribute), and only when
  the server lacks its Optuna trial number (of this run): so each once. A trial is added with the parameters
  the server's study has, as a configuration of its space (a parameter added later is inactive
  for it; one the space holds unconditionally that the objective did not ask for takes a draw
  seeded by the trial, as an unused suggested parameter holds a value), or not at all (a value
  the server's parameter cannot hold). Trials no process of this mode ran (an earlier sampler's) are added by
  every process that finds them missing, so several processes meeting the study at once may add
  such a trial twice.

No engine fit or select runs in the worker processes in this mode (the engine's space only checks
configurations).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from calibo import Client
from calibo.engine import SearchSpace
from calibo.engine.errors import FieldError
from calibo.engine.space.params import choice_key
from calibo.errors import CaliboError, Conflict, InvalidRequest, NotFound

from ._wire import Codec, active, canonical, json_key, value_of

__all__ = ["RemoteBackend"]

_ATTR = "calibo:remote"  # the Optuna trial's system attribute: {"study", "trial", "params", "server"}
_OWNER = "calibo:worker"  # the process (host-pid) that ran the Optuna trial
_NAME_LIMIT = 255  # the server's longest study name
_CUT = 200  # a longer Optuna study name: its first _CUT characters, "-", a hash of the whole
_REPEATS = 8  # suggestions that would repeat an Optuna trial's configuration, asked again at most this often


@dataclass
class _Server:
    """The server's study of an Optuna study, as this process last read it."""

    id: int
    name: str
    space: SearchSpace


def server_study_name(optuna_name: str, given: str | None = None) -> str:
    """The name of the server's study for the Optuna study ``optuna_name`` (``given``: the sampler's
    ``study_name``): the name itself, or, past the server's bound, its first characters and a hash."""
    name = given or optuna_name
    if len(name) <= _NAME_LIMIT:
        return name
    return f"{name[:_CUT]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"


class RemoteBackend:
    """What ``CaliboSampler(url=...)`` does instead of fitting: see the module docstring."""

    def __init__(self, url: str, token: str | None, study_name: str | None, seed: int | None,
                 create: dict[str, Any], client: Client | None = None) -> None:
        self.client = client or Client(url, token if token is not None else os.environ.get("CALIBO_TOKEN"))
        self.study_name = study_name
        self.seed = seed
        self.create = create  # surrogate, acquisition, settings for the server's study
        self.worker = f"{socket.gethostname()}-{os.getpid()}"
        self._lock = threading.RLock()  # one process meets (and grows) a server study once at a time
        self._known: dict[str, _Server] = {}  # Optuna study name -> its server study, met and synced
        # Optuna study name -> the last learned space (as _spec) its server study was found to hold: a
        # space only grows, so the same one again needs no growth check
        self._held: dict[str, str] = {}
        self._runs: dict[tuple[int, int], str] = {}  # (storage, Optuna study id) -> its run

    def _run(self, study: Study) -> str:
        """The Optuna study's run: a hash of its trial 0's id and start, the same in every process."""
        key = (id(study._storage), study._study_id)
        run = self._runs.get(key)
        if run is None:
            t0 = study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(study._study_id, 0))
            start = t0.datetime_start.isoformat() if t0.datetime_start is not None else ""
            run = hashlib.sha1(f"{t0._trial_id}-{start}".encode()).hexdigest()[:12]
            self._runs[key] = run
        return run

    # ------------------------------------------------------------ server study
    def _server(self, study: Study, search_space: dict[str, BaseDistribution],
                conditions: dict[str, tuple[str, list[Any]]]) -> _Server:
        """The Optuna study's server study, its space grown to hold ``search_space``."""
        wanted = json.dumps(self._spec(search_space, conditions), sort_keys=True)
        with self._lock:
            srv = self._known.get(study.study_name)
            if srv is not None and self._held.get(study.study_name) == wanted:
                return srv
            first = srv is None
            if srv is None:
                srv = self._find_or_create(study, search_space, conditions)
            for attempt in range(3):
                changes = self._growth(study, srv, search_space, conditions)
                if not changes:
                    break
                try:
                    srv = _Server(srv.id, srv.name,
                                  SearchSpace.from_dict(self.client.grow_space(srv.id, changes).space))
                    break
                except InvalidRequest:
                    if attempt == 2:
                        raise
                    # another process grew it meanwhile (a parameter it learned with another condition):
                    # what the server holds now decides
                    srv = _Server(srv.id, srv.name, SearchSpace.from_dict(self.client.get_study(srv.id)["space"]))
            if first:
                self._sync_history(study, srv)
            self._known[study.study_name] = srv
            self._held[study.study_name] = wanted
            return srv

    def _find_or_create(self, study: Study, search_space: dict[str, BaseDistribution],
                        conditions: dict[str, tuple[str, list[Any]]]) -> _Server:
        name = server_study_name(study.study_name, self.study_name)
        directions = ["minimize" if d.name == "MINIMIZE" else "maximize" for d in study.directions]
        try:
            view = self.client.load_study(name, by="name").view
        except NotFound:
            kw: dict[str, Any] = {k: v for k, v in self.create.items() if v is not None}
            if len(directions) > 1:
                kw["directions"] = directions
            else:
                kw["direction"] = directions[0]
            try:
                view = self.client.create_study(name, self._spec(search_space, conditions), seed=self.seed, **kw,
                                                user_attrs={"optuna_study": study.study_name}).view
            except Conflict:  # another process created it first (with the space it had learned)
                view = self.client.load_study(name, by="name").view
        have = view.get("directions") or [view["direction"]]
        if have != directions:
            raise ValueError(f"CaliboSampler: the calibo study {name!r} optimizes {have}, the Optuna study "
                             f"{study.study_name!r} {directions}: give the sampler another study_name")
        return _Server(int(view["id"]), name, SearchSpace.from_dict(view["space"]))

    @staticmethod
    def _condition(name: str, search_space: dict[str, BaseDistribution],
                   conditions: dict[str, tuple[str, list[Any]]]) -> dict[str, Any] | None:
        """``name``'s learned condition in the server's values, or None."""
        if name not in conditions or conditions[name][0] not in search_space:
            return None
        parent, values = conditions[name]
        codec = Codec(search_space[parent])
        return {"parent": parent, "values": [codec.out(v) for v in values]}

    def _spec(self, search_space: dict[str, BaseDistribution],
              conditions: dict[str, tuple[str, list[Any]]]) -> dict[str, Any]:
        """A learned space as the server's space (real names, learned conditions)."""
        out = {}
        for name in sorted(search_space):
            out[name] = Codec(search_space[name]).spec()
            cond = self._condition(name, search_space, conditions)
            if cond is not None:
                out[name]["condition"] = cond
        return out

    def _growth(self, study: Study, srv: _Server, search_space: dict[str, BaseDistribution],
                conditions: dict[str, tuple[str, list[Any]]]) -> dict[str, Any]:
        """What the server's space needs to hold ``search_space`` (``{}``: nothing); ValueError for a
        parameter it cannot hold."""
        have = srv.space.to_dict()
        changes: dict[str, Any] = {}
        for name in sorted(search_space):
            want = Codec(search_space[name]).spec()
            cond = self._condition(name, search_space, conditions)
            if name not in have:
                changes[name] = want if cond is None else {**want, "condition": cond}
                continue
            old = have[name]
            grown = dict(want)
            if "condition" in old:
                grown["condition"] = old["condition"]
                if cond is not None and cond["parent"] == old["condition"]["parent"]:
                    known = {choice_key(v) for v in old["condition"]["values"]}
                    more = [v for v in cond["values"] if choice_key(v) not in known]
                    if more:  # the learned condition holds under more parent values
                        grown["condition"] = {"parent": cond["parent"], "values": [*old["condition"]["values"], *more]}
            same = canonical(name, want) == canonical(name, old) and grown.get("condition") == old.get("condition")
            if same:
                continue
            try:
                after = srv.space.grow({name: grown})
            except FieldError as e:
                raise ValueError(
                    f"CaliboSampler: the parameter {name!r} is {search_space[name]!r} in the Optuna study "
                    f"{study.study_name!r}, which the calibo study {srv.name!r} cannot hold ({e.field}: {e.message}). "
                    "The server study is named after the Optuna study: give the sampler another study_name for "
                    "another search space") from None
            if after != srv.space:
                changes[name] = grown
        return changes

    def _space(self, sid: int) -> SearchSpace:
        """The space of the server's study ``sid`` (as met, or read now)."""
        for srv in self._known.values():
            if srv.id == sid:
                return srv.space
        return SearchSpace.from_dict(self.client.get_study(sid)["space"])

    def _sync_history(self, study: Study, srv: _Server) -> None:
        """Add the finished Optuna trials the server's study lacks (by Optuna trial number)."""
        run = self._run(study)
        held = set()
        for t in self.client.iter_trials(srv.id, page_size=1000):
            attrs = t.get("user_attrs") or {}
            n = attrs.get("optuna_trial")
            if n is not None and attrs.get("optuna_run") == run and t.get("state") in ("complete", "pruned"):
                held.add(int(n))
        rows = []
        for ft in study._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED),
                                    use_cache=False):
            owner = ft.system_attrs.get(_OWNER)
            if ft.number in held or owner not in (None, self.worker):
                continue  # on the server already, or another process's to add
            row = self._row(ft, srv.space, ft.state, ft.values, run)
            if row is not None:
                rows.append(row)
        if rows:
            self.client.add_trials(srv.id, rows)

    @staticmethod
    def _params(t: FrozenTrial, space: SearchSpace, run: str) -> dict[str, Any] | None:
        """An Optuna trial's parameters as a configuration of the server's ``space`` (those it has,
        active under its conditions; a grown one may be absent), or None when they are not one.

        A parameter the server's space holds where the objective never asked for it (the space
        learned it unconditionally from one branch's trials: see the docstring) takes a draw seeded
        by the trial: the trial's result holds for any value of it, as for a suggested parameter
        the objective left unused."""
        have = {p.name: p for p in space.params}
        params = {}
        for name, v in t.params.items():
            if name not in have or name not in t.distributions:
                continue
            codec = Codec(t.distributions[name])
            if codec.stepped and canonical(name, codec.spec()) != canonical(name, have[name].to_dict()):
                continue  # another grid: its index is not the server's
            try:
                params[name] = codec.out(v)
            except (ValueError, TypeError):
                continue
        rng = np.random.default_rng(int(hashlib.sha1(f"{run}-{t.number}".encode()).hexdigest()[:8], 16))
        while unused := [n for n in space.active_names(params)
                         if n not in params and n not in t.params and not have[n].grown]:
            for name in unused:
                params[name] = have[name].draw(rng)
        active = set(space.active_names(params))
        try:
            return space.validate({k: v for k, v in params.items() if k in active})
        except FieldError:
            return None

    def _row(self, t: FrozenTrial, space: SearchSpace, state: TrialState,
             values: Sequence[float] | None, run: str) -> dict[str, Any] | None:
        """An Optuna trial as an added trial of the server's study (None: nothing to add)."""
        params = self._params(t, space, run)
        value = value_of(t, state, values)
        if params is None or value is None:
            return None
        row: dict[str, Any] = {"params": params, "user_attrs": {"optuna_trial": t.number, "optuna_run": run}}
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

    def _add(self, study: Study, sid: int, trial: FrozenTrial, state: TrialState,
             values: Sequence[float] | None) -> None:
        """A finished trial the server did not suggest, as an added trial of study ``sid``."""
        row = self._row(trial, self._space(sid), state, values, self._run(study))
        if row is not None:  # else (not a configuration of that space) it is left out
            self.client.add_trials(sid, [row])

    # ------------------------------------------------------------ Optuna hooks
    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        study._storage.set_trial_system_attr(trial._trial_id, _OWNER, self.worker)

    def sample_relative(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution],
                        conditions: dict[str, tuple[str, list[Any]]]) -> dict[str, Any]:
        srv = self._server(study, search_space, conditions)
        run = self._run(study)
        for attempt in range(_REPEATS + 1):
            key = f"optuna-{run}-{trial.number}" + (f"-r{attempt}" if attempt else "")
            asked = self.client.ask(srv.id, 1, self.worker, key,
                                    user_attrs={"optuna_trial": trial.number, "optuna_run": run})[0]
            params = {}
            for name, x in asked.params.items():
                if name in search_space:  # the rest: not in this trial's relative space (see the docstring)
                    try:
                        params[name] = Codec(search_space[name]).back(x)
                    except (ValueError, TypeError):
                        continue  # the server's study holds more than the Optuna distribution: drawn independently
            # stored before the check: of two processes asking at once, the later check sees the other
            study._storage.set_trial_system_attr(trial._trial_id, _ATTR, json.dumps(
                {"study": srv.id, "trial": asked.id, "params": params, "server": asked.params}))
            if attempt == _REPEATS:
                break  # asked as often as allowed: run it, repeat or not
            runs = active(params, conditions)
            earlier = self._repeats(study, trial, params, runs, conditions)
            if earlier is None:
                break
            unused = ", ".join(sorted(set(params) - set(runs))) or "no other parameter"
            try:  # not run: interrupted, so the server neither fits on it nor learns a failure from it
                self.client.tell(srv.id, asked.id, state="failed", interrupted=True, user_attrs={
                    "fail_reason": f"repeats the configuration of Optuna trial {earlier} (the objective does not "
                                   f"ask for {unused} there); asked again"})
            except CaliboError as exc:
                if exc.status != 409:  # 409: told already (a restarted process asking again)
                    raise
        return params

    @staticmethod
    def _repeats(study: Study, trial: FrozenTrial, params: dict[str, Any], runs: dict[str, Any],
                 conditions: dict[str, tuple[str, list[Any]]]) -> int | None:
        """The number of another Optuna trial that ran, or was suggested to run, the configuration
        ``runs`` (``params`` as the learned ``conditions`` say the objective asks for them), or None.

        A running trial counts by its stored suggestion. A completed trial counts whenever each of
        its parameters has its value in ``params``: the objective, asking by the values it is given,
        takes that trial's path and asks for just those, whatever ``conditions`` (learned from the
        trials one process had seen) say of the rest."""
        want = json_key(runs)
        for t in study._get_trials(deepcopy=False, use_cache=False):
            if t.number == trial.number:
                continue
            stored = t.system_attrs.get(_ATTR) if t.state == TrialState.RUNNING else None
            if json_key(t.params) == want or (stored is not None and json_key(active(
                    {**json.loads(stored)["params"], **t.params}, conditions)) == want):
                return t.number
            if t.state == TrialState.COMPLETE and t.params and all(
                    name in params and json_key(params[name]) == json_key(v) for name, v in t.params.items()):
                return t.number
        return None

    @staticmethod
    def _ran_as_suggested(trial: FrozenTrial, suggested: dict[str, Any]) -> bool:
        """Whether every suggested parameter the objective asked for has the suggested value (one it
        did not ask for changes nothing)."""
        for name, x in suggested.items():
            if name not in trial.params:
                continue
            try:
                told = Codec(trial.distributions[name]).out(trial.params[name])
            except (KeyError, ValueError, TypeError):
                return False
            if json_key(told) != json_key(x):
                return False
        return True

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        stored = trial.system_attrs.get(_ATTR)
        if stored is None:  # never asked from the server (all its parameters fixed, or independent)
            srv = self._known.get(study.study_name)
            if srv is not None:  # else the history sync of the first process to meet the study adds it
                self._add(study, srv.id, trial, state, values)
            return
        stored = json.loads(stored)
        sid, tid = int(stored["study"]), int(stored["trial"])
        value = value_of(trial, state, values)
        try:
            if not self._ran_as_suggested(trial, stored.get("server", {})):
                self.client.tell(sid, tid, state="failed", interrupted=True, user_attrs={
                    "fail_reason": "the Optuna trial ran other parameters than suggested; added as told"})
                self._add(study, sid, trial, state, values)
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

