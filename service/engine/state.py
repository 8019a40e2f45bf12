"""The engine's typed objects: what crosses from the engine to its homes (the ``Optimizer``, the
service, ``CaliboSampler``) and back.

* ``Prediction``: what a suggestion was chosen on. ``public()`` is what a client sees;
  ``to_dict()`` what the engine keeps (with the conformal point sets, the orientation and the output
  warp ``adapt`` needs); ``to_storage()`` the same with the point sets as one binary blob.
* ``CalibrationRecord``: what ``adapt`` records of a prediction against the value told.
* ``StudyState``: every adaptive (ACI / DtACI) state of a study, with the seeds they start from,
  the study's generator keys, and one ``adapt`` for an outcome of any shape (one value, several
  objectives, constraints).

Each has ``to_dict`` / ``from_dict``: the homes store what these write and never reach inside.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .adapt import OutcomeRecord, adapt_outcome
from .adaptive import AdaptiveState, new_state, state_from_dict, state_to_dict
from .conformal import pair_alphas

INTERNAL = ("sign", "warp", "points")  # what the engine keeps of an outcome's prediction and clients never see


@dataclass
class Interval:
    """One interval pair's calibrated interval, in the user's units, at the alpha it was built with."""

    coverage: float
    alpha: float
    lower: float
    upper: float

    def to_dict(self) -> dict[str, float]:
        return {"coverage": self.coverage, "alpha": self.alpha, "lower": self.lower, "upper": self.upper}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Interval:
        return cls(d["coverage"], d["alpha"], d["lower"], d["upper"])


@dataclass
class OutcomePrediction:
    """One outcome's calibrated prediction at a configuration (the objective, one of several
    objectives, or a constraint): quantiles, mean and intervals in the user's units; and what
    ``adapt`` needs, the conformal point sets (``points``, (2, P, n)), the orientation (``sign``)
    and the output warp."""

    method: str
    levels: list[float]
    quantiles: list[float]
    mean: float
    intervals: list[Interval]
    sign: float = 1.0
    warp: dict[str, Any] | None = None
    points: np.ndarray | None = None

    def to_dict(self, internal: bool = True, jsonable: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "levels": self.levels, "quantiles": self.quantiles,
                               "mean": self.mean, "intervals": [iv.to_dict() for iv in self.intervals]}
        if internal:
            out["sign"] = self.sign
            if self.warp is not None:
                out["warp"] = self.warp
            if self.points is not None:
                out["points"] = self.points.tolist() if jsonable else self.points
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutcomePrediction:
        pts = d.get("points")
        if pts is not None and d.get("shift") == "fcs":  # stored with covariate-shift weights (removed):
            pts = np.asarray(pts, dtype=float)           # (2, P, 2n+1), the sorted points come first
            pts = pts[..., : (pts.shape[-1] - 1) // 2]
        return cls(d["method"], d["levels"], d["quantiles"], d.get("mean"),
                   [Interval.from_dict(iv) for iv in d["intervals"]], d.get("sign", 1.0), d.get("warp"),
                   None if pts is None else np.asarray(pts, dtype=float))


@dataclass
class Prediction:
    """What a suggestion was chosen on: one outcome prediction per objective (one for a
    single-objective study), each constraint's, the feasibility, and how it was chosen."""

    outcomes: list[OutcomePrediction]
    surrogate: str
    fitted_on: int
    acquisition: str
    score: float
    constraints: list[OutcomePrediction] | None = None
    feasibility: float | None = None

    @property
    def parts(self) -> list[OutcomePrediction]:
        """Every outcome prediction, in stored order: the objectives', then the constraints'."""
        return [*self.outcomes, *(self.constraints or ())]

    def to_dict(self, internal: bool = True, jsonable: bool = False) -> dict[str, Any]:
        """The prediction as data: with ``internal`` what the engine keeps (``adapt`` reads it back
        with ``from_dict``), without it what a client sees (``public``); ``jsonable``: the point
        sets as nested lists. A single objective's prediction is flat; several objectives' sit
        under ``objectives``."""
        if len(self.outcomes) == 1:
            out = self.outcomes[0].to_dict(internal, jsonable)
        else:
            out = {"objectives": [o.to_dict(internal, jsonable) for o in self.outcomes]}
        out.update(surrogate=self.surrogate, fitted_on=self.fitted_on, acquisition=self.acquisition,
                   score=self.score)
        if self.constraints is not None:
            out["constraints"] = [c.to_dict(internal, jsonable) for c in self.constraints]
            out["feasibility"] = self.feasibility
        return out

    def public(self) -> dict[str, Any]:
        """What clients see: no point sets, orientation or output warp."""
        return self.to_dict(internal=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prediction:
        outcomes = [OutcomePrediction.from_dict(o) for o in d["objectives"]] if d.get("objectives") \
            else [OutcomePrediction.from_dict(d)]
        cons = d.get("constraints")
        return cls(outcomes, d.get("surrogate"), d.get("fitted_on"), d.get("acquisition"), d.get("score"),
                   None if cons is None else [OutcomePrediction.from_dict(c) for c in cons], d.get("feasibility"))

    def to_storage(self) -> tuple[dict[str, Any], bytes | None]:
        """``(data, blob)``: the prediction as kept, its point sets moved to one blob of raw
        little-endian float64 (``points_n``: each part's number of points, 0 for none)."""
        parts = self.parts
        if all(p.points is None for p in parts):
            return self.to_dict(), None
        bare = replace(self, outcomes=[replace(o, points=None) for o in self.outcomes],
                       constraints=None if self.constraints is None
                       else [replace(c, points=None) for c in self.constraints])
        out = bare.to_dict()
        out["points_n"] = [0 if p.points is None else int(p.points.shape[-1]) for p in parts]
        blob = b"".join(np.ascontiguousarray(p.points, dtype="<f8").tobytes() for p in parts if p.points is not None)
        return out, blob

    @classmethod
    def from_storage(cls, d: dict[str, Any], blob: bytes | None) -> Prediction:
        """Inverse of ``to_storage``."""
        pred = cls.from_dict(d)
        if blob is None:
            return pred
        parts = pred.parts
        sizes = d.get("points_n") or [len(blob) // (8 * 2 * len(parts[0].intervals))]
        at = 0
        for part, n in zip(parts, sizes, strict=False):
            if n:
                pairs = len(part.intervals)
                size = 8 * 2 * pairs * n
                part.points = np.frombuffer(blob[at : at + size], dtype="<f8").reshape(2, pairs, n)
                at += size
        return pred


def public_prediction(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """What clients see of a prediction kept as data (``Prediction.to_dict`` or ``to_storage``)."""
    return None if stored is None else Prediction.from_dict(stored).public()


@dataclass
class CalibrationRecord:
    """What one tell records: each objective's record (one for a single objective), each constraint's."""

    outcomes: list[OutcomeRecord]
    constraints: list[OutcomeRecord] | None = None
    several: bool = False  # a multi-objective study's record: each objective's under "objectives"

    def to_dict(self) -> dict[str, Any]:
        out = {"objectives": [r.to_dict() for r in self.outcomes]} if self.several else self.outcomes[0].to_dict()
        if self.constraints is not None:
            out["constraints"] = [r.to_dict() for r in self.constraints]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CalibrationRecord:
        cons = d.get("constraints")
        cons = None if cons is None else [OutcomeRecord.from_dict(r) for r in cons]
        if "objectives" in d:
            return cls([OutcomeRecord.from_dict(r) for r in d["objectives"]], cons, several=True)
        return cls([OutcomeRecord.from_dict(d)], cons)


def initial_states(config: Any, seed: int = 0) -> list[AdaptiveState]:
    """One adaptive state per interval pair, widest first."""
    return [
        new_state(config.adapter, float(a), gamma=config.aci_gamma, seed=seed * 1000 + j,
                  window=config.dtaci_window)
        for j, a in enumerate(pair_alphas(config.level_grid))
    ]


@dataclass
class StudyState:
    """Every adaptive state of a study: the first objective's (``states``), each further objective's
    and each constraint's, one list of per-pair states each, and the seed they derive from.

    Seeds: the first objective's states start from the study's seed, objective ``j`` (from 1) from
    ``seed + 101 + j``, constraint ``j`` (from 0) from ``seed + 1 + j``."""

    seed: int
    states: list[AdaptiveState]
    objectives: list[list[AdaptiveState]] = field(default_factory=list)
    constraints: list[list[AdaptiveState]] = field(default_factory=list)

    @classmethod
    def initial(cls, config: Any, seed: int, n_objectives: int = 1, n_constraints: int = 0) -> StudyState:
        return cls(int(seed), initial_states(config, seed),
                   [initial_states(config, seed + 101 + j) for j in range(1, n_objectives)],
                   [initial_states(config, seed + 1 + j) for j in range(n_constraints)])

    @property
    def heads(self) -> list[list[AdaptiveState]]:
        """The states of a snapshot's heads, in its order: the further objectives', then the constraints'."""
        return [*self.objectives, *self.constraints]

    def fill_rng(self, asked: int) -> np.random.Generator:
        """The generator that completes a partly enqueued configuration at the study's ``asked``-th ask."""
        return np.random.default_rng([self.seed, asked, 13])

    def adapt(self, prediction: Prediction | None, value: float | Sequence[float],
              constraints: Sequence[float] | None = None) -> tuple[StudyState, CalibrationRecord | None]:
        """The state after a tell of ``value`` (a list, one per objective, with several) and the
        constraint values, on the ``prediction`` the trial was asked with; and the record (None for
        a trial not chosen on a prediction). Each outcome adapts its own states with its own value."""
        if prediction is None:
            return self, None
        multi = bool(self.objectives)
        values = list(value) if multi else [value]
        if len(prediction.outcomes) != len(values):
            return self, None
        moved = [adapt_outcome(s, p, float(v))
                 for s, p, v in zip([self.states, *self.objectives], prediction.outcomes, values, strict=True)]
        record = CalibrationRecord([r for _, r in moved], several=multi)
        new = replace(self, states=moved[0][0], objectives=[s for s, _ in moved[1:]])
        preds = prediction.constraints
        if self.constraints and preds and constraints is not None and len(preds) == len(self.constraints):
            cons = [adapt_outcome(s, p, float(v))
                    for s, p, v in zip(self.constraints, preds, constraints, strict=True)]
            new = replace(new, constraints=[s for s, _ in cons])
            record.constraints = [r for _, r in cons]
        return new, record

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "states": [state_to_dict(s) for s in self.states],
                "objectives": [[state_to_dict(s) for s in hs] for hs in self.objectives],
                "constraints": [[state_to_dict(s) for s in hs] for hs in self.constraints]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StudyState:
        return cls(int(d["seed"]), [state_from_dict(s) for s in d["states"]],
                   [[state_from_dict(s) for s in hs] for hs in d.get("objectives") or ()],
                   [[state_from_dict(s) for s in hs] for hs in d.get("constraints") or ()])


def adapt(state: StudyState, prediction: Prediction | None, value: float | Sequence[float],
          constraints: Sequence[float] | None = None) -> tuple[StudyState, CalibrationRecord | None]:
    """The engine's third step: ``state.adapt`` (``StudyState.adapt``)."""
    return state.adapt(prediction, value, constraints)
