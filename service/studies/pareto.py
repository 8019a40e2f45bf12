"""A multi-objective study's Pareto front and hypervolume, from its completed trials' values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from calibo.engine import multi

from ..storage import feasible
from .definitions import StudyDef

HISTORY_POINTS = 200  # at most this many points of the hypervolume-over-trials curve


def pareto(sd: StudyDef, rows: Sequence[tuple[int, list[float], list[float] | None]],
           history: bool = False) -> dict[str, Any]:
    """The front of ``rows`` (``(trial id, values, constraints)`` in completion order): the ids of
    its non-dominated feasible trials, their hypervolume, the reference point (the study's, or each
    objective's worst observed value plus a tenth of its observed range, in the objectives' units)
    and, with ``history``, the hypervolume after each completed trial against that point."""
    signs = np.array([1.0 if d == "minimize" else -1.0 for d in sd.directions])
    if not rows:
        return {"ids": [], "size": 0, "hypervolume": 0.0, "reference_point": None,
                **({"history": []} if history else {})}
    Y = np.array([v for _, v, _ in rows], dtype=float) * signs  # minimised
    ok = np.array([feasible(c) for _, _, c in rows])
    ref_user = sd.config.reference_point
    ref = np.asarray(ref_user, dtype=float) * signs if ref_user is not None else multi.reference_point(Y)
    good = np.flatnonzero(ok)
    front = good[multi.pareto_mask(Y[good])] if good.size else good
    out: dict[str, Any] = {
        "ids": [rows[i][0] for i in front],
        "size": int(front.size),
        "hypervolume": multi.hypervolume(Y[front], ref),
        "reference_point": (ref * signs).tolist(),
    }
    if history:
        n = len(rows)
        marks = sorted(set(np.linspace(1, n, min(n, HISTORY_POINTS)).round().astype(int).tolist()))
        curve, kept = [], np.empty((0, Y.shape[1]))
        last = 0
        for k in marks:  # the front so far grows by the trials completed since the last mark
            new = Y[last:k][ok[last:k]]
            if new.shape[0]:
                both = np.vstack([kept, new])
                kept = both[multi.pareto_mask(both)]
            last = k
            curve.append({"trials": k, "hypervolume": multi.hypervolume(kept, ref)})
        out["history"] = curve
    return out
