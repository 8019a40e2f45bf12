"""``StudyState``: every adaptive (ACI / DtACI) state of a study, with the seeds they start from,
the study's generator keys, and one ``adapt`` for an outcome of any shape (one value, several
objectives, constraints).

With ``Prediction`` and ``CalibrationRecord`` (``engine.prediction``) it is what crosses from the
engine to its homes (the ``Optimizer``, the service, ``CaliboSampler``) and back. Each has
``to_dict`` / ``from_dict``: the homes store what these write and never reach inside.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from . import reprs
from .adapt import adapt_outcome
from .adaptive import AdaptiveState, new_state, state_from_dict, state_to_dict
from .conformal import pair_alphas
from .prediction import CalibrationRecord, Prediction


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

    def __repr__(self) -> str:
        alphas = "[" + ", ".join(reprs.value(float(st.alpha)) for st in self.states) + "]"
        return reprs.build(self, ("seed", str(self.seed)), ("alphas", alphas),
                           ("steps", str(self.states[0].steps) if self.states else None),
                           ("objectives", str(len(self.objectives) + 1) if self.objectives else None),
                           ("constraints", str(len(self.constraints)) if self.constraints else None))

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
        values = list(cast(Sequence[float], value)) if multi else [cast(float, value)]  # a list: one per objective
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
