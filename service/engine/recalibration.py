"""Kuleshov et al. (2018) recalibration of probabilistic forecasts.

Calibrated Bayesian Optimization (Deshpande & Kuleshov), Appendix B,
Algorithm 4. Given held-out forecasts ``F_t`` (CDFs) and outcomes ``y_t``:

1. the probability integral transforms (PITs) ``p_t = F_t(y_t)``;
2. the recalibration set ``{(p_t, P(p_t))}`` with ``P(p) = #{p_s <= p} / N``,
   the empirical CDF of the PITs;
3. a monotone recalibrator ``R: [0, 1] -> [0, 1]`` fitted on it by isotonic
   regression (increasing, values clipped to ``[0, 1]``), with the anchors
   ``(0, 0)`` and ``(1, 1)`` so that ``R`` maps the whole unit interval.

``R o F`` is the recalibrated CDF: if ``F_x`` is too narrow, ``R`` is steep in
the middle and flat in the tails. Its quantile at level ``a`` is
``F^{-1}(R^{-1}(a))``, with ``R^{-1}(a) = inf{u : R(u) >= a}``.

Choices made here, beyond the paper's text:

* ``R`` is the piecewise-linear interpolation of its knots (the isotonic fit at
  the sorted PITs and the anchors), and ``R^{-1}`` is that curve read the other
  way, exactly, on the same knots: no grid, so no grid resolution limits how
  far into the tails a recalibrated quantile can reach. On Kuleshov's set the
  targets are already non-decreasing in ``p``, so the isotonic step only
  settles ties; ``R`` is then the linearly interpolated empirical CDF of the
  PITs (and ``R^{-1}`` their interpolated empirical quantile function).
* Tied PITs (a model that predicts some outcomes exactly, e.g. a constant
  target) are given consecutive ranks ``k/N`` rather than all the largest one,
  which makes ``R`` jump at the tie: a point mass, as the data say, instead of
  a slope that would skew every recalibrated quantile below the tie.
* Precision in the upper tail. ``1 - p`` rounds to 0 for a PIT within 1e-16 of
  1 (a Gaussian residual of about +8.3 sd), so callers that can compute the
  survival ``1 - p_t`` accurately pass it as ``sf``; ``inverse_sf`` returns
  ``1 - R^{-1}(a)`` from those knots, and ``gaussian_levels`` uses the accurate
  side of each. A badly overconfident Gaussian model (residuals of tens of
  standard deviations) is then widened as far as its PITs say.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr, ndtri
from sklearn.isotonic import isotonic_regression

MAX_PROBIT = 37.0  # |residual / sd| cap: Phi(-37) ~ 6e-300 is still a positive double


def _locate(q: np.ndarray, xs: np.ndarray,
            right: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where ``q`` falls on the non-decreasing knot coordinates ``xs``.

    Returns ``(a, b, w, exact)``: a value at ``q`` is ``v[a] + w (v[b] - v[a])``
    for any companion knot array ``v``. Where ``q`` equals knots exactly
    (``exact``), ``a == b`` is the last such knot (``right``) or the first.
    """
    n = xs.size
    lo = np.searchsorted(xs, q, side="left")  # first knot >= q
    hi = np.searchsorted(xs, q, side="right")  # first knot > q
    exact = hi > lo
    b = np.clip(lo, 1, n - 1)
    a = b - 1
    span = xs[b] - xs[a]
    w = np.where(span > 0, (q - xs[a]) / np.where(span > 0, span, 1.0), 0.0)
    w = np.clip(w, 0.0, 1.0)
    at = np.where(right, hi - 1, lo)
    a = np.where(exact, at, a)
    b = np.where(exact, at, b)
    w = np.where(exact, 0.0, w)
    return a, b, w, exact


@dataclass
class Recalibrator:
    """Monotone ``R: [0, 1] -> [0, 1]`` through knots ``(u_k, r_k)`` (both non-decreasing).

    ``s_k = 1 - u_k`` is kept separately for precision near 1 (see the module notes).
    """

    u: np.ndarray
    s: np.ndarray
    r: np.ndarray

    @classmethod
    def identity(cls) -> Recalibrator:
        return cls(np.array([0.0, 1.0]), np.array([1.0, 0.0]), np.array([0.0, 1.0]))

    @classmethod
    def fit(cls, pit: np.ndarray, sf: np.ndarray | None = None) -> Recalibrator:
        """Algorithm 4 on PIT values ``pit`` (optionally with accurate ``sf = 1 - pit``)."""
        p = np.clip(np.asarray(pit, float).ravel(), 0.0, 1.0)
        if p.size == 0:
            return cls.identity()
        s = 1.0 - p if sf is None else np.clip(np.asarray(sf, float).ravel(), 0.0, 1.0)
        order = np.lexsort((-s, p))  # by PIT, then by survival descending (same order, finer)
        p, s = p[order], s[order]
        n = p.size
        target = np.arange(1, n + 1) / n  # P(p_t) = #{p_s <= p_t} / N, ties given consecutive ranks
        u = np.concatenate([[0.0], p, [1.0]])
        sv = np.concatenate([[1.0], s, [0.0]])
        y = np.concatenate([[0.0], target, [1.0]])
        r = np.clip(isotonic_regression(y, y_min=0.0, y_max=1.0, increasing=True), 0.0, 1.0)
        return cls(u, sv, r)

    def __call__(self, p: np.ndarray) -> np.ndarray:
        """``R(p)``; at a jump, the upper value (right-continuous, as a CDF)."""
        q = np.clip(np.asarray(p, float), 0.0, 1.0)
        a, b, w, _ = _locate(q, self.u, right=True)
        val: NDArray[np.float64] = self.r[a] + w * (self.r[b] - self.r[a])
        return val

    def inverse(self, level: np.ndarray) -> np.ndarray:
        """``R^{-1}(level) = inf{u : R(u) >= level}``."""
        a, b, w, _ = _locate(np.clip(np.asarray(level, float), 0.0, 1.0), self.r, right=False)
        val: NDArray[np.float64] = self.u[a] + w * (self.u[b] - self.u[a])
        return val

    def inverse_sf(self, level: np.ndarray) -> np.ndarray:
        """``1 - R^{-1}(level)``, accurate where ``R^{-1}(level)`` is near 1."""
        a, b, w, _ = _locate(np.clip(np.asarray(level, float), 0.0, 1.0), self.r, right=False)
        val: NDArray[np.float64] = self.s[a] + w * (self.s[b] - self.s[a])
        return val

    @property
    def is_identity(self) -> bool:
        return self.u.size == 2


def gaussian_pit(y: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PITs ``Phi(r)`` and survivals ``Phi(-r)`` of outcomes under Gaussian forecasts, ``r`` capped."""
    r = (np.asarray(y, float) - mean) / np.maximum(sd, 1e-300)
    r = np.clip(np.nan_to_num(r, nan=0.0), -MAX_PROBIT, MAX_PROBIT)
    return ndtr(r), ndtr(-r)


def gaussian_levels(rec: Recalibrator, levels: np.ndarray) -> np.ndarray:
    """``Phi^{-1}(R^{-1}(level))``: a Gaussian forecast's recalibrated quantile is ``mean + sd *`` this."""
    lv = np.asarray(levels, float)
    u, s = rec.inverse(lv), rec.inverse_sf(lv)
    tiny = np.finfo(float).tiny
    z = np.where(u <= 0.5, ndtri(np.maximum(u, tiny)), -ndtri(np.maximum(s, tiny)))
    capped: NDArray[np.float64] = np.clip(z, -MAX_PROBIT, MAX_PROBIT)
    return capped
