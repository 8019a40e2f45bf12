"""Conformalized quantile regression: split CQR, CV+, and the adaptive schedule.

Level grid and pairs. A study has an even grid of quantile levels, sorted, that
is symmetric about 1/2 (by default the midpoints ``(i + 1/2) / M``). Level ``i``
and level ``M - 1 - i`` form an interval pair with nominal miscoverage
``alpha_i = 2 * levels[i]``.

Non-conformity scores (paper 002, eq. 5 and 9; eq. 17 for CV+):

    D_i = max(Q_lo(X_i) - Y_i, Y_i - Q_hi(X_i))

with ``Q`` fitted without observation ``i`` (split: on the training part;
CV+: on the folds that exclude ``i``).

Interval at miscoverage ``a`` over ``n`` scores (eq. 10 and 18). Both methods
are the same order statistics of two point sets, with ``lo_i(x) = Q_lo(x)`` for
split and ``lo_i(x) = Q_lo^{-k(i)}(x)`` for CV+ (Barber et al.'s CV+; the paper
writes ``q_{1-a}`` for both ends, the lower end is the matching lower
quantile):

    lower(x) = floor(a (n+1))-th smallest of { lo_i(x) - D_i }
    upper(x) = ceil((1-a)(n+1))-th smallest of { hi_i(x) + D_i }

For split this is ``Q_lo(x) - q`` and ``Q_hi(x) + q`` with ``q`` the
``ceil((1-a)(n+1))``-th smallest score. An order index outside ``1..n`` would
be an infinite bound; for ranking candidates it is clamped to the extreme
point (and shown so), while ``beta_from_points`` (what ACI / DtACI read) uses the exact rule.

Scaled scores. A surrogate whose uncertainty is a point estimate and a spread
``V(x)`` (``model.scaled``: ACHO's locally weighted estimators, the BANANAS
ensemble) has its scores divided by the spread at the calibration point,
``D_i / V(X_i)`` (ACHO eq. 17, BANANAS eq. 3.4), and its intervals widened by
the spread at the candidate: ``lo(x) - V(x) q`` and ``hi(x) + V(x) q`` (ACHO
eq. 18). With raw pairs ``mu +- V c`` this is exactly ``mu +- V q_{1-a}(|y -
mu| / V)``. Every other surrogate has ``V = 1``.

Two more ways to get calibration scores without holding data out (BANANAS-CP
thesis, section 3.2.2-3.2.3):

* ``crossval`` (CrossVal-CP, Alg. 4): K fold models, each scoring its held-out
  fold; the shown model is the average of the K fold models and the interval is
  split's rule over the n out-of-fold scores.
* ``jab+`` (Jackknife+-after-bootstrap, Alg. 5): B models on bootstrap
  resamples; observation ``i`` is scored by the average of the models whose
  resample left it out (points in every resample are not scored); the shown
  model is the average of all B and the interval is split's rule over those
  scores.

Shown intervals. ``Bounds.at`` sorts each candidate's calibrated quantiles
(the acquisitions need a monotone quantile function), which mixes pairs whose
ends cross, e.g. a narrow raw interval widened by a negative score quantile.
A prediction's interval for a pair is that pair's own conformal set at its
alpha (``pair_interval``), the set ``beta_t`` and so ACI / DtACI refer to; an
empty set (crossed ends) is shown as the zero-width interval at the midpoint
of its ends. Showing the sorted pairs instead made a study's intervals cover
far more than the adaptive state was told, most in crowds
(``benchmarks/calibration.py``, crowd rows).

Covariate shift. With ``shift="fcs"`` a split-rule snapshot carries weights
of its calibration points and candidates and the thresholds are weighted
quantiles, one per candidate (``engine.shift``).

Schedule (paper 002, section 5.1 and 6.3): raw quantiles below
``conformalize_from`` (32) observations, CV+ (K = 5) below ``split_from`` (50),
split conformal after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import KFold

from .shift import SPLIT_RULE, WeightedScores, pack, weighted_beta, weighted_interval
from .surrogates.base import BaseSurrogate

METHODS = ("raw", "split", "cv+", "crossval", "jab+")
# SPLIT_RULE (from shift): one shown model, lo(x) - V(x) q and hi(x) + V(x) q


def midpoint_levels(m: int) -> np.ndarray:
    """``m`` equal-mass quantile levels (bin midpoints); ``m`` must be even."""
    if m < 2 or m % 2:
        raise ValueError("the number of quantile levels must be even and >= 2")
    return (np.arange(m) + 0.5) / m


def check_levels(levels: np.ndarray) -> np.ndarray:
    lv = np.asarray(levels, dtype=float)
    if lv.ndim != 1 or lv.size < 2 or lv.size % 2:
        raise ValueError("levels must be an even-length list")
    if np.any(np.diff(lv) <= 0) or lv[0] <= 0 or lv[-1] >= 1:
        raise ValueError("levels must be strictly increasing inside (0, 1)")
    if not np.allclose(lv + lv[::-1], 1.0):
        raise ValueError("levels must be symmetric about 0.5")
    return lv


def pair_alphas(levels: np.ndarray) -> np.ndarray:
    """Nominal miscoverage of each pair ``(i, M-1-i)``, widest interval first."""
    lv = np.asarray(levels)
    return 2.0 * lv[: lv.size // 2]


def schedule(n: int, conformalize_from: int = 32, split_from: int = 50, mode: str = "adaptive",
             early: str = "cv+") -> str:
    """Which conformal method a fit on ``n`` observations uses (``early``, ``EngineConfig.early_scores``:
    the adaptive schedule's scores below ``split_from``, ``cv+`` or ``loo``, the jackknife)."""
    if mode == "raw" or n < conformalize_from:
        return "raw"
    if mode in METHODS:
        return mode
    if mode != "adaptive":
        raise ValueError(f"unknown conformal mode {mode!r}")
    if n >= split_from:
        return "split"
    return "jackknife" if early == "loo" else "cv+"


def scores(q: np.ndarray, y: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """Non-conformity scores, one column per pair: ``q`` is (n, L) at the points ``y``.

    ``scale`` (n,): the model's spread at those points; the scores are divided by it.
    """
    L = q.shape[1]
    lo = q[:, : L // 2]
    hi = q[:, L - 1 : L // 2 - 1 : -1]
    d = np.maximum(lo - y[:, None], y[:, None] - hi)
    return d if scale is None else d / scale[:, None]


def _outer_width(q: np.ndarray) -> np.ndarray:
    """(n,) width of the widest interval pair of quantile rows ``q`` (n, L): a model's spread there."""
    return q[:, -1] - q[:, 0]


def model_scores(model: BaseSurrogate, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``scores`` of a fitted model at ``(X, y)``, normalised when the model is scaled."""
    return scores(model.predict_quantiles(X), y, model.predict_scale(X) if model.scaled else None)


class Average:
    """The mean of fitted members' quantiles (and spreads): CrossVal-CP's and JaB+'s shown model."""

    def __init__(self, members: list[BaseSurrogate]) -> None:
        self.members = members
        self.levels = members[0].levels
        self.scaled = members[0].scaled
        self.ran_on = members[0].ran_on
        self.fitted = True

    def predict_quantiles(self, X: np.ndarray) -> np.ndarray:
        return np.sort(np.mean([m.predict_quantiles(X) for m in self.members], axis=0), axis=1)

    def predict_scale(self, X: np.ndarray) -> np.ndarray:
        return np.mean([m.predict_scale(X) for m in self.members], axis=0)

    def predict_signal_fraction(self, X: np.ndarray) -> np.ndarray:
        return np.mean([m.predict_signal_fraction(X) for m in self.members], axis=0)

    def predict_quantiles_and_signal(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pairs = [m.predict_quantiles_and_signal(X) for m in self.members]  # each member once
        return (np.sort(np.mean([q for q, _ in pairs], axis=0), axis=1),
                np.mean([f for _, f in pairs], axis=0))


@dataclass
class ConformalFit:
    """What ``conformalize`` produced: the model(s) and the calibration scores."""

    method: str
    model: BaseSurrogate | Average  # predicts the raw quantiles shown for a candidate
    scores: np.ndarray | None  # (n_cal, P)
    fold_models: list[BaseSurrogate] | None = None  # CV+ only
    fold_of: np.ndarray | None = None  # (n_cal,) fold index of each score, CV+ only
    cal_index: np.ndarray | None = None  # (n_cal,) which observation each score belongs to
    scored_model: BaseSurrogate | None = None  # split with refit: the split model the scores came from

    def transport(self, X: np.ndarray, shown: np.ndarray | None = None) -> np.ndarray | None:
        """Split with refit, quantile scores (``split_scores="transported"``): at rows ``X``, the shown
        model's spread over the scored split model's (the widths of their widest pairs; ``shown``:
        the shown model's quantiles there, when already predicted); ``None`` otherwise."""
        if self.scored_model is None or self.scaled or X.shape[0] == 0:
            return None
        shown_w = _outer_width(self.model.predict_quantiles(X) if shown is None else shown)
        scored_w = _outer_width(self.scored_model.predict_quantiles(X))
        return shown_w / np.maximum(scored_w, 1e-12 * (1.0 + np.abs(scored_w).max()))

    @property
    def scaled(self) -> bool:
        return bool(self.model.scaled) and self.method != "raw"


def conformalize(
    make: Callable[[], BaseSurrogate],
    X: np.ndarray,
    y: np.ndarray,
    method: str,
    seed: int,
    *,
    k_folds: int = 5,
    cal_fraction: float = 0.25,
    n_bootstraps: int = 20,
    refit: bool = False,
    split_scores: str = "held-out",
) -> ConformalFit:
    """Fit the surrogate(s) and the calibration scores of ``method``.

    ``refit`` (split only, and only for surrogates whose refit is the same model conditioned on more
    points: ``conditions_on_refit``, the GP): the shown model is the split model's fold clone (the
    same hyperparameters) conditioned on every observation, and the calibration scores stay the
    split model's held-out ones. The split's finite-sample guarantee is then approximate (the
    posterior on more points is a little narrower where the calibration points lie), but the
    acquisition no longer works on a model that never saw a quarter of the observations, the best
    among them possibly; the adaptive layer (ACI / DtACI) keeps the long-run coverage. A surrogate
    refitted from scratch (boosting, forests, networks) would be another model than the one scored,
    and under-covers (measured: LW-GBM's 90% intervals covered 81%), so it keeps the split model.

    ``split_scores`` (with ``refit``; ``EngineConfig.split_scores``): ``"held-out"`` adds the split
    model's held-out scores to the refit as they are; ``"loo"`` and ``"transported"`` as follows.

    ``"loo"`` (for a surrogate with an exact leave-one-out form, ``loo_quantiles``: the
    GP's scikit-learn backend): no split; the shown model is tuned and conditioned on every
    observation, and every observation is scored by that model's leave-one-out prediction (its
    kernel, conditioned on the other n - 1 points), so the scores come from the model that is shown
    (the jackknife; ACI / DtACI keep the long-run coverage). Held-out scores of a model on
    fewer points are wider than the shown model's intervals where the search has converged, and a
    negative correction then empties the narrow sets there (``benchmarks/collapsed_intervals.py``).

    ``"transported"``: the held-out scores stay, and the fit keeps the split model
    (``scored_model``) so that each candidate's correction can be carried over to the shown model
    in the split model's units: multiplied by the ratio of the shown model's spread to the split
    model's at the candidate (``ConformalFit.transport``). Where the refit changed nothing the
    ratio is 1 and the interval is split's; where the refit saw points the split held out, it is
    narrower and so is the correction, so the set is empty only where the split model's own set
    would be.

    ``method="jackknife"`` (the adaptive schedule below the split, ``early_scores="loo"``): the shown
    model and its scores as with ``"loo"``, whatever ``refit``; a surrogate without the closed form
    gets CV+.
    """
    if method == "raw":
        return ConformalFit("raw", make().fit(X, y), None)
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    if method == "jackknife" or (method == "split" and refit and split_scores == "loo"):
        full = make()
        if full.has_loo(n):  # asked first: a fit without the closed form would be thrown away
            q, scale = full.fit(X, y).loo_quantiles()  # every observation scored by the shown model without it
            return ConformalFit(method, full, scores(q, y, scale), cal_index=np.arange(n))
        if method == "jackknife":  # no closed form: the schedule's CV+ (split keeps its held-out scores)
            method = "cv+"
    if method == "split":
        perm = rng.permutation(n)
        n_cal = max(2, int(round(cal_fraction * n)))
        cal, tr = perm[:n_cal], perm[n_cal:]
        model = make().fit(X[tr], y[tr])
        sc = model_scores(model, X[cal], y[cal])
        scored = None
        if refit and getattr(model, "conditions_on_refit", False):
            scored, model = model, model.fold_clone().fit(X, y)
        return ConformalFit("split", model, sc, cal_index=cal,
                            scored_model=scored if split_scores == "transported" else None)
    if method in ("cv+", "crossval"):
        full = make().fit(X, y)  # tunes the hyperparameters the folds reuse
        k = min(k_folds, n)
        fold_of = np.empty(n, dtype=int)
        fold_models, sc = [], np.empty((n, full.levels.size // 2))
        for f, (tr, te) in enumerate(KFold(k, shuffle=True, random_state=seed).split(X)):
            m = full.fold_clone().fit(X[tr], y[tr])
            fold_models.append(m)
            fold_of[te] = f
            sc[te] = model_scores(m, X[te], y[te])
        if method == "crossval":
            return ConformalFit("crossval", Average(fold_models), sc, cal_index=np.arange(n))
        return ConformalFit("cv+", full, sc, fold_models, fold_of, np.arange(n))
    if method == "jab+":
        return _jackknife_after_bootstrap(make, X, y, rng, n_bootstraps)
    raise ValueError(f"unknown conformal method {method!r}")


def _jackknife_after_bootstrap(make: Callable[[], BaseSurrogate], X: np.ndarray, y: np.ndarray,
                               rng: np.random.Generator, B: int) -> ConformalFit:
    """Thesis Alg. 5: B bootstrap models; each point scored by the mean of those that left it out."""
    n = X.shape[0]
    proto = make().fit(X, y)  # tunes the hyperparameters the bootstrap models reuse
    members, q_sum, s_sum = [], 0.0, 0.0
    left_out = np.zeros((B, n), dtype=bool)
    for b in range(B):
        idx = rng.integers(0, n, n)
        if np.unique(idx).size < 2:  # a resample of one distinct point cannot be fitted
            idx[: 2] = rng.permutation(n)[:2]
        left_out[b] = ~np.isin(np.arange(n), idx)
        m = proto.fold_clone().fit(X[idx], y[idx])
        members.append(m)
        out = left_out[b]
        if out.any():  # only the points this model never saw are predicted
            q = np.zeros((n, proto.levels.size))
            q[out] = m.predict_quantiles(X[out])
            q_sum = q_sum + q
            if proto.scaled:
                v = np.zeros(n)
                v[out] = m.predict_scale(X[out])
                s_sum = s_sum + v
    count = left_out.sum(axis=0)
    scored = count > 0  # points in every resample have no leave-out estimate and are not scored
    if scored.sum() < 2:
        return ConformalFit("raw", Average(members), None)
    c = count[scored][:, None]
    q_loo = np.sort(np.asarray(q_sum)[scored] / c, axis=1)
    scale = np.asarray(s_sum)[scored] / c[:, 0] if proto.scaled else None
    return ConformalFit("jab+", Average(members), scores(q_loo, y[scored], scale),
                        cal_index=np.flatnonzero(scored))


# ----------------------------------------------------------------- intervals
def _order_index(alpha: np.ndarray | float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """0-based clamped indices of the lower and upper order statistics."""
    a = np.asarray(alpha, dtype=float)
    lo = np.floor(a * (n + 1)).astype(int) - 1
    hi = np.ceil((1.0 - a) * (n + 1)).astype(int) - 1
    return np.clip(lo, 0, n - 1), np.clip(hi, 0, n - 1)


class Bounds:
    """Sorted point sets per candidate and pair; intervals at any alpha by indexing.

    ``raw`` is (N, L) raw quantiles; for CV+ ``fold_raw`` is (K, N, L). For a
    scaled surrogate ``scale`` (N,) (and, for CV+, ``fold_scale`` (K, N)) is
    its spread at each candidate, which multiplies the (normalised) scores; with
    ``split_scores="transported"`` it is the shown model's spread over the scored
    split model's (``ConformalFit.transport``). The sort is done once (lazily)
    and reused by every select at any alpha.

    ``cal_weight`` (n_cal,) and ``cand_weight`` (N,), for the split rule only:
    covariate-shift weights of the calibration points and of each candidate
    (``engine.shift``); the thresholds are then the weighted quantiles, one per
    candidate (scores sorted once, cumulative weights, a searchsorted per
    candidate). Other methods ignore them.
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
        cal_weight: np.ndarray | None = None,
        cand_weight: np.ndarray | None = None,
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
        self._sorted: list[tuple[np.ndarray, np.ndarray]] | None = None
        self.weighted = method in SPLIT_RULE and cal_weight is not None and cand_weight is not None
        self.cal_weight, self.cand_weight = (cal_weight, cand_weight) if self.weighted else (None, None)
        if self.weighted:
            self._weighted = [WeightedScores(scores[:, j], cal_weight) for j in range(self.P)]
        elif method in SPLIT_RULE:
            self._sorted_scores = np.sort(scores, axis=0)  # (n, P)

    def _points(self, j: int, rows: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """Unsorted lower/upper point sets (N, n) for pair ``j``."""
        L = self.raw.shape[1]
        D = self.scores[:, j]
        if self.method in SPLIT_RULE:
            lo, hi = self.raw[rows, j], self.raw[rows, L - 1 - j]
            w = D[None, :] if self.scale is None else self.scale[rows][:, None] * D[None, :]
            return lo[:, None] - w, hi[:, None] + w
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
        """What a prediction stores for adapt: (2, P, n) sorted point sets, or with weights
        (2, P, 2n+1): each pair's sorted points, their aligned weights and ``w(x)`` (``shift.pack``)."""
        if not self.weighted:
            lows, highs = self.points(row)
            return np.stack([np.stack(lows), np.stack(highs)])
        w_test = float(self.cand_weight[row])
        pairs = [pack(*(p[0] for p in self._points(j, np.array([row]))), self.cal_weight, w_test)
                 for j in range(self.P)]
        return np.stack([np.stack([lo for lo, _ in pairs]), np.stack([hi for _, hi in pairs])])

    def _split_ends(self, j: int, alpha: float) -> tuple[np.ndarray, np.ndarray | int, np.ndarray | int]:
        """Sorted scores of pair ``j`` and the indices (per candidate if weighted) of both ends."""
        if self.weighted:
            ws = self._weighted[j]
            return (ws.sorted, *ws.clamped(alpha, self.cand_weight))
        n = self.scores.shape[0]
        i_lo, i_hi = _order_index(alpha, n)
        # floor(a(n+1))-th smallest of lo - V D == lo - V (n+1-that)-th smallest D
        return self._sorted_scores[:, j], n - 1 - i_lo, i_hi

    def at(self, alphas: np.ndarray) -> np.ndarray:
        """Calibrated quantiles (N, L) at per-pair miscoverage ``alphas``; sorted per row."""
        if self.method == "raw":
            return self.raw
        N, L = self.raw.shape
        out = np.empty((N, L))
        n = self.scores.shape[0]
        v = 1.0 if self.scale is None else self.scale
        for j in range(self.P):
            if self.method in SPLIT_RULE:
                s, k_lo, k_hi = self._split_ends(j, alphas[j])
                out[:, j] = self.raw[:, j] - v * s[k_lo]
                out[:, L - 1 - j] = self.raw[:, L - 1 - j] + v * s[k_hi]
            else:
                i_lo, i_hi = _order_index(alphas[j], n)
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


def pair_interval(lower: np.ndarray, upper: np.ndarray, alpha: float, weighted: bool = False) -> tuple[float, float]:
    """One pair's interval at ``alpha`` from a prediction's stored point sets (``Bounds.packed``).

    Clamped ends, as ``Bounds.at``. Where the ends cross the conformal set is
    empty (no ``y`` has ``alpha < beta``): it is shown as the zero-width
    interval at the midpoint of the crossed ends.
    """
    lo, hi = weighted_interval(lower, upper, alpha) if weighted else interval_from_points(lower, upper, alpha)
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
    if np.all(np.diff(ends) >= 0):
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


def pair_intervals(points: np.ndarray, alphas: np.ndarray, weighted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Every pair's shown interval from a prediction's stored point sets ``(2, P, n)`` at ``alphas``:
    each pair's own conformal set (``pair_interval``), then ``nested``."""
    ends = [pair_interval(points[0, j], points[1, j], float(a), weighted) for j, a in enumerate(alphas)]
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


def beta_of(lower: np.ndarray, upper: np.ndarray, y: float, weighted: bool = False) -> float:
    """``beta_t`` from one pair of a prediction's stored point sets (``Bounds.packed``)."""
    return weighted_beta(lower, upper, y) if weighted else beta_from_points(lower, upper, y)


def beta_from_points(lower_pts: np.ndarray, upper_pts: np.ndarray, y: float) -> float:
    """``beta_t = sup{a : y in C(a)}`` (paper 002, eq. 20) with the exact order rule.

    ``y`` lies in ``C(a)`` iff ``a < beta``: with ``a_ = #{lower <= y}`` and
    ``b_ = #{upper < y}``, the lower end holds iff ``a < (a_+1)/(n+1)`` and the
    upper end iff ``a < 1 - b_/(n+1)``.
    """
    n = len(lower_pts)
    a_cnt = int(np.searchsorted(lower_pts, y, side="right"))
    b_cnt = int(np.searchsorted(upper_pts, y, side="left"))
    return float(min((a_cnt + 1) / (n + 1), 1.0 - b_cnt / (n + 1)))

