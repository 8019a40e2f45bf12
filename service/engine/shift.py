"""Split conformal under feedback covariate shift (FCS): weighted thresholds and their weights.

Why. A study's next configuration is not drawn like its calibration points:
select takes the acquisition's best candidate, so the test point comes from
the *design* distribution the fitted model induces, while the calibration
points (a random part of the observations for split) came from earlier
designs and the quasi-random warm start. Fannjiang, Bates, Angelopoulos,
Listgarten and Jordan (PNAS 2022, "Conformal prediction under feedback
covariate shift for biomolecular design") call this feedback covariate shift.
When the design depends on the training part only (split conformal: the
calibration scores never reach the model), it is ordinary covariate shift
given the training part, and weighted split conformal (Tibshirani, Barber,
Candes and Ramdas, NeurIPS 2019, "Conformal prediction under covariate
shift", Cor. 1) is valid with ``w = dP_design / dP_cal``.

Weighted rule. Calibration scores ``s_i`` at ``X_i`` (i = 1..n), test point
``x``:

    p_i(x)     = w(X_i) / (sum_j w(X_j) + w(x))
    p_{n+1}(x) = w(x)   / (sum_j w(X_j) + w(x))
    q(x; a)    = Quantile_{1-a}( sum_i p_i(x) delta_{s_i} + p_{n+1}(x) delta_{+inf} )
    C(x; a)    = [lo(x) - V(x) q(x; a), hi(x) + V(x) q(x; a)]

With ``C_k`` the cumulative weight of the ``k+1`` smallest scores and ``W =
sum_j w(X_j) + w(x)`` the upper end uses the score of index ``k_hi = #{k : C_k
< (1-a) W}`` (``n``: ``+inf``). The lower end is the matching order statistic
of the lower points ``l_i = lo(x) - V(x) s_i`` under ``sum_i p_i delta_{l_i} +
p_{n+1} delta_{-inf}``: the largest ``l`` with ``P(L < l) <= a``, which is the
score of index ``#{m : T_m + w(x) > a W} - 1`` with ``T_m`` the weight of the
scores of index ``>= m`` (``n``: ``-inf``). With equal weights both reduce
exactly to the unweighted order statistics of ``conformal.Bounds``
(``ceil((1-a)(n+1))``-th and ``floor(a(n+1))``-th); as there, an index out of
range is an infinite bound, clamped to the extreme score for ranking.

ACI / DtACI read ``beta = sup{a : y in C(a)}``. Under the weighted rule

    beta = min( p_{n+1}(x) + sum_{l_i <= y} p_i(x),  1 - sum_{u_i < y} p_i(x) )

(the unweighted ``beta_from_points`` with counts replaced by masses), so the
adaptive alpha moves the weighted intervals exactly as it moves the plain ones.
A prediction stores each pair's sorted point sets with their aligned weights
and ``w(x)`` (``pack``), so adapt needs nothing else.

Weights. ``w`` is estimated by a probabilistic classifier (Tibshirani et al.,
sec. 2.3 and 4.3): logistic regression (L2, ``C = 1``) on the unit-cube
features and their squares (so the ratio can be a bump, not only a slope),
class 0 the calibration points, class 1 the design, which is the candidate
set weighted by ``softmax(z / DESIGN_TEMPERATURE)`` of the standardised
utility ``z`` of the raw (unconformalized) model's acquisition, the smooth
version of "the best candidates are picked". The classes get equal total
weight, so the odds are the density ratio. ``w`` is normalised to mean 1 over
the calibration points and clipped to ``WEIGHT_RANGE``: an estimated ratio is
noisy, and an unbounded ``w(x)`` makes every interval infinite once
``p_{n+1}(x) > a``.
"""

from __future__ import annotations

import warnings

import numpy as np

SHIFT_MODES = ("none", "fcs")
SPLIT_RULE = ("split", "jackknife", "crossval", "jab+")  # methods with one shown model and one score set
DESIGN_TEMPERATURE = 1.0  # softmax temperature on the standardised utility
WEIGHT_RANGE = (0.2, 5.0)  # clip of w after normalising it to mean 1 on the calibration points
L2_C = 1.0  # inverse L2 strength of the logistic regression


# --------------------------------------------------------------------- weights
def design_distribution(utility: np.ndarray, temperature: float = DESIGN_TEMPERATURE) -> np.ndarray:
    """Probabilities over candidates, ``softmax(z / temperature)`` of the standardised ``utility``."""
    u = np.asarray(utility, dtype=float)
    sd = float(np.std(u))
    if not np.isfinite(sd) or sd <= 0:
        return np.full(u.size, 1.0 / u.size)
    z = (u - float(np.mean(u))) / (sd * temperature)
    e = np.exp(z - z.max())
    return e / e.sum()


def _quadratic(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, X * X])


def density_ratio(X_cal: np.ndarray, X_design: np.ndarray, p_design: np.ndarray,
                  clip: tuple[float, float] = WEIGHT_RANGE) -> tuple[np.ndarray, np.ndarray]:
    """``w = dP_design / dP_cal`` at the calibration points and at the design points.

    Logistic regression separating ``X_cal`` (class 0, weight 1 each) from
    ``X_design`` (class 1, weights ``p_design`` scaled to the same total);
    ``w = exp(logit)``, normalised to mean 1 on ``X_cal`` and clipped.
    """
    from sklearn.linear_model import LogisticRegression

    n = X_cal.shape[0]
    F = _quadratic(np.vstack([X_cal, X_design]))
    label = np.r_[np.zeros(n), np.ones(X_design.shape[0])]
    sw = np.r_[np.ones(n), n * np.asarray(p_design, dtype=float) / float(np.sum(p_design))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = LogisticRegression(C=L2_C, max_iter=1000).fit(F, label, sample_weight=sw)
    logit = clf.decision_function(F)
    logit = logit - logit.max()  # exp without overflow; the scale cancels in the normalisation
    w = np.exp(logit)
    w = w / max(float(w[:n].mean()), 1e-300)
    w = np.clip(w, *clip)
    return w[:n], w[n:]


def fcs_weights(X_cal: np.ndarray, X_cand: np.ndarray, utility: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(calibration weights (n_cal,), candidate weights (N,)) for a snapshot."""
    return density_ratio(X_cal, X_cand, design_distribution(utility))


def snapshot_weights(mode: str, method: str, X: np.ndarray, cal_index: np.ndarray | None, X_cand: np.ndarray,
                     raw: np.ndarray, levels: np.ndarray, acquisition: str, best: float,
                     seed: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """What ``fit`` stores on a snapshot: FCS weights, or (None, None) when there are none.

    ``X`` (n, F): every observation's features, ``cal_index`` the ones the
    scores belong to; ``raw`` (N, L): the raw model's quantiles at ``X_cand``,
    whose acquisition (``acquisition``, lower is better, so utility ``-score``)
    is the design. CV+ has one model per fold (no single design) and raw no
    scores: they stay unweighted.
    """
    if mode != "fcs" or method not in SPLIT_RULE or cal_index is None or X_cand.shape[0] == 0:
        return None, None
    from . import acquisition as acq

    rng = np.random.default_rng([seed, 23])  # only the stochastic acquisitions draw
    utility = -acq.score(acquisition, raw, levels, best=best, rng=rng)
    return fcs_weights(X[cal_index], X_cand, utility)


# ---------------------------------------------------------------- the rule
class WeightedScores:
    """One pair's calibration scores, sorted, with their weights' cumulative sums."""

    def __init__(self, scores: np.ndarray, weights: np.ndarray) -> None:
        order = np.argsort(scores, kind="stable")
        self.sorted = scores[order]
        self.weights = weights[order]
        self.cum = np.cumsum(self.weights)  # C_k
        self.tail = np.r_[np.cumsum(self.weights[::-1])[::-1], 0.0]  # T_m, m = 0..n
        self._tail_up = self.tail[::-1]  # ascending, for searchsorted

    def indices(self, alpha: float, w_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unclamped score indices of the lower and upper ends, per test weight.

        Lower ``-1`` never happens for ``alpha < 1``; ``n`` at either end is an infinite bound.
        """
        n = self.sorted.size
        total = self.tail[0] + w_test
        hi = np.searchsorted(self.cum, (1.0 - alpha) * total, side="left")
        # #{m : T_m > a W - w(x)} over m = 0..n, T descending
        above = (n + 1) - np.searchsorted(self._tail_up, alpha * total - w_test, side="right")
        return above - 1, hi

    def clamped(self, alpha: float, w_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.indices(alpha, w_test)
        n = self.sorted.size
        return np.clip(lo, 0, n - 1), np.clip(hi, 0, n - 1)


def pack(lower: np.ndarray, upper: np.ndarray, weights: np.ndarray, w_test: float) -> tuple[np.ndarray, np.ndarray]:
    """Sorted lower / upper points of one pair with aligned weights and ``w(x)``: (2n+1,) each.

    ``lower[i]`` and ``upper[i]`` come from calibration score ``i``, of weight ``weights[i]``.
    """
    lo_order, hi_order = np.argsort(lower, kind="stable"), np.argsort(upper, kind="stable")
    return (np.r_[lower[lo_order], weights[lo_order], w_test],
            np.r_[upper[hi_order], weights[hi_order], w_test])


def unpack(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Inverse of one half of ``pack``: (sorted points, aligned weights, w(x))."""
    n = (packed.size - 1) // 2
    return packed[:n], packed[n : 2 * n], float(packed[-1])


def weighted_interval(lower_packed: np.ndarray, upper_packed: np.ndarray, alpha: float) -> tuple[float, float]:
    """Clamped ends at ``alpha`` from ``pack``'s arrays (the points ``WeightedScores`` indexes)."""
    lo, lo_w, w_test = unpack(np.asarray(lower_packed, dtype=float))
    hi, hi_w, _ = unpack(np.asarray(upper_packed, dtype=float))
    n = lo.size
    total = float(np.sum(lo_w)) + w_test
    # lower: the first point whose mass from below, w(x) included, exceeds a W; upper: cumulative >= (1-a) W
    k_lo = int(np.searchsorted(w_test + np.cumsum(lo_w), alpha * total, side="right"))
    k_hi = int(np.searchsorted(np.cumsum(hi_w), (1.0 - alpha) * total, side="left"))
    return float(lo[min(max(k_lo, 0), n - 1)]), float(hi[min(k_hi, n - 1)])


def weighted_beta(lower_packed: np.ndarray, upper_packed: np.ndarray, y: float) -> float:
    """``beta = sup{a : y in C(a)}`` under the weighted rule (see the module docstring)."""
    lo, lo_w, w_test = unpack(np.asarray(lower_packed, dtype=float))
    hi, hi_w, _ = unpack(np.asarray(upper_packed, dtype=float))
    total = float(lo_w.sum()) + w_test
    a_mass = w_test + float(lo_w[: int(np.searchsorted(lo, y, side="right"))].sum())
    b_mass = float(hi_w[: int(np.searchsorted(hi, y, side="left"))].sum())
    return float(min(a_mass / total, 1.0 - b_mass / total))
