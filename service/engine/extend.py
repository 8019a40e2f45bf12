"""Extend: a snapshot brought up to date with a few more observations, at its own candidates.

A fit (``engine.fit``) draws a fresh candidate set, searches the acquisition locally and computes
the GP posterior at every candidate: O(N n^2) for N candidates and n observations, most of a fit
from a few hundred observations on. One more observation changes the posterior little, and the
previous snapshot already holds the posterior's variance at its candidates. An *extend* (the
snapshot's ``meta.fit.kind`` is ``"extend"``) keeps the previous snapshot's candidates and updates
it for the new observations:

* the GP keeps the hyperparameters of the newest full refit (``engine.retune``), exactly as an
  update does; the models are conditioned on every observation with them, and the output warp is
  fitted to the values again;
* at the candidates, the mean is the new posterior's and the variance is the previous one less what
  the new observations explain (``QGP.extended_moments``): O(N n k) for k new observations;
* the calibration follows the snapshot's conformal method by the same code as a fit's
  (``conformal.model_scores``, ``conformal.fold_scores``): ``raw`` has no scores; ``split`` keeps its
  training rows, so the split model is the one a fit with that split would train (refitted on the
  warped values), the new observations join the calibration rows, and every calibration row is
  scored again. The split model's variance at the candidates is unchanged (it saw the same inputs),
  so the correction carried to the shown model (``conformal.spread_ratio``) is the fit's rule too.
  ``cv+`` keeps its folds and puts each new observation in the smallest one (the first of equals):
  every fold model is conditioned on the observations outside its fold, its quantiles at the
  candidates are extended like the shown model's, and every observation is scored again by the fold
  model that never saw it.

An extend is therefore exactly the snapshot a fit with the same hyperparameters, split and candidate
set would make (``tests/test_extend.py`` holds that). What it does not do is draw new candidates
or search the acquisition locally, so a fit draws them again (``plan`` says when):

* after ``EXTENDS`` observations since the candidates were drawn (``meta.carry["drawn_at"]``), and
  sooner in a small study: once the observations grew by ``EXTEND_GROWTH`` (a sixteenth) since the
  draw. Below 16 observations every fit draws; from 64 on, every fifth. Early on one observation
  moves the acquisition's optima far, and a fit costs little: four extends at every size left
  Ackley-5 runs on its plateau; with the growth rule the worst of 20 held-out seeds reached 5.05
  at 100 trials (6.09 with fits only; ``benchmarks/results/search_extend_heldout.json``);
* when a new observation improves on the best one: the search should look around the new best;
* when a full refit or an update is due for any other reason (``retune.plan``: the data grew or
  moved, the conformal method changed), or the study is one an extend does not cover: several
  objectives, constraints, failures learned from, CrossVal-CP or JaB+, another surrogate than
  ``qgp`` on scikit-learn's backend, a running configuration missing from the candidates, or
  observations that are not the previous snapshot's plus new ones.

Like ``retune.plan``, the choice is a function of the study's tells, so every home (the service's fit
jobs, the ``Optimizer``, ``CaliboSampler``) makes the same snapshots and suggestions from a seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from . import crowd
from .config import EngineConfig
from .conformal import ConformalFit, fold_scores, model_scores, schedule, spread_ratio
from .incumbent import improvable, incumbent
from .retune import Tuned, plan, warp_moved
from .snapshot import FitKind, Snapshot, SnapshotMeta, as_stored
from .space import SearchSpace
from .surrogates import make_surrogate
from .surrogates.base import BaseSurrogate
from .surrogates.qgp import QGP
from .warp import fit_warp

EXTENDS = 4  # observations an extend may add to a snapshot's candidates before a fit draws them again
EXTEND_GROWTH = 1 / 16  # ... and at most this share of the observations the candidates were drawn for
METHODS = ("raw", "split", "cv+")  # the conformal methods an extend keeps


def _exact(model: Any) -> bool:
    """Whether ``model`` is a scikit-learn GP with the default kernel (``QGP.extended_moments``)."""
    return isinstance(model, QGP) and model.backend_ == "sklearn" and model._posterior is not None


def carry(cf: ConformalFit, Xc: np.ndarray, n: int) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """What a fit's snapshot carries for an extend: its ``meta.carry`` (``drawn_at``, and ``train``
    for split) and its ``gp_*`` arrays (each GP's ``standard_sd`` at the candidates ``Xc``); None
    for a method or models an extend does not keep."""
    models = [cf.model, *([cf.scored_model] if cf.method == "split" else []), *(cf.fold_models or [])]
    if cf.method not in METHODS or not all(_exact(m) for m in models):
        return None
    meta: dict[str, Any] = {"drawn_at": n}
    arrays = {"gp_sd": cast(QGP, cf.model).standard_sd(Xc)}
    if cf.method == "split":
        assert cf.cal_index is not None
        meta["train"] = [int(i) for i in np.setdiff1d(np.arange(n), cf.cal_index)]
        arrays["gp_scored_sd"] = cast(QGP, cf.scored_model).standard_sd(Xc)
    elif cf.method == "cv+":
        arrays["gp_fold_sd"] = np.stack([cast(QGP, m).standard_sd(Xc) for m in cf.fold_models or []])
    return meta, arrays


def _order(previous: np.ndarray, now: np.ndarray) -> np.ndarray | None:
    """Indices of ``now``'s rows: first one per row of ``previous`` (in its order), then the rest in
    their own order; None when a row of ``previous`` is not among ``now``'s."""
    where: dict[bytes, list[int]] = {}
    for i, k in enumerate(SearchSpace.keys(now)):
        where.setdefault(k, []).append(i)
    first = []
    for k in SearchSpace.keys(previous):
        rows = where.get(k)
        if not rows:
            return None
        first.append(rows.pop(0))
    taken = set(first)
    return np.array(first + [i for i in range(now.shape[0]) if i not in taken], dtype=int)


def extend(previous: Snapshot | None, observations: Sequence[tuple[dict[str, Any], Any]], space: SearchSpace,
           config: EngineConfig, direction: str, seed: int, device: str, pending: Sequence[dict[str, Any]],
           tuned: Tuned | None) -> Snapshot | None:
    """``previous`` extended with the observations it lacks (see the module docstring), or None
    where a fit is due. ``observations`` are all of them; the rest as ``fit``'s arguments."""
    t0 = time.perf_counter()
    c = previous.meta.carry if previous is not None else None
    if previous is None or c is None or previous.gp_sd is None or config.surrogate != "qgp":
        return None
    n, n_prev = len(observations), previous.n_obs
    drawn_at = int(c["drawn_at"])
    if not 0 < n - n_prev or n - drawn_at > min(EXTENDS, drawn_at * EXTEND_GROWTH):
        return None
    method = schedule(n, config.conformalize_from, config.split_from, config.conformal)
    if method != previous.method or method not in METHODS or (method == "split") != ("train" in c):
        return None
    if tuned is None or Tuned.of(previous.meta) != tuned:
        return None
    U = space.to_unit([p for p, _ in observations])
    order = _order(previous.observed, U)
    if order is None:
        return None
    U = U[order]
    sign = -1.0 if direction == "maximize" else 1.0
    V = sign * np.asarray([float(observations[i][1]) for i in order])
    if V[n_prev:].min() < V[:n_prev].min():
        return None  # a new best: draw candidates about it
    warp = fit_warp(config.warp, V)
    X, y = space.features(U), warp.forward(V)
    kept, why = plan(tuned, config.surrogate, config.surrogate_options, n, method, 1, X.shape[1])
    if kept is None or warp_moved(kept, [warp], [V]) is not None:
        return None
    cand = previous.candidates
    if pending:
        have = set(previous.candidate_keys())
        if any(k not in have for k in SearchSpace.keys(space.to_unit(list(pending)))):
            return None
    levels = config.level_grid
    fit_seed = int(np.random.default_rng([seed, n, 7]).integers(2**31))

    def make() -> QGP:
        model = make_surrogate("qgp", levels, fit_seed, device=device, **config.surrogate_options,
                               hyper=kept.hyper[0])
        assert isinstance(model, QGP)
        return model

    shown = make()
    if shown.choose_backend(n) != "sklearn":
        return None
    shown.fit(X, y)
    Xc = space.features(cand)
    mean, sd = shown.extended_moments(Xc, previous.gp_sd, n_prev)
    raw, signal = shown.predict_from_moments(mean, sd)
    parts = _calibration(method, previous, shown, make, X, y, Xc, raw, sd, n_prev)
    if parts is None:
        return None
    raw = as_stored(raw)
    best = improvable(incumbent(y, np.ones(n, dtype=bool)), V, np.ones(n, dtype=bool), warp)
    meta = SnapshotMeta(device="cpu", crowd=crowd.fit_info(shown, cand, raw), tuned=kept.to_dict(),
                        fit=FitKind("extend", f"{n - n_prev} observation(s) added to the candidates of "
                                              f"the fit on {c['drawn_at']}; {why}"),
                        warp=None if warp.identity else warp.to_dict(), carry=dict(c))
    meta.rank_p = parts.pop("rank_p", None)
    return Snapshot(
        n_obs=n, method=method, levels=levels, candidates=cand, raw=raw, best=best, observed=U,
        signal=as_stored(signal), surrogate=config.surrogate, fit_seconds=time.perf_counter() - t0,
        meta=meta, gp_sd=sd, **parts,
    )


def _calibration(method: str, previous: Snapshot, shown: QGP, make: Callable[[], QGP], X: np.ndarray,
                 y: np.ndarray, Xc: np.ndarray, raw: np.ndarray, sd: np.ndarray,
                 n_prev: int) -> dict[str, Any] | None:
    """The snapshot's calibration fields for ``method``, by the rules a fit follows (module
    docstring), over the observations ``X, y`` (the previous snapshot's ``n_prev`` first)."""
    n = X.shape[0]
    if method == "raw":
        return {}
    if method == "split":
        train = np.asarray((previous.meta.carry or {})["train"], dtype=int)
        cal = np.setdiff1d(np.arange(n), train)
        scored = make().fit(X[train], y[train])
        out: dict[str, Any] = {"scores": model_scores(scored, X[cal], y[cal]),
                               "gp_scored_sd": previous.gp_scored_sd}
        if shown.scaled:
            out["scale"] = as_stored(shown.target_spread(sd))
        elif previous.gp_scored_sd is not None:  # the split model's spread: its sd there, any mean
            at = scored.predict_from_moments(np.zeros(Xc.shape[0]), previous.gp_scored_sd)[0]
            out["scale"] = as_stored(spread_ratio(raw, at))
        else:
            return None
        return out
    # cv+: the folds kept, each new observation in the smallest fold; each fold model conditioned on
    # every observation outside its fold (the previous ones first, in their order)
    if previous.fold_of is None or previous.gp_fold_sd is None:
        return None
    k = previous.gp_fold_sd.shape[0]
    fold_of = np.concatenate([previous.fold_of, np.empty(n - n_prev, dtype=int)])
    for i in range(n_prev, n):
        fold_of[i] = int(np.argmin(np.bincount(fold_of[:i], minlength=k)))
    models: list[QGP] = []
    fold_raw, fold_sd = [], []
    for f in range(k):
        tr = np.flatnonzero(fold_of != f)
        m = make().fit(X[tr], y[tr])
        mean_f, s = m.extended_moments(Xc, previous.gp_fold_sd[f], int(np.sum(fold_of[:n_prev] != f)))
        models.append(m)
        fold_raw.append(m.predict_from_moments(mean_f, s)[0])
        fold_sd.append(s)
    sc, med = fold_scores(models, fold_of, X, y)
    members: list[BaseSurrogate] = [*models]
    cf = ConformalFit("cv+", shown, sc, members, fold_of, np.arange(n), oof=med)
    out = {"scores": sc, "fold_of": fold_of, "fold_raw": as_stored(np.stack(fold_raw)),
           "gp_fold_sd": np.stack(fold_sd), "rank_p": cf.rank_p(y)}
    if shown.scaled:
        out["scale"] = as_stored(shown.target_spread(sd))
        out["fold_scale"] = as_stored(np.stack([m.target_spread(s) for m, s in zip(models, fold_sd, strict=True)]))
    return out
