"""Plain data the client hands back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Trial"]


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

    @classmethod
    def from_wire(cls, data: dict[str, Any], study_id: int) -> Trial:
        prediction = data.get("prediction")
        return cls(
            id=int(data["id"]),
            number=int(data["number"]),
            params=dict(data["params"]),
            prediction=dict(prediction) if isinstance(prediction, dict) else None,
            study_id=int(data.get("study_id", study_id)),
        )
