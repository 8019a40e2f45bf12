"""Intervals from calibration scores: the point sets, their order statistics, and ``beta_t``.

Interval at miscoverage ``a`` over ``n`` scores (paper 002, eq. 10 and 18). Both methods are the
same order statistics of two point sets, with ``lo_i(x) = Q_lo(x)`` for split and ``lo_i(x) =
Q_lo^{-k(i)}(x)`` for CV+ (Barber et al.'s CV+; the paper writes ``q_{1-a}`` for both ends, the
lower end is the matching lower quantile):

    lower(x) = floor(a (n+1))-th smallest of { lo_i(x) - D_i }
    upper(x) = ceil((1-a)(n+1))-th smallest of { hi_i(x) + D_i }

For split this is ``Q_lo(x) - q`` and ``Q_hi(x) + q`` with ``q`` the ``ceil((1-a)(n+1))``-th
smallest score. An order index outside ``1..n`` is an infinite bound: a shown interval has that end
unbounded (``pair_interval``), and ``beta_of`` (what ACI / DtACI read) uses the same exact rule;
for ranking candidates (``Bounds.at``) it is clamped to the extreme point.

A scaled surrogate's intervals are widened by its spread at the candidate: ``lo(x) - V(x) q`` and
``hi(x) + V(x) q`` (ACHO eq. 18). With raw pairs ``mu +- V c`` this is exactly ``mu +- V q_{1-a}(|y
- mu| / V)``. A split of a refitted GP multiplies the correction by the shown model's spread over
the scored model's (``ConformalFit.transport``) in the same place.

Shown intervals. ``Bounds.at`` sorts each candidate's calibrated quantiles (the acquisitions need a
monotone quantile function), which mixes pairs whose ends cross, e.g. a narrow raw interval widened
by a negative score quantile. A prediction's interval for a pair is that pair's own conformal set at
its alpha (``pair_interval``), the set ``beta_t`` and so ACI / DtACI refer to; an empty set (crossed
ends) is shown as the zero-width interval at the midpoint of its ends. Showing the sorted pairs
instead made a study's intervals cover far more than the adaptive state was told, most in crowds
(``benchmarks/calibration.py``, crowd rows).
"""

from __future__ import annotations

import numpy as np

from .levels import SPLIT_RULE


def _exact_index(alpha: np.ndarray | float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """0-based indices of the lower and upper order statistics; below 0 (lower) or above ``n - 1``
    (upper) the end is infinite."""
    a = np.asarray(alpha, dtype=float)
    return np.floor(a * (n + 1)).astype(int) - 1, np.ceil((1.0 - a) * (n + 1)).astype(int) - 1


def _order_index(alpha: np.ndarray | float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """0-based clamped indices of the lower and upper order statistics."""
    lo, hi = _exact_index(alpha, n)
    return np.clip(lo, 0, n - 1), np.clip(hi, 0, n - 1)


class Bounds:
    """Sorted point sets per candidate and pair; intervals at any alpha by indexing.

    ``raw`` is (N, L) raw quantiles; for CV+ ``fold_raw`` is (K, N, L). ``scale`` (N,) (and, for
    CV+, ``fold_scale`` (K, N)) multiplies the (normalised) scores at each candidate: a scaled
    surrogate's spread, or a refitted split's ``ConformalFit.transport``. The sort is done once
    (lazily) and reused by every select at any alpha.
    """

    def __init__(
        self,
        method: str,
        raw: np.ndarray,
        scores: np.ndarray | None = None,
        fold_raw: np.ndarray | None = None,
        fold_of: np.ndarray | None = None,
        scale: np.ndarray | None = None,
        fold_scale: np.ndarray | None = None,
    ) -> None:
        self.method = method
        self.raw = raw
        self.scores = scores
        self.fold_raw = fold_raw
        self.fold_of = fold_of
        self.scale = scale
        self.fold_scale = fold_scale
        L = raw.shape[1]
        self.P = L // 2
        self._sorted: list[tuple[np.ndarray, ...]] | None = None  # per pair: its (lower, upper) points sorted
        if method in SPLIT_RULE:
            assert scores is not None  # every conformal method has scores; only raw has none
            self._sorted_scores = np.sort(scores, axis=0)  # (n, P)

    def _points(self, j: int, rows: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """Unsorted lower/upper point sets (N, n) for pair ``j``."""
        L = self.raw.shape[1]
        assert self.scores is not None  # raw has no point sets
        D = self.scores[:, j]
        if self.method in SPLIT_RULE:
            lo, hi = self.raw[rows, j], self.raw[rows, L - 1 - j]
            w = D[None, :] if self.scale is None else self.scale[rows][:, None] * D[None, :]
            return lo[:, None] - w, hi[:, None] + w
        assert self.fold_raw is not None and self.fold_of is not None  # CV+ has its folds
        lo = self.fold_raw[:, rows, j][self.fold_of].T  # (N, n)
        hi = self.fold_raw[:, rows, L - 1 - j][self.fold_of].T
        w = D[None, :] if self.fold_scale is None else self.fold_scale[:, rows][self.fold_of].T * D[None, :]
        return lo - w, hi + w

    def points(self, row: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Sorted point sets of one candidate for every pair (stored with a prediction)."""
        lows, highs = [], []
        for j in range(self.P):
            a, b = self._points(j, np.array([row]))
            lows.append(np.sort(a[0]))
            highs.append(np.sort(b[0]))
        return lows, highs

    def packed(self, row: int) -> np.ndarray:
        """What a prediction stores for adapt: (2, P, n), each pair's sorted lower and upper points."""
        lows, highs = self.points(row)
        return np.stack([np.stack(lows), np.stack(highs)])

    def at(self, alphas: np.ndarray) -> np.ndarray:
        """Calibrated quantiles (N, L) at per-pair miscoverage ``alphas``; sorted per row."""
        if self.method == "raw":
            return self.raw
        N, L = self.raw.shape
        out = np.empty((N, L))
        assert self.scores is not None  # not raw
        n = self.scores.shape[0]
        v = 1.0 if self.scale is None else self.scale
        for j in range(self.P):
            i_lo, i_hi = _order_index(alphas[j], n)
            if self.method in SPLIT_RULE:
                # floor(a(n+1))-th smallest of lo - V D == lo - V (n+1-that)-th smallest D
                s = self._sorted_scores[:, j]
                out[:, j] = self.raw[:, j] - v * s[n - 1 - i_lo]
                out[:, L - 1 - j] = self.raw[:, L - 1 - j] + v * s[i_hi]
            else:
                if self._sorted is None:
                    self._sorted = [tuple(np.sort(p, axis=1) for p in self._points(k)) for k in range(self.P)]
                A, B = self._sorted[j]
                out[:, j] = A[:, i_lo]
                out[:, L - 1 - j] = B[:, i_hi]
        return np.sort(out, axis=1)


def interval_from_points(lower_pts: np.ndarray, upper_pts: np.ndarray, alpha: float) -> tuple[float, float]:
    """Clamped interval of one candidate at ``alpha`` from its sorted point sets."""
    n = len(lower_pts)
    i_lo, i_hi = _order_index(alpha, n)
    return float(lower_pts[int(i_lo)]), float(upper_pts[int(i_hi)])


def pair_interval(lower: np.ndarray, upper: np.ndarray, alpha: float) -> tuple[float, float]:
    """One pair's interval at ``alpha`` from a prediction's stored point sets (``Bounds.packed``):
    the conformal set ``{y : alpha < beta(y)}`` that ``beta_of`` and so ACI / DtACI refer to.

    An end whose order index falls outside ``1..n`` is infinite, as in ACI (Gibbs & Candes 2021):
    at ``alpha < 1 / (n + 1)`` no score bounds the set and it is the whole line, which covers
    every outcome. Clamping it to the extreme point (as ``Bounds.at`` does for ranking) would show
    a set narrower than the one calibrated; ACI would then see misses no alpha can repair and push
    alpha down without end. Where the ends cross the set is empty (no ``y`` has ``alpha < beta``):
    it is shown as the zero-width interval at the midpoint of the crossed ends.
    """
    n = len(lower)
    i_lo, i_hi = (int(i) for i in _exact_index(alpha, n))
    lo = float(lower[min(i_lo, n - 1)]) if i_lo >= 0 else -np.inf  # alpha past 1: clamped inwards
    hi = float(upper[max(i_hi, 0)]) if i_hi < n else np.inf
    return (lo, hi) if lo <= hi else ((lo + hi) / 2.0,) * 2


def nested(lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs' intervals (widest first) made nested, moved as little as possible.

    ACI/DtACI move each pair's alpha on its own, so a narrower nominal interval can come out
    wider than a wider one, or stick out of it. Read as quantiles at the levels ``alpha_j / 2``
    and ``1 - alpha_j / 2``, the ends must not decrease with the level: the ends are replaced by
    their isotonic regression in that order (pool adjacent violators: each run of ends out of
    order becomes its mean), the least-squares nearest monotone ends. Ends that were already in
    order are returned exactly as they were. ``adapt`` feeds ACI the breaches of these shown
    intervals, so that what is shown is what is calibrated."""
    p = len(lower)
    ends = np.concatenate([np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)[::-1]])
    if np.all(ends[1:] >= ends[:-1]):  # not np.diff: two infinite ends of one sign are in order
        return ends[:p].copy(), ends[p:][::-1].copy()
    sums, sizes = [], []
    for v in ends:  # pool adjacent violators
        sums.append(float(v))
        sizes.append(1)
        while len(sums) > 1 and sums[-2] / sizes[-2] > sums[-1] / sizes[-1]:
            total, size = sums.pop(), sizes.pop()
            sums[-1] += total
            sizes[-1] += size
    fitted = np.repeat([s / n for s, n in zip(sums, sizes, strict=True)], sizes)
    return fitted[:p], fitted[p:][::-1]


def pair_intervals(points: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair's shown interval from a prediction's stored point sets ``(2, P, n)`` at ``alphas``:
    each pair's own conformal set (``pair_interval``), then ``nested``."""
    ends = [pair_interval(points[0, j], points[1, j], float(a)) for j, a in enumerate(alphas)]
    return nested(np.array([lo for lo, _ in ends]), np.array([hi for _, hi in ends]))


def issued_beta(beta: float, alpha_now: float, alpha_issued: float) -> float:
    """The ``beta`` to update a state with whose alpha moved since the interval was issued.

    ACI and DtACI see an outcome only through ``alpha - beta`` (the miss
    ``1[alpha >= beta]``, the pinball loss of ``beta - alpha``). With late
    feedback (a crowd: outcomes arrive 7-31 predictions after their ask, out of
    order) the state's alpha has moved by then; shifted by that move, the
    update reads the outcome of the interval actually issued. For ACI this is
    exact, and it is what its guarantee needs: ``alpha_{T+1} = alpha_1 + gamma
    sum(target - err)`` over the issued intervals' misses keeps their long-run
    miscoverage at the target whatever the delays. DtACI's experts are shifted
    by the move of the alpha it used. Sequentially (nothing moved) it is ``beta``.
    """
    return beta + (alpha_now - alpha_issued)


def beta_of(lower: np.ndarray, upper: np.ndarray, y: float) -> float:
    """``beta_t = sup{a : y in C(a)}`` (paper 002, eq. 20) from one pair's sorted point sets (a row
    of ``Bounds.packed``), with the exact order rule.

    ``y`` lies in ``C(a)`` iff ``a < beta``: with ``a_ = #{lower <= y}`` and
    ``b_ = #{upper < y}``, the lower end holds iff ``a < (a_+1)/(n+1)`` and the
    upper end iff ``a < 1 - b_/(n+1)``.
    """
    n = len(lower)
    a_cnt = int(np.searchsorted(lower, y, side="right"))
    b_cnt = int(np.searchsorted(upper, y, side="left"))
    return float(min((a_cnt + 1) / (n + 1), 1.0 - b_cnt / (n + 1)))
