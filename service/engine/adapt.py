"""adapt: one outcome's adaptive states moved by the value told against the prediction it was asked on.

``StudyState.adapt`` (``engine.state``) runs it for every outcome of a tell: the objective (or each
of several), and each constraint.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .adaptive import ACIState, AdaptiveState
from .conformal import beta_of, issued_beta
from .prediction import OutcomePrediction, OutcomeRecord
from .warp import Warp


def adapt_outcome(states: Sequence[AdaptiveState], prediction: OutcomePrediction, value: float,
                  ) -> tuple[list[AdaptiveState], OutcomeRecord]:
    """Every pair's alpha moved by the observed ``value``, and the calibration record.

    Raw (unconformalized) predictions are recorded but do not move alpha: there are no scores to
    re-weight yet. ACI is updated with the breach of the interval the prediction showed (each pair's
    own conformal set, nested with the others by ``conformal.nested``), so that the shown intervals
    are the calibrated ones and a state that moved since the ask (late feedback) reads the interval
    issued. DtACI's experts are updated with ``beta_t`` of the pair's own set, shifted by the move of
    its alpha since the ask (``conformal.issued_beta``).
    """
    ivs = prediction.intervals
    covered = [bool(iv.lower <= value <= iv.upper) for iv in ivs]
    widths = [float(iv.upper - iv.lower) for iv in ivs]
    betas: list[float] = []
    new = list(states)
    if prediction.points is not None:
        pts = np.asarray(prediction.points, dtype=float)  # (2, P, n), from select (or a stored copy of it)
        y_int = float(Warp.from_dict(prediction.warp).forward(prediction.sign * value))
        new = []
        for j, (s, iv) in enumerate(zip(states, ivs, strict=True)):
            beta = beta_of(pts[0, j], pts[1, j], y_int)
            betas.append(beta)
            if isinstance(s, ACIState):  # ACI calibrates the interval shown: its own set, nested
                new.append(s.missed(not covered[j]))
            else:  # DtACI's experts need beta; late feedback: see issued_beta
                new.append(s.update(issued_beta(beta, s.alpha, iv.alpha)))
    record = OutcomeRecord(
        method=prediction.method, coverage=[iv.coverage for iv in ivs], alpha=[iv.alpha for iv in ivs],
        covered=covered, lower=[float(iv.lower) for iv in ivs], upper=[float(iv.upper) for iv in ivs],
        width=widths, beta=betas or None, mean=prediction.mean, levels=prediction.levels,
        quantiles=prediction.quantiles, value=value)
    return new, record
