"""A multi-objective study's Pareto front and hypervolume, from its completed trials' values."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calibo.engine import multi

from ..storage import feasible
from .definitions import StudyDef
from .views import Front, HypervolumePoint

HISTORY_POINTS = 200  # at most this many points of the hypervolume-over-trials curve
LARGEST = float(np.finfo(float).max)


def _finite_ref(ref: np.ndarray) -> np.ndarray:
    """The default reference point (worst plus a tenth of the range) can overflow when told values
    reach +-1.8e308: it saturates at the largest float, so JSON can carry it."""
    out: np.ndarray = np.clip(np.nan_to_num(ref, nan=LARGEST, posinf=LARGEST, neginf=-LARGEST), -LARGEST, LARGEST)
    return out


def _hypervolume(Y: np.ndarray, ref: np.ndarray) -> float:
    """``multi.hypervolume``, saturating at the largest float instead of overflowing.

    Values near +-1.8e308 make the box's sides (``ref - y``) overflow, and a side of infinity
    times one of zero is NaN. On a quarter of the values (exact: a power of two) the sides stay
    finite and their products at worst reach infinity, which saturates."""
    with np.errstate(over="ignore", invalid="ignore"):
        hv = multi.hypervolume(Y, ref)
        if np.isfinite(hv):
            return hv
        hv = multi.hypervolume(Y * 0.25, ref * 0.25) * 4.0 ** Y.shape[1]
    return float(min(np.nan_to_num(hv, nan=LARGEST, posinf=LARGEST), LARGEST))


def pareto(sd: StudyDef, rows: Sequence[tuple[int, list[float], list[float] | None]],
           history: bool = False) -> Front:
    """The front of ``rows`` (``(trial id, values, constraints)`` in completion order): the ids of
    its non-dominated feasible trials, their hypervolume, the reference point (the study's, or each
    objective's worst observed value plus a tenth of its observed range, in the objectives' units)
    and, with ``history``, the hypervolume after each completed trial against that point."""
    signs = np.array([1.0 if d == "minimize" else -1.0 for d in sd.directions])
    if not rows:
        empty: Front = {"ids": [], "size": 0, "hypervolume": 0.0, "reference_point": None}
        if history:
            empty["history"] = []
        return empty
    Y = np.array([v for _, v, _ in rows], dtype=float) * signs  # minimised
    ok = np.array([feasible(c) for _, _, c in rows])
    ref_user = sd.config.reference_point
    with np.errstate(over="ignore", invalid="ignore"):
        ref = _finite_ref(np.asarray(ref_user, dtype=float) * signs if ref_user is not None
                          else multi.reference_point(Y))
    good = np.flatnonzero(ok)
    front = good[multi.pareto_mask(Y[good])] if good.size else good
    out: Front = {
        "ids": [rows[int(i)][0] for i in front],
        "size": int(front.size),
        "hypervolume": _hypervolume(Y[front], ref),
        "reference_point": (ref * signs).tolist(),
    }
    if history:
        n = len(rows)
        marks = sorted(set(np.linspace(1, n, min(n, HISTORY_POINTS)).round().astype(int).tolist()))
        curve: list[HypervolumePoint] = []
        kept = np.empty((0, Y.shape[1]))
        last = 0
        for k in marks:  # the front so far grows by the trials completed since the last mark
            new = Y[last:k][ok[last:k]]
            if new.shape[0]:
                both = np.vstack([kept, new])
                kept = both[multi.pareto_mask(both)]
            last = k
            curve.append({"trials": k, "hypervolume": _hypervolume(kept, ref)})
        out["history"] = curve
    return out
