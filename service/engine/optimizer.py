"""The in-process ``Optimizer``: ask / tell on ``fit``, ``select`` and ``StudyState.adapt``, with the
study's observations, running trials and adaptive state held in memory (``state_dict`` saves them).

The service and ``CaliboSampler`` are the engine's other homes; the three steps are the same.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from . import multi, reprs
from .config import EngineConfig
from .errors import ConfigError, SpaceError
from .fit import FitCache
from .outcomes import check_constraint_names, check_constraint_values, check_directions, check_outcome, sign_of
from .prediction import Prediction
from .retune import Tuned
from .select import Suggestion, queued_first, select
from .snapshot import Snapshot
from .space import ParamError, SearchSpace
from .state import StudyState
from .study import StudySpec


class Optimizer:
    """In-process ask/tell over ``fit`` / ``select`` / ``StudyState.adapt``.

    >>> opt = Optimizer({"x": {"type": "float", "low": -5, "high": 5}}, seed=1)
    >>> s = opt.ask()[0]
    >>> opt.tell(s.params, s.params["x"] ** 2, s.prediction)

    ``constraints``: the names of outcome constraints every ``tell`` then carries values for (a
    trial is feasible when each is <= 0); ``best`` is the best feasible observation.
    ``enqueue(params)`` hands a configuration (or part of one: the rest is chosen) out at the next
    ask; ``add(params, value)`` records a trial evaluated elsewhere (no prediction: it feeds the fit
    and the best, never the calibration state). ``tell(params, state="failed")`` ends a trial that
    failed: with ``learn_failures`` (the default) every failure trains a calibrated model of where
    trials run, which weighs the acquisition, and no near-duplicate of a failure is proposed again
    (``engine.failures``); without, only the failed configuration itself is never proposed again.

    ``directions`` (2 to 4, instead of ``direction``): several objectives. Every ``tell`` and ``add``
    then takes a list of values, one per objective; each objective has its own calibrated surrogate
    and ACI/DtACI states (``state.objectives``), ask chooses by expected hypervolume improvement (two
    objectives) or ParEGO (three or four, ``config.multi_acquisition``), and ``pareto`` holds the
    non-dominated (feasible) observations in place of ``best``.
    """

    def __init__(
        self,
        space: SearchSpace | dict[str, Any],
        direction: str = "minimize",
        seed: int = 0,
        surrogate: str | None = None,
        acquisition: str | None = None,
        n_warmup: int | None = None,
        config: EngineConfig | dict[str, Any] | None = None,
        constraints: Sequence[str] = (),
        directions: Sequence[str] | None = None,
        learn_failures: bool = True,
        **settings: Any,
    ) -> None:
        if directions is not None and not (isinstance(directions, (list, tuple)) and len(directions) == 1):
            directions = check_directions(directions)
        else:
            directions = tuple(directions or (direction,))
        sign_of(directions[0])
        cfg = config if isinstance(config, EngineConfig) else EngineConfig.from_dict(config)
        over: dict[str, Any] = {k: v for k, v in (("surrogate", surrogate), ("acquisition", acquisition),
                                                  ("n_warmup", n_warmup)) if v is not None}
        if not isinstance(learn_failures, bool):
            raise ConfigError("learn_failures", "must be true or false")
        space = SearchSpace.from_dict(space)
        if not space.params:  # the service's studies may start empty and grow; an Optimizer cannot
            raise SpaceError("space", "must have at least one parameter")
        # the study as the service's definition holds it (engine.study): one home for what a study is
        self.spec = StudySpec(space, replace(cfg, **over, **settings).for_objectives(
            len(directions)), directions, int(seed), check_constraint_names(constraints), {}, learn_failures)
        if self.multi:
            try:
                multi.resolve(self.config.multi_acquisition, len(self.directions))
            except ValueError as e:
                raise ConfigError("multi_acquisition", str(e)) from None
        ref = self.config.reference_point
        if ref is not None and len(ref) != len(self.directions):
            raise ConfigError("reference_point", f"must have one value per objective ({len(self.directions)})")
        self.state = self.spec.initial_state()
        self.observations: list[tuple[dict[str, Any], Any]] = []  # (params, value or list of values)
        self.constraint_values: list[list[float]] = []  # one row per observation, when there are constraints
        self.failed: list[dict[str, Any]] = []  # failed trials: never suggested again, and learnt from
        self.waiting: list[dict[str, Any]] = []  # enqueued (partial) configurations, handed out first
        self.pending: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        self.records: list[dict[str, Any]] = []
        self.asked = 0
        self._fits = FitCache()  # the newest snapshot, and what it hands the next fit (engine.retune)
        # (observations, running configurations) the snapshot was (or, restored, is to be) fitted with:
        # fit conditions on the running trials, and state_dict's "fitted_with" lets a restored optimizer
        # refit the same snapshot on the same observations
        self._fitted_with: tuple[tuple[int, int], list[dict[str, Any]]] | None = None
        self.timings: dict[str, float] = {"fit": 0.0, "select": 0.0, "adapt": 0.0}

    def __repr__(self) -> str:
        directions = ("directions", repr(list(self.directions))) if self.multi else ("direction", repr(self.direction))
        return reprs.build(self, ("params", str(len(self.space.params))), directions, ("seed", str(self.seed)),
                           ("observed", str(len(self.observations))), ("pending", str(len(self.pending))),
                           ("failed", str(len(self.failed)) if self.failed else None))

    # ------------------------------------------------------------- the study
    @property
    def space(self) -> SearchSpace:
        return self.spec.space

    @property
    def config(self) -> EngineConfig:
        return self.spec.config

    @config.setter
    def config(self, config: EngineConfig) -> None:
        self.spec = replace(self.spec, config=config)

    @property
    def directions(self) -> tuple[str, ...]:
        return self.spec.directions

    @property
    def direction(self) -> str:
        return self.spec.direction

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def constraints(self) -> tuple[str, ...]:
        return self.spec.constraints

    @property
    def learn_failures(self) -> bool:
        return self.spec.learn_failures

    @learn_failures.setter
    def learn_failures(self, learn: bool) -> None:
        self.spec = replace(self.spec, learn_failures=learn)

    # ----------------------------------------------------------------- ask
    @property
    def snapshot(self) -> Snapshot | None:
        if not self.config.fits(len(self.observations)):
            return None
        return self._fits.get(self._fit_key(), self._fit)

    def _fit(self, tuned: Tuned | None, previous: Snapshot | None) -> Snapshot:
        t = time.perf_counter()
        pending = self._fit_pending()
        if pending is None:
            pending = [p for p, _ in self.pending]
        self._fitted_with = (self._fit_key(), pending)
        snap = self.spec.fit(self.observations, pending, self.constraint_values if self.constraints else None,
                             failed=self.failed, tuned=tuned, previous=previous)
        self.timings["fit"] += time.perf_counter() - t
        return snap

    def _extendable(self) -> dict[str, Any]:
        """``state_dict``'s ``snapshot`` and ``snapshot_key``: the newest snapshot, where it carries
        what an extend needs (the next fit depends on it), with the key it was fitted on."""
        snap = self._fits.snapshot
        if snap is None or snap.meta.carry is None:
            return {}
        return {"snapshot": base64.b64encode(snap.to_bytes()).decode("ascii"), "snapshot_key": list(self._fits.key)}

    def _failed_fitted(self) -> list[dict[str, Any]]:
        """The failed configurations a fit learns from (none with ``learn_failures`` off)."""
        return self.failed if self.learn_failures else []

    def _fit_key(self) -> tuple[int, int]:
        """What makes a new fit: the number of observations and of failures it learns from."""
        return len(self.observations), len(self._failed_fitted())

    def _fit_pending(self) -> list[dict[str, Any]] | None:
        """The running configurations the snapshot of the present observations was fitted with (or, in
        a restored optimizer that has not fitted it yet, will be); None when there is none."""
        if self._fitted_with is not None and self._fitted_with[0] == self._fit_key():
            return self._fitted_with[1]
        return None

    def ask(self, n: int = 1) -> list[Suggestion[dict[str, Any]]]:
        """``n`` new configurations, distinct from every observed and pending one, chosen together;
        enqueued configurations first, in order."""
        if not isinstance(n, int) or n < 1:
            raise ValueError("n must be a positive integer")
        queued = [self.waiting.pop(0) for _ in range(min(n, len(self.waiting)))]
        fixed = [q for q in queued if self.space.complete(q)]
        chosen: list[Suggestion[Prediction]] = []
        if n - len(fixed) > 0:
            snap = self.snapshot
            t = time.perf_counter()
            chosen = select(
                snap, self.state, self.space, self.config, count=n - len(fixed), direction=self.direction,
                asked=self.asked, exclude=[p for p, _ in self.observations] + self.failed,
                pending=[p for p, _ in self.pending] + fixed, n_observed=len(self.observations),
            )
            self.timings["select"] += time.perf_counter() - t
        # a suggestion's prediction is plain JSON for in-process users
        out = [Suggestion(s.params, None if s.prediction is None else s.prediction.to_dict(points="list"))
               for s in queued_first(self.space, queued, chosen, self.state.fill_rng(self.asked))]
        self.asked += len(out)
        self.pending.extend((s.params, s.prediction) for s in out)
        return out

    def enqueue(self, params: dict[str, Any]) -> None:
        """Hand ``params`` (all of a configuration, or some: the rest is chosen at ask) out next."""
        self.waiting.append(self.space.validate_partial(params))

    # ---------------------------------------------------------------- tell
    @property
    def multi(self) -> bool:
        """Several objectives."""
        return len(self.directions) > 1

    def _value(self, value: Any, state: str = "complete") -> Any:
        """A finished trial's value (its list of values with several objectives; ``value`` names either)."""
        one, several = check_outcome(self.directions, state, None if self.multi else value,
                                     value if self.multi else None, values_field="value")
        return several if self.multi else one

    def tell(self, params: dict[str, Any], value: Any = None, prediction: dict[str, Any] | Prediction | None = None,
             constraints: Sequence[float] | None = None, state: str = "complete") -> None:
        """Record ``value`` (a list of values, one per objective, with several objectives; and the
        constraint values) for ``params``; a pending suggestion's prediction adapts the calibration
        states (ACI / DtACI), as does ``prediction`` when given. ``state="failed"`` ends a trial
        that failed (no value): it is no longer running, and never suggested again.
        Raises ``ParamError`` for a bad value, constraints, params or state."""
        params = self.space.validate(params)
        if state == "failed":
            self.add(params, value, state="failed")
            self._take_pending(self.space.key(params))
            return
        if state != "complete":
            raise ParamError("state", "must be complete or failed")
        value = self._value(value)
        cons = self._constraint_values(constraints)
        pred = self._take_pending(self.space.key(params))
        given = prediction if prediction is not None else pred
        t = time.perf_counter()
        self.state, record = self.state.adapt(Prediction.from_dict(given) if isinstance(given, dict) else given,
                                              value, cons)
        self.timings["adapt"] += time.perf_counter() - t
        if record is not None:
            self.records.append(record.to_dict())
        self._observe(params, value, cons)

    def _take_pending(self, key: Any) -> dict[str, Any] | None:
        """Take the pending suggestion of these params off the running list: its prediction, if any."""
        for i, (p, pred) in enumerate(self.pending):
            if self.space.key(p) == key:
                del self.pending[i]
                return pred
        return None

    def add(self, params: dict[str, Any], value: float | None = None, constraints: Sequence[float] | None = None,
            state: str = "complete") -> None:
        """Record a trial evaluated elsewhere: it feeds the next fit and the best, and is never suggested
        again, but it was not chosen on a prediction, so the calibration state does not move.
        ``state="failed"`` records a configuration that failed (no value)."""
        params = self.space.validate(params)
        if state not in ("complete", "failed"):
            raise ParamError("state", "must be complete or failed")
        if state == "failed":
            self._value(value, state)
            self.failed.append(params)
            return
        self._observe(params, self._value(value), self._constraint_values(constraints))

    def _constraint_values(self, constraints: Sequence[float] | None) -> list[float] | None:
        if not self.constraints and constraints is not None and len(constraints) == 0:
            constraints = None  # no values for no constraints
        return check_constraint_values(self.constraints, "complete", constraints)

    def _observe(self, params: dict[str, Any], value: Any, cons: list[float] | None) -> None:
        self.observations.append((params, value))
        if cons is not None:
            self.constraint_values.append(cons)

    # ----------------------------------------------------------------- views
    def _feasible_rows(self) -> list[int]:
        rows = range(len(self.observations))
        if self.constraints:
            return [i for i in rows if all(c <= 0 for c in self.constraint_values[i])]
        return list(rows)

    @property
    def best(self) -> tuple[dict[str, Any], float] | None:
        """``(params, value)`` of the best feasible observation so far, or None. With several objectives
        there is no single best: see ``pareto``."""
        if self.multi:
            raise ValueError("a multi-objective optimizer has no single best observation: see pareto")
        rows = self._feasible_rows()
        if not rows:
            return None
        pick = min if self.direction == "minimize" else max
        return self.observations[pick(rows, key=lambda i: self.observations[i][1])]

    def _minimised(self, rows: Sequence[int]) -> np.ndarray:
        signs = np.array([sign_of(d) for d in self.directions])
        values = np.array([self.observations[i][1] for i in rows], dtype=float).reshape(-1, len(signs))
        out: np.ndarray = values * signs
        return out

    @property
    def pareto(self) -> list[tuple[dict[str, Any], list[float]]]:
        """``(params, values)`` of the non-dominated feasible observations (several objectives)."""
        if not self.multi:
            raise ValueError("pareto is for several objectives: see best")
        rows = self._feasible_rows()
        if not rows:
            return []
        keep = multi.pareto_mask(self._minimised(rows))
        return [self.observations[i] for i, k in zip(rows, keep, strict=True) if k]

    def hypervolume(self, reference_point: Sequence[float] | None = None) -> float:
        """The hypervolume the feasible observations dominate (several objectives), up to
        ``reference_point`` (the objectives' own units; default ``config.reference_point``, else each
        objective's worst observed value plus a tenth of its observed range)."""
        if not self.multi:
            raise ValueError("hypervolume is for several objectives")
        signs = np.array([sign_of(d) for d in self.directions])
        ref = reference_point if reference_point is not None else self.config.reference_point
        every = self._minimised(range(len(self.observations)))
        if ref is None:
            if not every.shape[0]:
                return 0.0
            r = multi.reference_point(every)
        else:
            r = np.asarray(ref, dtype=float) * signs
        return multi.hypervolume(self._minimised(self._feasible_rows()), r)

    def state_dict(self) -> dict[str, Any]:
        """Everything the optimizer holds, as JSON-able data (``from_state_dict`` resumes it)."""
        return {
            "version": 4,
            "space": self.space.to_dict(),
            "direction": self.direction,
            "directions": list(self.directions),
            "seed": self.seed,
            "config": self.config.to_dict(),
            "constraints": list(self.constraints),
            "observations": [[p, v] for p, v in self.observations],
            "constraint_values": self.constraint_values,
            "failed": self.failed,
            "learn_failures": self.learn_failures,
            "waiting": self.waiting,
            "pending": [[p, pred] for p, pred in self.pending],
            # the running configurations the present snapshot was fitted with
            "fitted_with": self._fit_pending(),
            # the newest full refit's hyperparameters, which the next fit keeps unless one is due
            "tuned": None if self._fits.tuned is None else self._fits.tuned.to_dict(),
            # the newest snapshot where the next fit may extend it (engine.extend), base64 of its bytes
            **self._extendable(),
            "state": self.state.to_dict(),
            "records": self.records,
            "asked": self.asked,
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> Optimizer:
        """The optimizer ``state_dict`` described: its next ask is the one the original would make."""
        config = EngineConfig.from_stored(d["config"])
        opt = cls(d["space"], d["direction"], d["seed"], config=config, constraints=d.get("constraints", ()),
                  directions=d.get("directions"), learn_failures=bool(d.get("learn_failures", True)))
        opt.config = config  # as stored, not resolved again: a state from before a default keeps it
        opt.observations = [(dict(p), [float(x) for x in v] if opt.multi else float(v)) for p, v in d["observations"]]
        opt.constraint_values = [list(map(float, c)) for c in d.get("constraint_values", [])]
        opt.failed = [dict(p) for p in d.get("failed", [])]
        opt.waiting = [dict(p) for p in d.get("waiting", [])]
        opt.pending = [(dict(p), pred) for p, pred in d["pending"]]
        opt._fits = FitCache(Tuned.from_dict(d.get("tuned")))
        if d.get("snapshot"):
            opt._fits = FitCache(opt._fits.tuned, Snapshot.from_bytes(base64.b64decode(d["snapshot"])),
                                 tuple(d["snapshot_key"]))
        if d.get("fitted_with") is not None:
            opt._fitted_with = (opt._fit_key(), [dict(p) for p in d["fitted_with"]])
        if "state" in d:
            opt.state = StudyState.from_dict(d["state"])
        else:  # a state saved before version 4: the adaptive states under their own keys
            opt.state = StudyState.from_dict({"seed": opt.seed, "states": d["states"],
                                              "objectives": d.get("objective_states", []),
                                              "constraints": d.get("constraint_states", [])})
        opt.records = list(d["records"])
        opt.asked = int(d["asked"])
        return opt
