"""Plain data the client hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from . import _reprs

__all__ = ["ParetoFront", "Trial", "TrialRecord", "TrialState"]


class TrialState(StrEnum):
    """A trial's state. Each member is the wire's word (``TrialState.COMPLETE == "complete"``, so
    ``record.state == "complete"`` holds and ``state=`` filters take either) and carries Optuna's
    name (``TrialState.COMPLETE.name == "COMPLETE"``, ``TrialState.FAIL`` for ``"failed"``), which
    ``trials_dataframe()`` shows, as Optuna's does."""

    WAITING = "waiting"  # enqueued, not handed out yet
    RUNNING = "running"
    COMPLETE = "complete"
    PRUNED = "pruned"
    FAIL = "failed"

    @classmethod
    def of(cls, value: Any) -> TrialState | str:
        """The member for a wire state; a state this client does not know stays the string it is."""
        try:
            return cls(value)
        except ValueError:
            return str(value)


@dataclass(frozen=True, slots=True)
class Trial:
    """A trial just asked for: run ``params``, then tell the study its value.

    ``prediction`` is the calibrated surrogate's forecast the server chose the
    configuration on (quantiles, mean, intervals), or None during warm-up.
    """

    id: int
    number: int
    params: dict[str, Any]
    prediction: dict[str, Any] | None
    study_id: int
    origin: str = "asked"  # as its record says: "enqueued" when handed out from the study's queue
    user_attrs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, data: dict[str, Any], study_id: int | None) -> Trial:
        prediction = data.get("prediction")
        return cls(
            id=int(data["id"]),
            number=int(data["number"]),
            params=dict(data["params"]),
            prediction=dict(prediction) if isinstance(prediction, dict) else None,
            study_id=int(cast(int, data["study_id"] if data.get("study_id") is not None else study_id)),
            origin=str(data.get("origin") or "asked"),  # an ask's answer names only the enqueued ones
            user_attrs=dict(data.get("user_attrs") or {}),
        )

    def __repr__(self) -> str:
        shown = _reprs.prediction(self.prediction)
        return _reprs.build(self, ("id", str(self.id)), ("number", str(self.number)),
                            ("params", _reprs.params(self.params)), ("origin", repr(self.origin)),
                            ("prediction", None if shown is None else f"({shown})"))


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class TrialRecord:
    """A trial as the server stores it: what listings, ``tell`` and ``best_trial`` answer.

    ``state`` is a :class:`TrialState`: ``waiting`` (enqueued, not handed out yet), ``running``,
    ``complete``, ``failed`` or ``pruned`` (Optuna's names: ``WAITING``, ``RUNNING``, ``COMPLETE``,
    ``FAIL``, ``PRUNED``); ``value`` the told objective (None while running or when
    failed); ``constraints`` the told constraint values (``feasible`` when each is <= 0);
    ``origin`` how it came to be (``asked``, ``enqueued``, ``added``, ``copied``);
    ``prediction`` what the surrogate forecast at ask (None in the warm start and for
    trials it did not choose). ``raw`` is the server's JSON view as it came.
    """

    id: int
    number: int
    state: TrialState | str
    params: dict[str, Any]
    value: float | None
    study_id: int
    prediction: dict[str, Any] | None = None
    values: list[float] | None = None
    constraints: list[float] | None = None
    user_attrs: dict[str, Any] = field(default_factory=dict)
    origin: str = "asked"
    worker_id: str | None = None
    asked_at: datetime | None = None
    finished_at: datetime | None = None
    failure: str | None = None  # a failed trial: "crashed", "interrupted" or "expired"
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def feasible(self) -> bool:
        """Whether every told constraint is <= 0 (a trial without constraints is feasible)."""
        return all(c <= 0 for c in self.constraints or ())

    @classmethod
    def from_wire(cls, data: dict[str, Any], study_id: int) -> TrialRecord:
        prediction = data.get("prediction")
        values = data.get("values")
        constraints = data.get("constraints")
        value = data.get("value")
        return cls(
            id=int(data["id"]),
            number=int(data["number"]),
            state=TrialState.of(data.get("state", "")),
            params=dict(data.get("params") or {}),
            value=float(value) if isinstance(value, int | float) else None,
            study_id=int(data.get("study_id", study_id)),
            prediction=dict(prediction) if isinstance(prediction, dict) else None,
            values=[float(v) for v in values] if isinstance(values, list) else None,
            constraints=[float(c) for c in constraints] if isinstance(constraints, list) else None,
            user_attrs=dict(data.get("user_attrs") or {}),
            origin=str(data.get("origin") or "asked"),
            worker_id=data.get("worker_id"),
            asked_at=_time(data.get("asked_at")),
            finished_at=_time(data.get("finished_at")),
            failure=data.get("failure"),
            raw=dict(data),
        )

    def __repr__(self) -> str:
        outcome = ("values", "[" + ", ".join(map(_reprs.value, self.values)) + "]") if self.values is not None \
            else ("value", _reprs.value(self.value))
        return _reprs.build(self, ("id", str(self.id)), ("number", str(self.number)), ("state", repr(str(self.state))),
                            outcome, ("params", _reprs.params(self.params)))


@dataclass(frozen=True, slots=True)
class ParetoFront:
    """A multi-objective study's front: its non-dominated (feasible) completed trials, the
    hypervolume they dominate up to ``reference_point`` (in the objectives' units), and the
    hypervolume after each completed trial, ``history``: ``(completed trials, hypervolume)`` pairs."""

    trials: list[TrialRecord]
    hypervolume: float
    reference_point: list[float] | None
    history: list[tuple[int, float]]

    @classmethod
    def from_wire(cls, data: dict[str, Any], study_id: int) -> ParetoFront:
        ref = data.get("reference_point")
        return cls(
            trials=[TrialRecord.from_wire(t, study_id) for t in data.get("trials") or []],
            hypervolume=float(data.get("hypervolume") or 0.0),
            reference_point=[float(v) for v in ref] if isinstance(ref, list) else None,
            history=[(int(h["trials"]), float(h["hypervolume"])) for h in data.get("history") or []],
        )

    def __repr__(self) -> str:
        ref = None if self.reference_point is None else "[" + ", ".join(map(_reprs.value, self.reference_point)) + "]"
        return _reprs.build(self, ("trials", f"<{len(self.trials)} on the front>"),
                            ("hypervolume", _reprs.value(self.hypervolume)), ("reference_point", ref))
