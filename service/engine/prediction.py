"""What a suggestion was chosen on (``Prediction``) and what a tell records of it
(``CalibrationRecord``): the engine's typed data, with one serialiser each.

``Prediction.public()`` is what a client sees; ``to_dict()`` what the engine keeps (with the
conformal point sets, the orientation and the output warp ``adapt`` needs); ``to_storage()`` the
same with the point sets as one binary blob.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from . import reprs

# how ``to_dict`` writes the conformal point sets: as the array, as nested lists (JSON), or not at all
Points = Literal["array", "list", "none"]


def end_out(v: float) -> float | None:
    """An interval's end (or width) as data: an unbounded one (infinite) is ``None`` (JSON ``null``)."""
    return None if v is None or math.isinf(v) else v


def end_in(v: float | None, unbounded: float) -> float:
    """An interval's end read back from data: ``None`` is ``unbounded`` (``-inf`` below, ``inf`` above)."""
    return unbounded if v is None else v


@dataclass
class Interval:
    """One interval pair's calibrated interval, in the user's units, at the alpha it was built with.

    An end is infinite where the pair's alpha asks for more coverage than its scores can bound (the
    conformal set is then unbounded on that side: ``conformal.pair_interval``); as data it is
    ``None``."""

    coverage: float
    alpha: float
    lower: float
    upper: float

    def to_dict(self) -> dict[str, float | None]:
        return {"coverage": self.coverage, "alpha": self.alpha, "lower": end_out(self.lower),
                "upper": end_out(self.upper)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Interval:
        return cls(d["coverage"], d["alpha"], end_in(d["lower"], -math.inf), end_in(d["upper"], math.inf))


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

    def __repr__(self) -> str:
        return reprs.build(self, ("method", repr(self.method)),
                           ("prediction", f"({reprs.interval(self.mean, self.intervals)})"),
                           ("points", reprs.value(self.points) if self.points is not None else None))

    def to_dict(self, internal: bool = True, points: Points = "array") -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "levels": self.levels, "quantiles": self.quantiles,
                               "mean": self.mean, "intervals": [iv.to_dict() for iv in self.intervals]}
        if internal:
            out["sign"] = self.sign
            if self.warp is not None:
                out["warp"] = self.warp
            if self.points is not None and points != "none":
                out["points"] = self.points.tolist() if points == "list" else self.points
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutcomePrediction:
        pts = d.get("points")
        if pts is not None and d.get("shift") == "fcs":  # stored with covariate-shift weights (removed):
            pts = np.asarray(pts, dtype=float)           # (2, P, 2n+1), the sorted points come first
            pts = pts[..., : (pts.shape[-1] - 1) // 2]
        return cls(d["method"], d["levels"], d["quantiles"], cast(float, d.get("mean")),
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

    def __repr__(self) -> str:
        first = self.outcomes[0] if len(self.outcomes) == 1 else None
        return reprs.build(self, ("method", None if first is None else repr(first.method)),
                           ("prediction", reprs.prediction(self)), ("surrogate", repr(self.surrogate)),
                           ("acquisition", repr(self.acquisition)), ("fitted_on", str(self.fitted_on)),
                           ("constraints", None if self.constraints is None else str(len(self.constraints))))

    @property
    def parts(self) -> list[OutcomePrediction]:
        """Every outcome prediction, in stored order: the objectives', then the constraints'."""
        return [*self.outcomes, *(self.constraints or ())]

    def to_dict(self, internal: bool = True, points: Points = "array") -> dict[str, Any]:
        """The prediction as data: with ``internal`` what the engine keeps (``adapt`` reads it back
        with ``from_dict``), without it what a client sees (``public``); ``points``: the point sets
        as arrays, as nested lists (JSON) or left out (``to_storage`` moves them to a blob). A
        single objective's prediction is flat; several objectives' sit under ``objectives``."""
        if len(self.outcomes) == 1:
            out = self.outcomes[0].to_dict(internal, points)
        else:
            out = {"objectives": [o.to_dict(internal, points) for o in self.outcomes]}
        out.update(surrogate=self.surrogate, fitted_on=self.fitted_on, acquisition=self.acquisition,
                   score=self.score)
        if self.constraints is not None:
            out["constraints"] = [c.to_dict(internal, points) for c in self.constraints]
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
        return cls(outcomes, cast(str, d.get("surrogate")), cast(int, d.get("fitted_on")),
                   cast(str, d.get("acquisition")), cast(float, d.get("score")),
                   None if cons is None else [OutcomePrediction.from_dict(c) for c in cons], d.get("feasibility"))

    def to_storage(self) -> tuple[dict[str, Any], bytes | None]:
        """``(data, blob)``: the prediction as kept, its point sets moved to one blob of raw
        little-endian float64 (``points_n``: each part's number of points, 0 for none)."""
        parts = self.parts
        if all(p.points is None for p in parts):
            return self.to_dict(), None
        out = self.to_dict(points="none")
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
class OutcomeRecord:
    """One outcome's calibration record: its prediction's intervals against the value told."""

    method: str
    coverage: list[float]
    alpha: list[float]
    covered: list[bool]
    lower: list[float]
    upper: list[float]
    width: list[float]
    beta: list[float] | None
    mean: float | None
    levels: list[float]
    quantiles: list[float]
    value: float

    def __repr__(self) -> str:
        covered = f"{sum(map(bool, self.covered or ()))}/{len(self.covered or ())}"
        return reprs.build(self, ("method", repr(self.method)), ("value", reprs.value(self.value)),
                           ("mean", reprs.value(self.mean)), ("covered", covered))

    def to_dict(self) -> dict[str, Any]:
        """As data; an unbounded end, and so its width, is ``None`` (see ``Interval``)."""
        return {"method": self.method, "coverage": self.coverage, "alpha": self.alpha, "covered": self.covered,
                "lower": [end_out(v) for v in self.lower], "upper": [end_out(v) for v in self.upper],
                "width": [end_out(v) for v in self.width], "beta": self.beta,
                "mean": self.mean, "levels": self.levels, "quantiles": self.quantiles, "value": self.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutcomeRecord:
        fields: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__}
        rec = cls(**fields)
        for name, unbounded in (("lower", -math.inf), ("upper", math.inf), ("width", math.inf)):
            ends = getattr(rec, name)
            if ends is not None:
                setattr(rec, name, [end_in(v, unbounded) for v in ends])
        return rec


@dataclass
class CalibrationRecord:
    """What one tell records: each objective's record (one for a single objective), each constraint's."""

    outcomes: list[OutcomeRecord]
    constraints: list[OutcomeRecord] | None = None
    several: bool = False  # a multi-objective study's record: each objective's under "objectives"

    def __repr__(self) -> str:
        first = self.outcomes[0] if len(self.outcomes) == 1 else None
        return reprs.build(self, ("objectives", str(len(self.outcomes)) if first is None else None),
                           ("value", None if first is None else reprs.value(first.value)),
                           ("method", None if first is None else repr(first.method)),
                           ("constraints", None if self.constraints is None else str(len(self.constraints))))

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
