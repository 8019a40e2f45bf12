"""fit: observations -> ``Snapshot``. Train, conformalize and score a fresh candidate set.

Heavy: runs on a worker (on the GPU for the torch surrogates). Deterministic in its inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import numpy as np
from threadpoolctl import ThreadpoolController

from . import acquisition as acq
from . import crowd, multi
from . import device as devices
from .candidates import candidate_set, local_search
from .config import LOCAL_SEARCH, EngineConfig
from .conformal import conformalize, schedule
from .extend import carry, extend
from .failures import log_success
from .incumbent import improvable, incumbent
from .outcomes import check_directions, sign_of
from .retune import Tuned, plan, warp_moved
from .scoring import MultiScore, narrows, with_feasibility
from .snapshot import FitKind, Head, Snapshot, SnapshotMeta, as_stored
from .space import SearchSpace
from .surrogates import BaseSurrogate, make_surrogate
from .warp import Warp, fit_warp


def fit(
    observations: Sequence[tuple[dict[str, Any], float]],
    space: SearchSpace,
    config: EngineConfig,
    direction: str = "minimize",
    seed: int = 0,
    candidates: np.ndarray | None = None,
    device: str | None = None,
    pending: Sequence[dict[str, Any]] = (),
    constraints: Sequence[Sequence[float]] | None = None,
    directions: Sequence[str] | None = None,
    failed: Sequence[dict[str, Any]] = (),
    tuned: Tuned | None = None,
    previous: Snapshot | None = None,
) -> Snapshot:
    """Train, conformalize and score a fresh candidate set. Deterministic in its inputs.

    ``tuned``: the hyperparameters of the study's newest full refit (``Tuned.of(snapshot.meta)`` of
    its newest snapshot). Unless a full refit is due (``retune.plan``), the fit keeps them: an
    update. The snapshot's ``meta.fit`` says which kind it was and why, ``meta.tuned`` what
    the next fit keeps.

    ``previous``: the study's newest snapshot. Where it can be brought up to date at its own
    candidates (``engine.extend``: a few observations more, none of them a new best, the same
    hyperparameters), the snapshot is that extend, O(N n) instead of a fit's O(N n^2).

    ``directions`` (2 to 4): several objectives; each observation's value is then a list, one value
    per objective. The first objective is the snapshot's own outcome, each further one a head of
    kind ``"objective"``; ``select`` then runs the multi-objective acquisition (``engine.multi``).

    ``constraints`` (one row per observation, one column per outcome constraint, feasible when
    every value is <= 0): each constraint gets its own surrogate, conformalized the same way, as a
    snapshot head; the incumbent the acquisition improves on is then the best *feasible* value.

    ``failed``: the configurations whose trials failed (no value). With any, the snapshot's
    ``success`` holds each candidate's calibrated log probability of running (``engine.failures``),
    ``-inf`` for a near-duplicate of a failure; a study that does not learn from its failures
    passes none.

    ``candidates`` (snapped unit rows) replaces the drawn candidate set, e.g. to
    score given configurations. ``pending``: the running configurations; they
    join the candidates (never selected: they are running) so that ``select``
    has the model's prediction for each point it conditions on. ``device``
    (``auto | cpu | cuda``, default
    ``CALIBO_DEVICE`` or auto) is where torch surrogates train; a CUDA error
    refits on the CPU, and ``meta`` says where the fit ran and why it fell back.
    """
    where, why = devices.resolve(device)
    # The matrices here are small (n <= a few thousand): multithreaded BLAS only
    # adds spin-waiting, badly so when the cores are shared (7x slower measured).
    with _blas().limit(limits=1, user_api="blas"):
        one_outcome = not failed and (directions is None or len(directions) < 2) and not any(
            len(c) for c in constraints or ())
        extended = extend(previous, observations, space, config, direction, seed, where, pending,
                          tuned) if one_outcome else None
        if extended is not None:
            return extended
        try:
            snap = _fit(observations, space, config, direction, seed, candidates, where, pending, constraints,
                        directions, failed, tuned)
        except Exception as e:
            if where != "cuda" or not devices.is_cuda_error(e):
                raise
            why = f"CUDA failed, refitted on the CPU: {type(e).__name__}: {str(e)[:300]}"
            snap = _fit(observations, space, config, direction, seed, candidates, "cpu", pending, constraints,
                        directions, failed, tuned)
    if why:
        snap.meta.device_fallback = why
    return snap


_controller: ThreadpoolController | None = None


def _blas() -> ThreadpoolController:
    """The process's thread pools, found once: ``threadpool_limits`` looks for them again at every
    call (5 ms of reading the process's memory map, a third of an extend). The engine's BLAS
    libraries (numpy's, scipy's, scikit-learn's) are loaded when it is imported, before any fit."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller


class FitCache:
    """One study's newest snapshot, fitted again only when what it is fitted on changes (``key``),
    each fit handed what the one before it tuned (``engine.retune``) and the snapshot itself (which
    it may extend, ``engine.extend``): the snapshot cache of the in-process homes (``Optimizer``,
    ``CaliboSampler``; the service keeps its snapshots stored)."""

    def __init__(self, tuned: Tuned | None = None, snapshot: Snapshot | None = None, key: Any = None) -> None:
        self.key: Any = key
        self.snapshot: Snapshot | None = snapshot
        self.tuned = tuned  # what the newest fit hands the next one

    def get(self, key: Any, fit_with: Callable[[Tuned | None, Snapshot | None], Snapshot]) -> Snapshot:
        """The snapshot fitted on ``key``: the newest one, or ``fit_with(tuned, newest)``'s when
        ``key`` changed."""
        if self.snapshot is None or self.key != key:
            self.snapshot = fit_with(self.tuned, self.snapshot)
            self.key = key
            self.tuned = Tuned.of(self.snapshot.meta)
        return self.snapshot


class _Outcome:
    """One modelled outcome of a fit: its warp, warped values, conformal fit (``conformalize``)."""

    def __init__(self, values: np.ndarray, warp: Warp, config: EngineConfig, make: Callable[[], BaseSurrogate],
                 X: np.ndarray, method: str, fit_seed: int) -> None:
        self.warp = warp
        self.y = self.warp.forward(values)
        self.cf = conformalize(make, X, self.y, method, fit_seed, k_folds=config.cv_folds,
                               cal_fraction=config.cal_fraction, n_bootstraps=config.n_bootstraps)

    def hyperparameters(self) -> dict[str, Any] | None:
        """The shown model's tuned hyperparameters (None for a model that has none to hand on)."""
        tuned = getattr(self.cf.model, "tuned_hyperparameters", None)
        return tuned() if tuned is not None else None


def _outcomes(values: Sequence[np.ndarray], seeds: Sequence[int], config: EngineConfig,
              make: Callable[[dict[str, Any] | None], BaseSurrogate], X: np.ndarray, method: str,
              tuned: Tuned | None) -> tuple[list[_Outcome], FitKind, Tuned | None]:
    """Every modelled outcome's fit, a full refit or an update of ``tuned`` (``retune``): the
    outcomes, what ``meta.fit`` says of the fit, and the hyperparameters the next fit keeps."""
    warps = [fit_warp(config.warp, v) for v in values]
    shapes = [None if w.identity else w.to_dict() for w in warps]
    kept, why = plan(tuned, config.surrogate, config.surrogate_options, X.shape[0], method, len(values), X.shape[1])
    moved = warp_moved(kept, warps, values) if kept is not None else None
    if moved is not None:
        kept, why = None, moved
    hyper = kept.hyper if kept is not None else (None,) * len(values)
    outs = [_Outcome(v, w, config, partial(make, h), X, method, s)
            for v, w, h, s in zip(values, warps, hyper, seeds, strict=True)]
    if kept is None:
        found = [o.hyperparameters() for o in outs]
        kept = (Tuned(X.shape[0], method, tuple(h for h in found if h is not None), tuple(shapes))
                if all(h is not None for h in found) else None)
        return outs, FitKind("full", why), kept
    return outs, FitKind("update", why), kept


def _rank_p(outcomes: Sequence[_Outcome]) -> float | None:
    """The warm-up's rank test over every objective: the largest one-sided p-value (each model must
    rank its own held-out results), None without fold models."""
    ps = [o.cf.rank_p(o.y) for o in outcomes]
    known = [p for p in ps if p is not None]
    return max(known) if len(known) == len(ps) else None


def _fit(observations: Sequence[tuple[dict[str, Any], Any]], space: SearchSpace, config: EngineConfig, direction: str,
         seed: int, candidates: np.ndarray | None, device: str, pending: Sequence[dict[str, Any]] = (),
         constraints: Sequence[Sequence[float]] | None = None, directions: Sequence[str] | None = None,
         failed: Sequence[dict[str, Any]] = (), tuned: Tuned | None = None) -> Snapshot:
    t0 = time.perf_counter()
    dirs = check_directions(directions) if directions is not None and len(directions) > 1 else (direction,)
    signs = [sign_of(d) for d in dirs]
    sign = signs[0]
    n = len(observations)
    if n < 4:
        raise ValueError("fit needs at least 4 observations")
    U = space.to_unit([p for p, _ in observations])
    X = space.features(U)
    levels = config.level_grid
    method = schedule(n, config.conformalize_from, config.split_from, config.conformal)
    rng = np.random.default_rng([seed, n, 7])
    fit_seed = int(rng.integers(2**31))

    def make(hyper: dict[str, Any] | None = None) -> BaseSurrogate:
        kept = {} if hyper is None else {"hyper": hyper}
        return make_surrogate(config.surrogate, levels, fit_seed, device=device, **config.surrogate_options, **kept)

    V = np.asarray([v for _, v in observations], dtype=float).reshape(n, len(dirs))
    C = np.asarray(constraints, dtype=float).reshape(n, -1) if constraints is not None else np.empty((n, 0))
    outs, fit_kind, tuned = _outcomes(
        [signs[j] * V[:, j] for j in range(len(dirs))] + [C[:, j] for j in range(C.shape[1])],
        [fit_seed] + [fit_seed + 101 + j for j in range(1, len(dirs))] + [fit_seed + 1 + j for j in range(C.shape[1])],
        config, make, X, method, tuned)
    main, objs, cons = outs[0], outs[1:len(dirs)], outs[len(dirs):]
    warp, y, cf = main.warp, main.y, main.cf
    feasible = np.all(C <= 0, axis=1)
    best = incumbent(y, feasible)
    if not objs:  # one objective: the quantum of its metric (several: the hypervolume's own reference)
        best = improvable(best, sign * V[:, 0], feasible, warp)
    thresholds = [float(o.warp.forward(0.0)) for o in cons]
    Y = np.stack([main.y] + [o.y for o in objs], axis=1)  # (n, m): every objective, minimised, warped
    # what the candidate set mutates: the best observations, by Pareto rank with several objectives
    rank_y = y if not objs else multi.pareto_ranks(Y).astype(float)
    mo = MultiScore(config, signs, Y, feasible, [warp] + [o.warp for o in objs], levels, rng) if objs else None

    if candidates is None:
        cand = _candidates(space, U, rank_y, feasible, rng, config, best, [cf.model] + [o.cf.model for o in objs],
                           [(o.cf.model, t) for o, t in zip(cons, thresholds, strict=True)], mo, pending)
    else:
        cand = space.snap(candidates)
    Xc = space.features(cand)
    mine = _at_candidates(cf, Xc, levels)
    raw = mine["raw"]
    heads = _heads(objs, cons, signs, thresholds, feasible, Xc, levels)
    meta = SnapshotMeta(device=cf.model.ran_on, rank_p=_rank_p([main] + objs),
                        crowd=crowd.fit_info(cf.model, cand, raw, [o.cf.model for o in objs]), fit=fit_kind)
    carried = carry(cf, Xc, n) if not objs and not cons and not failed and tuned is not None else None
    if carried is not None:
        meta.carry = carried[0]
    if tuned is not None:
        meta.tuned = tuned.to_dict()
    if not warp.identity:
        meta.warp = warp.to_dict()
    if cons:
        meta.n_feasible = int(feasible.sum())
    success = None
    if failed:  # its own seed: a study without failures draws as before
        learned = log_success(space, U, space.to_unit(list(failed)), cand, fit_seed + 7)
        success = None if learned is None else as_stored(learned)
        meta.n_failed = len(failed)
    if objs:
        meta.directions = list(dirs)
    return Snapshot(
        n_obs=n, method=cf.method, levels=levels, candidates=cand, raw=raw, best=best, observed=U,
        scores=cf.scores, fold_raw=mine["fold_raw"], fold_of=cf.fold_of, scale=mine["scale"],
        fold_scale=mine["fold_scale"], signal=mine["signal"], surrogate=config.surrogate,
        fit_seconds=time.perf_counter() - t0, meta=meta, heads=heads,
        observed_y=Y if objs else None, observed_ok=feasible if objs else None, success=success,
        **(carried[1] if carried is not None else {}),
    )


def _candidates(space: SearchSpace, U: np.ndarray, rank_y: np.ndarray, feasible: np.ndarray,
                rng: np.random.Generator, config: EngineConfig, best: float, models: Sequence[Any],
                constraints: Sequence[tuple[Any, float]], mo: MultiScore | None,
                pending: Sequence[dict[str, Any]]) -> np.ndarray:
    """The fit's own candidate set: drawn and mutated (``candidate_set``; the infeasible ranked after
    the feasible), the local search's optima (``_searched``) and the running configurations."""
    cand = candidate_set(space, U, np.where(feasible, rank_y, rank_y + np.ptp(rank_y) + 1.0), rng,
                         n_candidates=config.n_candidates, top_k=config.top_k,
                         mutation_fraction=config.mutation_fraction)
    if cand.shape[0]:
        extra = _searched(space, models, cand, U, rank_y, feasible, best, config, constraints, mo,
                          space.to_unit(list(pending)) if pending else None)
        if extra.shape[0]:
            cand = np.vstack([cand, extra])
    if pending:
        cand = _with_running(space, cand, pending)
    return cand


def _heads(objs: Sequence[_Outcome], cons: Sequence[_Outcome], signs: Sequence[float], thresholds: Sequence[float],
           feasible: np.ndarray, Xc: np.ndarray, levels: np.ndarray) -> list[Head]:
    """The snapshot's heads: each further objective's conformal fit at the candidates, then each
    constraint's (with its threshold in the warped units)."""
    heads = [Head(kind="objective", best=incumbent(o.y, feasible), sign=signs[j],
                  warp=None if o.warp.identity else o.warp.to_dict(), **_at_candidates(o.cf, Xc, levels))
             for j, o in enumerate(objs, start=1)]
    heads += [Head(kind="constraint", threshold=t, warp=None if o.warp.identity else o.warp.to_dict(),
                   **_at_candidates(o.cf, Xc, levels, objective=False))
              for o, t in zip(cons, thresholds, strict=True)]
    return heads


def _at_candidates(c: Any, Xc: np.ndarray, levels: np.ndarray, objective: bool = True) -> dict[str, Any]:
    """What a snapshot keeps of conformal fit ``c`` at the candidates ``Xc``: the raw quantiles (and
    the fold models'), the scales of normalized scores, the scores and folds, the signal (an
    objective's: what the crowd narrows)."""
    def quantiles(model: Any) -> np.ndarray:  # an exhausted small space leaves no candidate
        return model.predict_quantiles(Xc) if Xc.shape[0] else np.empty((0, levels.size))

    def spread(model: Any) -> np.ndarray:
        return model.predict_scale(Xc) if Xc.shape[0] else np.empty(0)

    out = {"raw": None, "fold_raw": None, "scale": None, "fold_scale": None,
           "scores": c.scores, "fold_of": c.fold_of, "signal": None}
    if objective and Xc.shape[0]:
        raw, signal = c.model.predict_quantiles_and_signal(Xc)
        out["signal"] = as_stored(signal)
    else:
        raw = quantiles(c.model)
    out["raw"] = as_stored(raw)
    if c.fold_models is not None:
        out["fold_raw"] = as_stored(np.stack([quantiles(m) for m in c.fold_models]))
    if c.scaled:
        out["scale"] = as_stored(spread(c.model))
        if c.fold_models is not None:
            out["fold_scale"] = as_stored(np.stack([spread(m) for m in c.fold_models]))
    else:  # split with a refit: the correction carried to the shown model at each candidate
        moved = c.transport(Xc, raw)
        out["scale"] = None if moved is None else as_stored(moved)
    return out


# what fit's local search optimises for each acquisition: a deterministic stand-in for the sampled ones
_SEARCHED = {"ts": "mean", "its": "mean", "obs": "mean"}


def _searched(space: SearchSpace, models: Sequence[Any], cand: np.ndarray, U: np.ndarray, y: np.ndarray,
              feasible: np.ndarray, best: float, config: EngineConfig, constraints: Sequence[tuple[Any, float]] = (),
              mo: MultiScore | None = None, running: np.ndarray | None = None) -> np.ndarray:
    """New candidates from a local search of the acquisition (on the fitted models' raw quantiles;
    ``models``: one per objective, ``mo`` the multi-objective acquisition when there are several).

    ``running``: the unit rows of the trials in flight. With GP models, the acquisition searched is
    the one ``select`` will score: conditioned on them (``crowd.Fantasies``: each objective with its
    own kernel, the running points believed at their medians), so the search climbs to what is
    still worth asking, not to where the crowd already is.

    Starts: the ``LOCAL_SEARCH`` best drawn candidates and the two best (feasible first; ``y``
    ranks them) observed configurations; each descends the acquisition, weighed by the probability
    of feasibility under each constraint model, by one-coordinate moves (``candidates.local_search``).
    Returns the points reached that are neither observed nor drawn already. The calibrated
    acquisition at the current alpha is select's: these only give it better places to choose from.
    """
    name = "logei" if mo is not None else _SEARCHED.get(config.acquisition, config.acquisition)
    levels = config.level_grid
    dummy = np.random.default_rng(0)

    narrowed = narrows(config, several=mo is not None)

    def predicted(model: Any, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The raw quantiles, and what select scores of them (``scoring.scored``)."""
        if not narrowed:
            raw = model.predict_quantiles(feats)
            return raw, raw
        raw, signal = model.predict_quantiles_and_signal(feats)
        return raw, crowd.narrow(raw, signal)

    fantasies = None  # select's believer needs the first objective's GP kernel: without it, nothing to condition on
    if running is not None and len(running):
        kernels = [crowd.kernel_of(m) for m in models]
        if kernels[0] is not None:
            run_feats = space.features(running)
            fantasies = crowd.Fantasies(kernels, run_feats, [predicted(m, run_feats) for m in models], levels)
            best = fantasies.best(best)

    def score(rows: np.ndarray) -> np.ndarray:
        feats = space.features(rows)
        pred = [predicted(m, feats) for m in models]
        Qs = [Q for _, Q in pred] if fantasies is None else fantasies.narrowed(feats, pred)
        if mo is not None:
            sc = mo(Qs, believed=None if fantasies is None else fantasies.points)
        else:
            sc = acq.score(name, Qs[0], levels, best=best, rng=dummy)
        if constraints:
            log_pf = cast(np.ndarray, sum(acq.log_prob_below(m.predict_quantiles(feats), levels, t)
                                          for m, t in constraints))
            sc = with_feasibility(sc, log_pf, name, any_feasible=bool(feasible.any()))
        return sc

    sc = score(cand)
    top = cand[np.argsort(sc, kind="stable")[:LOCAL_SEARCH]]
    order = np.lexsort((y, ~feasible))  # feasible first, then by value
    starts = np.vstack([top, U[order[:2]]])
    found = local_search(space, score, starts)
    taken = set(space.keys(cand)) | set(space.keys(U))
    keep, seen = [], set()
    for row, k in zip(found, space.keys(found), strict=True):
        if k not in taken and k not in seen:
            seen.add(k)
            keep.append(row)
    return np.array(keep).reshape(-1, space.dim)


def _with_running(space: SearchSpace, cand: np.ndarray, pending: Sequence[dict[str, Any]]) -> np.ndarray:
    """The candidate set plus the running configurations it lacks."""
    have = set(space.keys(cand))
    run = space.to_unit(list(pending))
    new = [i for i, k in enumerate(space.keys(run)) if k not in have]
    return np.vstack([cand, run[new]]) if new else cand
