"""Calibration scores: the surrogate fits and non-conformity scores of each conformal method.

Non-conformity scores (paper 002, eq. 5 and 9; eq. 17 for CV+):

    D_i = max(Q_lo(X_i) - Y_i, Y_i - Q_hi(X_i))

with ``Q`` fitted without observation ``i`` (split: on the training part; CV+: on the folds that
exclude ``i``).

Scaled scores. A surrogate whose uncertainty is a point estimate and a spread ``V(x)``
(``model.scaled``: ACHO's locally weighted estimators, the BANANAS ensemble) has its scores divided
by the spread at the calibration point, ``D_i / V(X_i)`` (ACHO eq. 17, BANANAS eq. 3.4), and its
intervals widened by the spread at the candidate (``bounds``). Every other surrogate has ``V = 1``.

Two more ways to get calibration scores without holding data out (BANANAS-CP thesis, section
3.2.2-3.2.3):

* ``crossval`` (CrossVal-CP, Alg. 4): K fold models, each scoring its held-out fold; the shown model
  is the average of the K fold models and the interval is split's rule over the n out-of-fold scores.
* ``jab+`` (Jackknife+-after-bootstrap, Alg. 5): B models on bootstrap resamples; observation ``i``
  is scored by the average of the models whose resample left it out (points in every resample are
  not scored); the shown model is the average of all B and the interval is split's rule over those
  scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.stats import spearmanr
from sklearn.model_selection import KFold

from ..acquisition import median
from ..surrogates.base import BaseSurrogate


def scores(q: np.ndarray, y: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """Non-conformity scores, one column per pair: ``q`` is (n, L) at the points ``y``.

    ``scale`` (n,): the model's spread at those points; the scores are divided by it.
    """
    L = q.shape[1]
    lo = q[:, : L // 2]
    hi = q[:, L - 1 : L // 2 - 1 : -1]
    d: NDArray[np.float64] = np.maximum(lo - y[:, None], y[:, None] - hi)
    return d if scale is None else d / scale[:, None]


def _outer_width(q: np.ndarray) -> np.ndarray:
    """(n,) width of the widest interval pair of quantile rows ``q`` (n, L): a model's spread there."""
    w: NDArray[np.float64] = q[:, -1] - q[:, 0]
    return w


def spread_ratio(shown: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """(n,) the shown model's spread over the scored model's at the same rows (their quantiles
    ``shown``, ``scored``): the split correction carried to the shown model (``ConformalFit.transport``)."""
    shown_w, scored_w = _outer_width(shown), _outer_width(scored)
    ratio: NDArray[np.float64] = shown_w / np.maximum(scored_w, 1e-12 * (1.0 + np.abs(scored_w).max()))
    return ratio


def model_scores(model: BaseSurrogate, X: np.ndarray, y: np.ndarray, q: np.ndarray | None = None) -> np.ndarray:
    """``scores`` of a fitted model at ``(X, y)``, normalised when the model is scaled (``q``: its
    quantiles at ``X``, when the caller has them already)."""
    q = model.predict_quantiles(X) if q is None else q
    return scores(q, y, model.predict_scale(X) if model.scaled else None)


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
        scale: NDArray[np.float64] = np.mean([m.predict_scale(X) for m in self.members], axis=0)
        return scale

    def predict_signal_fraction(self, X: np.ndarray) -> np.ndarray:
        frac: NDArray[np.float64] = np.mean([m.predict_signal_fraction(X) for m in self.members], axis=0)
        return frac

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
    scored_model: BaseSurrogate | None = None  # split of a refitted GP: the split model the scores came from
    oof: np.ndarray | None = None  # CV+ / CrossVal-CP: each observation's out-of-fold median (``rank_p``)

    def rank_p(self, y: np.ndarray) -> float | None:
        """Whether the surrogate ranks results it has not seen: the one-sided p-value of the
        Spearman correlation between each observation and its out-of-fold median (predicted by the
        fold models that never saw it) being above 0. Small: the model orders held-out results
        better than chance, so its suggestions carry information. 1 where the values or the
        predictions are all equal; ``None`` without fold models (raw, split, JaB+)."""
        if self.oof is None:
            return None
        med = self.oof
        if np.ptp(y) <= 0.0 or np.ptp(med) <= 0.0:
            return 1.0
        p = spearmanr(med, y, alternative="greater").pvalue
        return float(p) if np.isfinite(p) else 1.0

    def transport(self, X: np.ndarray, shown: np.ndarray | None = None) -> np.ndarray | None:
        """Split of a refitted model, quantile scores: at rows ``X``, the shown model's spread over
        the scored split model's (the widths of their widest pairs; ``shown``: the shown model's
        quantiles there, when already predicted); ``None`` otherwise."""
        if self.scored_model is None or self.scaled or X.shape[0] == 0:
            return None
        return spread_ratio(self.model.predict_quantiles(X) if shown is None else shown,
                            self.scored_model.predict_quantiles(X))

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
) -> ConformalFit:
    """Fit the surrogate(s) and the calibration scores of ``method`` (``METHODS``).

    Split refits a surrogate whose refit is the same model conditioned on more points
    (``conditions_on_refit``, the GP): the shown model is the split model's fold clone (the same
    hyperparameters) conditioned on every observation, and the calibration scores stay the split
    model's held-out ones. The acquisition then works on a model that saw every observation, the
    best among them possibly, not on one that never saw a quarter of them; the adaptive layer
    (ACI / DtACI) keeps the long-run coverage. The fit keeps the split model (``scored_model``) so
    that each candidate's correction is carried over to the shown model in the split model's units:
    multiplied by the ratio of the shown model's spread to the split model's at the candidate
    (``ConformalFit.transport``). Where the refit changed nothing the ratio is 1 and the interval is
    split's; where the refit saw points the split held out, it is narrower and so is the
    correction, so a set is empty only where the split model's own set would be (held-out scores of
    a model on fewer points added as they are to the refit's narrower intervals empty the narrow
    sets where the search has converged: ``benchmarks/collapsed_intervals.py``). A surrogate
    refitted from scratch (boosting, forests, networks) would be another model than the one scored,
    and under-covers (measured: LW-GBM's 90% intervals covered 81%), so it keeps the split model.
    """
    if method == "raw":
        return ConformalFit("raw", make().fit(X, y), None)
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    if method == "split":
        perm = rng.permutation(n)
        n_cal = max(2, int(round(cal_fraction * n)))
        cal, tr = perm[:n_cal], perm[n_cal:]
        model = make().fit(X[tr], y[tr])
        sc = model_scores(model, X[cal], y[cal])
        scored = None
        if getattr(model, "conditions_on_refit", False):
            scored, model = model, model.fold_clone().fit(X, y)
        return ConformalFit("split", model, sc, cal_index=cal, scored_model=scored)
    if method in ("cv+", "crossval"):
        full = make().fit(X, y)  # tunes the hyperparameters the folds reuse
        k = min(k_folds, n)
        fold_of = np.empty(n, dtype=int)
        fold_models = []
        for f, (tr, te) in enumerate(KFold(k, shuffle=True, random_state=seed).split(X)):
            fold_models.append(full.fold_clone().fit(X[tr], y[tr]))
            fold_of[te] = f
        sc, med = fold_scores(fold_models, fold_of, X, y)
        if method == "crossval":
            return ConformalFit("crossval", Average(fold_models), sc, cal_index=np.arange(n), oof=med)
        return ConformalFit("cv+", full, sc, fold_models, fold_of, np.arange(n), oof=med)
    if method == "jab+":
        return _jackknife_after_bootstrap(make, X, y, rng, n_bootstraps)
    raise ValueError(f"unknown conformal method {method!r}")


def fold_scores(models: Sequence[BaseSurrogate], fold_of: np.ndarray, X: np.ndarray,
                y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every observation's scores (n, P) and out-of-fold median (n,), each by the fold model that
    never saw it (``models[fold_of[i]]``): CV+'s and CrossVal-CP's calibration (eq. 17)."""
    n = X.shape[0]
    sc, med = np.empty((n, models[0].levels.size // 2)), np.empty(n)
    for f, m in enumerate(models):
        te = np.flatnonzero(fold_of == f)
        if te.size:
            q = m.predict_quantiles(X[te])
            sc[te] = model_scores(m, X[te], y[te], q)
            med[te] = median(q)
    return sc, med


def _jackknife_after_bootstrap(make: Callable[[], BaseSurrogate], X: np.ndarray, y: np.ndarray,
                               rng: np.random.Generator, B: int) -> ConformalFit:
    """Thesis Alg. 5: B bootstrap models; each point scored by the mean of those that left it out."""
    n: int = X.shape[0]
    proto = make().fit(X, y)  # tunes the hyperparameters the bootstrap models reuse
    q_sum: float | NDArray[np.float64]  # summed left-out predictions, once any point is left out
    s_sum: float | NDArray[np.float64]
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
