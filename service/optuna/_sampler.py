"""``CaliboSampler``: calibo's calibrated surrogates behind Optuna's sampler interface.

Optuna samplers are stateless between calls: everything this one needs is read
from the study at each call.

* **Relative search space**: learned from the completed trials (``_space.learn_space``):
  every parameter with one distribution throughout, and for one that only some
  trials hold (a define-by-run conditional parameter: ``gamma`` only for some
  ``kernel``s), its condition: the parent and the parent values under which it
  appears. The engine models that conditional space natively, and a trial's relative
  sample holds exactly the parameters active under its parent values. What is left
  (dynamic ranges, a parameter no parent explains, ``low == high``) is sampled by the
  independent sampler (random by default), with a warning once the parameter has
  been seen in a completed trial. Discovery is not warned of: a parameter no
  completed trial holds yet, or a conditional one appearing under a parent value no
  completed trial showed it with (``gamma`` the first time ``kernel`` is poly), has
  nothing to learn from yet; the next trials model it.
* **Encoding**: a float stays a float (log where asked); a float or int with a
  step becomes the integer index of its grid, so the engine never proposes a
  value between steps; categorical choices are encoded by index.
* **fit / select**: before ``n_startup_trials`` completed trials the relative
  parameters come from the study's scrambled Sobol sequence; after, the engine
  fits its surrogate on the COMPLETE trials (refitting only when they change)
  and selects with the RUNNING trials as pending configurations: the same
  crowd-aware select the service runs.
* **Calibration state**: the prediction a configuration was chosen on is stored
  in the study's system attributes, keyed by trial (not the trial's own, so
  ``trials_dataframe()`` shows none of it), and the ACI/DtACI state is the replay of
  ``adapt`` over the completed trials in the order they finished, so it is
  consistent with what was told whichever process or thread told it. A trial
  whose parameters differ from what was suggested (``enqueue_trial``, fixed
  parameters) does not adapt it.
* **Failed and pruned trials** (NaN objectives fail) do not feed the surrogate,
  and their configurations are not suggested again; infinite values are kept out
  of the fit too.
* **Constraints** (``trial.set_constraint(key, value)``, feasible when every value
  is <= 0): when every completed trial carries the same constraint keys, each is
  modelled by its own calibrated surrogate and the acquisition is weighed by the
  calibrated probability of feasibility (the engine's constrained fit and select);
  the incumbent is the best feasible trial.
"""

from __future__ import annotations

import base64
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
)
from optuna.samplers import BaseSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from calibo.engine import EngineConfig, Prediction, SearchSpace, StudyState, fit, select
from calibo.engine.errors import FieldError
from calibo.engine.fit import FitCache
from calibo.engine.limits import MAX_FEATURES, MAX_PARAMS, SETTING_RANGES
from calibo.engine.multi import resolve as resolve_multi
from calibo.engine.outcomes import check_directions

from ._space import Encoding, LearnedSpace, learn_space, signature

__all__ = ["CaliboSampler"]

_log = optuna.logging.get_logger(__name__)
_KEY = "calibo"  # prefix of the system attributes this sampler writes
_CHUNK = 2045  # longest system-attribute string Optuna's own samplers write (RDB column sizes)


# ------------------------------------------------------- system attributes
# What the sampler keeps per trial (its relative sample, the prediction it was chosen on) lives in the
# study's system attributes, ``calibo:<key>:<trial id>:<chunk>``: every process sharing the storage
# reads it, and ``trials_dataframe()``, which shows each trial's own system attributes, shows none of it.
def _name(key: str, trial_id: int, i: int) -> str:
    return f"{_KEY}:{key}:{trial_id}:{i}"


def _put(study: Study, trial_id: int, key: str, value: Any) -> None:
    text = json.dumps(value, separators=(",", ":"))
    for i in range(0, max(len(text), 1), _CHUNK):
        study._storage.set_study_system_attr(study._study_id, _name(key, trial_id, i // _CHUNK),
                                             text[i:i + _CHUNK])


def _joined(attrs: dict[str, Any], key: str, trial_id: int) -> Any:
    """The value ``_put`` stored for ``trial_id`` among the study's system attributes ``attrs``, or None."""
    parts, i = [], 0
    while (part := attrs.get(_name(key, trial_id, i))) is not None:
        parts.append(part)
        i += 1
    return json.loads("".join(parts)) if parts else None


def _get(trial: FrozenTrial, key: str) -> Any:
    """What an earlier version kept in the trial's own system attributes (``calibo:<key>:<chunk>``)."""
    parts, i = [], 0
    while (part := trial.system_attrs.get(f"{_KEY}:{key}:{i}")) is not None:
        parts.append(part)
        i += 1
    return json.loads("".join(parts)) if parts else None


def stored(study: Study, trial: FrozenTrial, key: str) -> Any:
    """What the sampler kept for ``trial`` under ``key`` (``relative``, ``prediction``), or None."""
    legacy = _get(trial, key)
    if legacy is not None:
        return legacy
    return _joined(study._storage.get_study_system_attrs(study._study_id), key, trial._trial_id)


def _pack(prediction: Prediction) -> dict[str, Any]:
    """A prediction as a trial system attribute: the engine's stored form, its point sets base64."""
    data, blob = prediction.to_storage()
    return {"data": data, "points": None if blob is None else base64.b64encode(blob).decode()}


def _unpack(stored: dict[str, Any]) -> Prediction:
    """Inverse of ``_pack``; a prediction stored by an earlier version (each part's point sets
    inline as ``points_b64``) is read as well."""
    if "data" in stored:
        blob = stored["points"]
        return Prediction.from_storage(stored["data"], None if blob is None else base64.b64decode(blob))

    def legacy(part: dict[str, Any]) -> dict[str, Any]:
        out = dict(part)
        data, shape = out.pop("points_b64", None), out.pop("points_shape", None)
        if data is not None:
            out["points"] = np.frombuffer(base64.b64decode(data), dtype="<f8").reshape(shape)
        for key in ("objectives", "constraints"):
            if out.get(key):
                out[key] = [legacy(c) for c in out[key]]
        return out

    return Prediction.from_dict(legacy(stored))


def _constraint_keys(complete: list[FrozenTrial]) -> list[str] | None:
    """The constraint keys every completed trial was told (``trial.set_constraint``), or None."""
    keys = None
    for t in complete:
        c = getattr(t, "constraints", None) or {}
        if keys is None:
            keys = list(c)
        elif list(c) != keys:
            return None
    return keys or None


def _startup(n_startup_trials: Any, settings: dict[str, Any] | None) -> dict[str, Any]:
    """The engine settings with Optuna's ``n_startup_trials`` as the engine's ``n_warmup``: any count
    from 0 (the engine's least, 2, below that: it fits from 4 results on either way); ValueError naming
    it when it is out of range or disagrees with ``settings["n_warmup"]``."""
    out = dict(settings or {})
    if n_startup_trials is None:
        return out
    least, most = SETTING_RANGES["n_warmup"]
    if isinstance(n_startup_trials, bool) or not isinstance(n_startup_trials, int) \
            or not 0 <= n_startup_trials <= most:
        raise ValueError(f"n_startup_trials must be an integer in [0, {most}], got {n_startup_trials!r}")
    if "n_warmup" in out and out["n_warmup"] != n_startup_trials:
        raise ValueError(f"n_startup_trials={n_startup_trials} and settings n_warmup={out['n_warmup']!r} "
                         "disagree: both are the number of startup trials, give one of them")
    out["n_warmup"] = max(n_startup_trials, least)
    return out


# -------------------------------------------------------------------- sampler
class CaliboSampler(BaseSampler):
    """An Optuna sampler on calibo's engine: conformally calibrated surrogates, ACI/DtACI.

    >>> import optuna
    >>> from calibo.optuna import CaliboSampler
    >>> study = optuna.create_study(sampler=CaliboSampler(seed=0))     # doctest: +SKIP
    >>> study.optimize(objective, n_trials=100, n_jobs=4)                # doctest: +SKIP

    Args:
        seed: makes the suggestion sequence reproducible (given the same results).
        n_startup_trials: completed trials before the surrogate is used, as Optuna's samplers
            name it (the engine's ``n_warmup`` setting: give one of the two, or the same number;
            ``EngineConfig.warmed_up``); until then the relative parameters follow a scrambled
            Sobol sequence. Any count from 0 is taken; the surrogate is fitted from 4 results on,
            so below 4 it takes over at 4.
        surrogate: the engine's surrogate (``qgp`` by default; see ``EngineConfig``).
        acquisition: the engine's acquisition (see ``EngineConfig``).
        settings: any other ``EngineConfig`` setting (``adapter``, ``conformal``, ``n_levels``...).
        independent_sampler: samples what the relative search space leaves out
            (default ``RandomSampler(seed)``).
        warn_independent_sampling: log a warning when a parameter a completed trial already
            holds is sampled independently (a dynamic range, a presence no parent explains), not
            while a parameter or a conditional branch is being discovered.
        url: a calibo server: the remote mode (``calibo.optuna._remote``). Each trial's relative
            parameters are asked from the server and its result told there, so Optuna workers in
            many processes and machines (RDB storage) share one surrogate fitted once per result,
            one calibration state and the crowd-aware select; nothing is fitted in the process.
            One Optuna study is one server study, whose space grows as the study reveals parameters.
        token: the server's API token (default ``$CALIBO_TOKEN``).
        study_name: the server study's name (default: the Optuna study's name; give one when
            several Optuna storages with the same study names use one server).
        learn_failures: learn from the study's FAIL trials (an objective that raised, returned NaN,
            a trial told failed) where trials run at all: a calibrated probability of success weighs
            the acquisition and no near-duplicate of a failure is proposed (``engine.failures``).
            Off, a failed configuration is only never proposed again. With ``url``, the server
            study's ``learn_failures`` (set when this sampler creates it).

    A multi-objective study (``optuna.create_study(directions=[...])``, 2 to 4 objectives) gets
    one calibrated surrogate per objective and the engine's multi-objective acquisition (EHVI for
    two objectives, ParEGO for three or four; ``settings={"multi_acquisition": ...,
    "reference_point": [...]}``).
    """

    def __init__(
        self,
        *,
        seed: int | None = None,
        n_startup_trials: int | None = None,
        surrogate: str | None = None,
        acquisition: str | None = None,
        settings: dict[str, Any] | None = None,
        independent_sampler: BaseSampler | None = None,
        warn_independent_sampling: bool = True,
        url: str | None = None,
        token: str | None = None,
        study_name: str | None = None,
        learn_failures: bool = True,
    ) -> None:
        settings = _startup(n_startup_trials, settings)
        if not isinstance(learn_failures, bool):
            raise ValueError(f"learn_failures must be True or False, got {learn_failures!r}")
        self._learn_failures = learn_failures
        over: dict[str, Any] = {k: v for k, v in (("surrogate", surrogate), ("acquisition", acquisition))
                                if v is not None}
        self.config = replace(EngineConfig.from_dict(settings), **over)
        self._seed = int(np.random.SeedSequence(seed).generate_state(1)[0]) if seed is None else int(seed)
        self._independent = independent_sampler or optuna.samplers.RandomSampler(seed=seed)
        self._learned: dict[int, LearnedSpace] = {}  # per trial: the space its relative sample models
        self._branches: dict[int, dict[str, BaseDistribution]] = {}  # per trial: its modelled conditional params
        self._warn = warn_independent_sampling
        self._lock = threading.RLock()
        self._remote = None
        if url is not None:
            from ._remote import RemoteBackend
            from ._wire import TrialSeededRandom

            if independent_sampler is None:  # processes sharing a seed must not draw the same values
                self._independent = TrialSeededRandom(seed)
            settings_sent = dict(settings or {})
            self._remote = RemoteBackend(url, token, study_name, seed, {
                "surrogate": surrogate, "acquisition": acquisition, "settings": settings_sent or None,
                "learn_failures": None if learn_failures else False})
        self._fits: dict[tuple[int, str], FitCache] = {}  # (study, space) -> its snapshot, kept while observed
        self._adapted: dict[tuple, tuple[list[int], StudyState | None]] = {}  # replayed states per study + space
        # (storage, study, trial, key) -> what was kept for the trial (``_put``): this process's own, and
        # what it read back of the others' (read once; None kept only where it is final)
        self._kept: dict[tuple[int, int, int, str], Any] = {}

    # ------------------------------------------------------------ Optuna API
    def reseed_rng(self) -> None:
        self._independent.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        self._directions(study)
        complete = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True)
        learned = learn_space(complete)
        space = learned.distributions
        if not space:
            return {}
        features = sum(len(d.choices) if isinstance(d, CategoricalDistribution) else 1 for d in space.values())
        if len(space) > MAX_PARAMS or features > MAX_FEATURES:
            _log.warning(f"CaliboSampler: {len(space)} parameters / {features} encoded features exceed the "
                         f"engine's bounds ({MAX_PARAMS} / {MAX_FEATURES}); sampling them independently.")
            return {}
        with self._lock:
            self._learned[trial._trial_id] = learned
            self._branches[trial._trial_id] = {n: space[n] for n in learned.conditions}
        return space

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            if self._remote is None:  # nothing kept for this trial: no process needs to look for it
                for key in ("relative", "prediction"):
                    self._keep(study, trial._trial_id, key, None)
            return {}
        if self._remote is not None:
            return self._remote.sample_relative(study, trial, search_space, self._conditions(trial, search_space))
        # One sample at a time per sampler: a thread reads the trials after the others stored their
        # choices, so the threads of study.optimize(n_jobs=...) condition on each other's running trials.
        with self._lock:
            return self._sample_relative(study, trial, search_space)

    def _conditions(self, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        """The conditions learned for ``trial``'s relative space (taken: once per trial), or none when
        Optuna passed another space than the one learned."""
        with self._lock:
            learned = self._learned.pop(trial._trial_id, None)
        return learned.conditions if learned is not None and learned.distributions == search_space else {}

    def _sample_relative(self, study: Study, trial: FrozenTrial,
                         search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        enc = Encoding(search_space, self._conditions(trial, search_space))
        sig = signature(search_space, enc.conditions)
        directions = self._directions(study)
        direction, multi = directions[0], len(directions) > 1
        trials = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING,
                                                           TrialState.FAIL, TrialState.PRUNED),
                                   use_cache=False)
        observations, seen, pending, complete, failed = [], [], [], [], []
        loaded: dict[str, Any] = {}  # the study's system attributes, read at most once in this sample
        relative = self._read(study, [t for t in trials if t.state == TrialState.RUNNING and t.number != trial.number],
                              "relative", final=False, loaded=loaded)
        for t in trials:
            if t.number == trial.number:
                continue
            if t.state == TrialState.RUNNING:
                p = enc.encode({**(relative[t._trial_id] or {}), **t.params})
                if p is not None:
                    pending.append(p)
                continue
            p = enc.encode(t.params)
            if p is None:
                continue
            seen.append(p)
            if t.state == TrialState.FAIL and self._learn_failures:
                failed.append(p)
            if t.state == TrialState.COMPLETE and t.values is not None and all(map(math.isfinite, t.values)):
                observations.append((p, [float(v) for v in t.values] if multi else float(t.values[0])))
                complete.append(t)
        cfg = self.config
        keys = _constraint_keys(complete)
        cons = [[float(t.constraints[k]) for k in keys] for t in complete] if keys else None
        snap = None
        if cfg.fits(len(observations)):
            snap = self._snapshot((study._study_id, sig), enc.space, observations, pending, directions, cons,
                                  failed)
        state = self._states(study, (study._study_id, sig), enc, complete, keys, len(directions), loaded)
        out = select(snap, state, enc.space, cfg, count=1, direction=direction,
                     asked=trial.number, exclude=seen, pending=pending, n_observed=len(observations))
        if not out:  # every configuration is observed or running: repeat one, as Optuna's samplers may
            out = select(None, state, enc.space, cfg, count=1, direction=direction, asked=trial.number)
        chosen = out[0]
        params = enc.decode(chosen.params)
        self._keep(study, trial._trial_id, "relative", params)
        self._keep(study, trial._trial_id, "prediction", None if chosen.prediction is None else
                   {"space": sig, "params": chosen.params, "prediction": _pack(chosen.prediction)})
        return params

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        with self._lock:
            branch = self._branches.get(trial._trial_id, {}).get(param_name)
        if self._warn and trial.number > 0 and not param_distribution.single() and branch != param_distribution:
            # Discovery, not a fallback, so no warning: a parameter no completed trial holds yet, or a
            # modelled conditional one appearing under a parent value no completed trial showed it
            # with (``gamma`` the first time ``kernel`` is poly); the next trials model both.
            complete = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True)
            if any(param_name in t.params for t in complete):
                _log.warning(f"The parameter '{param_name}' in trial#{trial.number} is sampled independently "
                             f"by {type(self._independent).__name__} instead of CaliboSampler (its range "
                             "changes between trials, or no parent parameter explains when it appears).")
        return self._independent.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        if self._remote is not None:
            self._remote.before_trial(study, trial)
        self._independent.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        if self._remote is not None:
            self._remote.after_trial(study, trial, state, values)
        with self._lock:
            self._branches.pop(trial._trial_id, None)
        self._independent.after_trial(study, trial, state, values)

    # ------------------------------------------------------------ internals
    def _keep(self, study: Study, trial_id: int, key: str, value: Any) -> None:
        """Keep ``value`` for the trial: in the study's system attributes for every process (None:
        nothing to write), and in this process's cache."""
        if value is not None:
            _put(study, trial_id, key, value)
        self._kept[(id(study._storage), study._study_id, trial_id, key)] = value

    def _read(self, study: Study, trials: Sequence[FrozenTrial], key: str, final: bool,
              loaded: dict[str, Any] | None = None) -> dict[int, Any]:
        """What was kept for each of ``trials`` under ``key``, by trial id (None: nothing): from this
        process's cache, a trial's own system attributes (where an earlier version kept it), or the
        study's system attributes, read once for all the trials missing. ``final``: the trials are
        finished, so nothing found now will ever be (the sampler keeps its state at the trial's start).
        ``loaded``: the study's system attributes read earlier in the same sample (``{"attrs": ...}``,
        filled here on the first read): every trial given was listed before that read, and a trial's
        state is kept when it starts, so one read serves the whole sample."""
        where = (id(study._storage), study._study_id)
        out: dict[int, Any] = {}
        missing = []
        for t in trials:
            if (*where, t._trial_id, key) in self._kept:
                out[t._trial_id] = self._kept[(*where, t._trial_id, key)]
            elif (legacy := _get(t, key)) is not None:
                out[t._trial_id] = self._kept[(*where, t._trial_id, key)] = legacy
            else:
                missing.append(t)
        if missing:
            loaded = {} if loaded is None else loaded
            if "attrs" not in loaded:
                loaded["attrs"] = study._storage.get_study_system_attrs(study._study_id)
            attrs = loaded["attrs"]
            for t in missing:
                out[t._trial_id] = value = _joined(attrs, key, t._trial_id)
                if value is not None or final:
                    self._kept[(*where, t._trial_id, key)] = value
        return out

    def _directions(self, study: Study) -> list[str]:
        """The study's directions; a multi-objective study's count is checked against the settings."""
        out = ["minimize" if d == StudyDirection.MINIMIZE else "maximize" for d in study.directions]
        if len(out) > 1:
            check_directions(out)  # 2 to 4 objectives
            if self.config.reference_point is not None and len(self.config.reference_point) != len(out):
                raise ValueError(f"settings reference_point has {len(self.config.reference_point)} values; "
                                 f"the study has {len(out)} objectives")
            resolve_multi(self.config.multi_acquisition, len(out))
        return out

    def _snapshot(self, key: tuple[int, str], space: SearchSpace, observations: list, pending: list,
                  directions: list[str], constraints: list[list[float]] | None = None,
                  failed: list[dict[str, Any]] | None = None) -> Any:
        """The engine's fit on ``observations`` (and the ``failed`` configurations), reused while
        they do not change."""
        observed = (tuple((json.dumps(p, sort_keys=True), json.dumps(v)) for p, v in observations),
                    json.dumps(constraints), tuple(json.dumps(p, sort_keys=True) for p in failed or ()))
        config = self.config.for_objectives(len(directions))
        return self._fits.setdefault(key, FitCache()).get(observed, lambda tuned, previous: fit(
            observations, space, config, directions[0], self._seed, pending=pending, constraints=constraints,
            directions=directions if len(directions) > 1 else None, failed=failed or (), tuned=tuned,
            previous=previous))

    def _states(self, study: Study, key: tuple[int, str], enc: Encoding, complete: list[FrozenTrial],
                constraint_keys: list[str] | None = None, m: int = 1,
                loaded: dict[str, Any] | None = None) -> StudyState:
        """ACI/DtACI states (the first objective's; then each further objective's and each
        constraint's, the snapshot heads' order): ``adapt`` replayed over the completed trials in the
        order they finished.

        Only trials told with the configuration this sampler suggested for them adapt: an enqueued
        or partly fixed trial was not chosen on the stored prediction."""
        order = sorted(complete, key=lambda t: (t.datetime_complete is None, t.datetime_complete, t.number))
        numbers = [t.number for t in order]
        n_cons = len(constraint_keys or ())
        cache_key = (*key, tuple(constraint_keys or ()), m)
        done, state = self._adapted.get(cache_key, ([], None))
        if state is None or numbers[:len(done)] != done:
            done, state = [], StudyState.initial(self.config, self._seed, m, n_cons)
        space = enc.space
        kept = self._read(study, order[len(done):], "prediction", final=True, loaded=loaded)
        for t in order[len(done):]:
            stored = kept[t._trial_id]
            if stored is None or stored.get("space") != key[1]:
                continue
            told = enc.encode(t.params)
            try:
                same = told is not None and space.key(space.validate(told)) == space.key(
                    space.validate(stored["params"]))
            except FieldError:
                same = False
            if same:
                values = [float(v) for v in t.values] if m > 1 else float(cast(float, t.value))
                cons = [float(t.constraints[k]) for k in constraint_keys or ()] if n_cons else None
                state, _ = state.adapt(_unpack(stored["prediction"]), values, cons)
        self._adapted[cache_key] = (numbers, state)
        return state
