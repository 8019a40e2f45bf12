"""The engine's three pure steps, and the in-process ``Optimizer`` on top of them.

* ``fit(observations, space, config, direction, seed) -> Snapshot``: heavy.
* ``select(snapshot, states, ...) -> list[Suggestion]``: cheap numpy.
* ``adapt(states, prediction, value) -> (states, record)``: microseconds.

The service calls the same three functions; only where the data lives differs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from . import acquisition as acq
from . import crowd, multi
from . import device as devices
from .adaptive import ADAPTERS, ACIState, AdaptiveState, new_state, state_from_dict, state_to_dict
from .candidates import candidate_set, local_search
from .conformal import (
    beta_of,
    check_levels,
    conformalize,
    issued_beta,
    midpoint_levels,
    pair_alphas,
    pair_intervals,
    schedule,
)
from .errors import ConfigError, FieldError
from .limits import (
    MAX_PARAM_NAME,
    SETTING_RANGES,
    check_setting,
    check_surrogate_options,
    check_text,
)
from .shift import SHIFT_MODES, snapshot_weights
from .snapshot import Head, Snapshot
from .space import ParamError, SearchSpace
from .surrogates import SURROGATES, make_surrogate
from .warp import BIG, WARPS, Warp, decluster_weights, fit_warp

DIRECTIONS = ("minimize", "maximize")
MAX_OBJECTIVES = 4
CONFORMAL_MODES = ("adaptive", "split", "cv+", "crossval", "jab+", "raw")
SPLIT_SCORES = ("transported", "held-out", "loo")
EARLY_SCORES = ("cv+", "loo")


@dataclass(frozen=True)
class EngineConfig:
    """How a study's surrogate is fitted, calibrated and used. Plain, serialisable."""

    surrogate: str = "qgp"  # chosen by benchmarks/search.py; paper 002 picked QE, measured slower and worse here
    acquisition: str = "logei"  # log expected improvement with Gaussian tails (engine.acquisition)
    warp: str = "yeo-johnson"  # output warp before the fit (engine.warp): none | yeo-johnson | yeo-johnson-tail
    # best drawn candidates fit's acquisition local search starts from (0: none); 20 measured ahead
    # of 5 on real tuning, sequentially (docs: real-tuning benchmark, "More local search starts")
    local_search: int = 20
    # what the warp's centre and scale are estimated from: every observation (observed), the first
    # n_warmup (warmup), or every observation with cell-declustering weights (declustered); docs:
    # real-tuning benchmark, "The warp's reference"
    warp_reference: str = "observed"
    # what an improvement acquisition improves on: the best observed value, or the least of the
    # surrogate's medians at the observed configurations (one objective; docs: the incumbent)
    incumbent: str = "observed"
    # the acquisition scores the objective, not a noisy observation of it: each candidate's calibrated
    # quantiles narrowed about their median to the surrogate's signal fraction (snapshot.signal)
    noise_free: bool = True
    adapter: str = "aci"  # aci | dtaci | none (ACI calibrates better over a study's horizon: docs, ACI and DtACI)
    conformal: str = "adaptive"  # adaptive (CV+ then split) | split | cv+ | crossval | jab+ | raw
    shift: str = "none"  # none | fcs: covariate-shift weighted split-rule intervals (engine.shift)
    n_levels: int = 10  # equal-mass quantile levels; pairs give 90/70/50/30/10% intervals
    levels: tuple[float, ...] | None = None  # explicit symmetric grid instead of n_levels
    n_warmup: int = 15  # quasi-random trials launched before the model takes over
    # with trials in flight, the model takes over once n_warmup trials are launched and this share
    # of them has finished (warmed_up); 1.0 (the default) waits for n_warmup finished trials: 2/3
    # searches better at 25 trials with 8 in flight but shows more uncalibrated early predictions
    # (docs: the warm start with trials in flight); sequentially the share changes nothing
    warmup_observed: float = 1.0
    conformalize_from: int = 32
    split_from: int = 50
    n_candidates: int = 2000
    top_k: int = 5
    mutation_fraction: float = 0.5
    cv_folds: int = 5
    cal_fraction: float = 0.25
    split_refit: bool = True  # split conformal: the shown model sees every observation (conformal.conformalize)
    # transported | held-out | loo: with split_refit, the scores' source and how they reach the refit
    # (conformal.conformalize)
    split_scores: str = "transported"
    early_scores: str = "cv+"
    n_bootstraps: int = 20  # bootstrap models of jab+
    aci_gamma: float = 0.05  # ACI learning rate; a 100-trial horizon needs a fast one
    dtaci_window: int = 50
    ucb_pair: int = 0  # 0 = the widest interval's optimistic end
    crowd: str = "believer"  # believer | penalize | radius: running points in select (engine.crowd)
    multi_acquisition: str = "auto"  # several objectives: auto (ehvi for 2, parego for 3-4) | ehvi (2-3) | parego
    reference_point: tuple[float, ...] | None = None  # several objectives: the hypervolume's, in their units
    diversity: float = 0.05  # crowd="radius": exclusion radius, unit-cube distance / sqrt(dim)
    surrogate_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def bad(name: str, msg: str) -> None:
            raise ConfigError(name, msg)

        if self.surrogate not in SURROGATES:
            bad("surrogate", f"must be one of {sorted(SURROGATES)}")
        if self.acquisition not in acq.ACQUISITIONS:
            bad("acquisition", f"must be one of {list(acq.ACQUISITIONS)}")
        if self.adapter not in ADAPTERS:
            bad("adapter", f"must be one of {list(ADAPTERS)}")
        if self.conformal not in CONFORMAL_MODES:
            bad("conformal", f"must be one of {list(CONFORMAL_MODES)}")
        if self.shift not in SHIFT_MODES or (self.shift != "none" and self.conformal in ("cv+", "raw")):
            bad("shift", f"must be one of {list(SHIFT_MODES)}; fcs weights split-rule intervals "
                "(conformal adaptive, split, crossval or jab+), not CV+ or raw ones")
        for flag in ("split_refit", "noise_free"):
            if not isinstance(getattr(self, flag), bool):
                bad(flag, "must be true or false")
        if self.split_scores not in SPLIT_SCORES:
            bad("split_scores", f"must be one of {list(SPLIT_SCORES)}")
        if self.early_scores not in EARLY_SCORES:
            bad("early_scores", f"must be one of {list(EARLY_SCORES)}")
        if self.incumbent not in INCUMBENTS:
            bad("incumbent", f"must be one of {list(INCUMBENTS)}")
        if self.warp not in WARPS:
            bad("warp", f"must be one of {list(WARPS)}")
        if self.warp_reference not in WARP_REFERENCES:
            bad("warp_reference", f"must be one of {list(WARP_REFERENCES)}")
        if self.crowd not in crowd.CROWD_MODES:
            bad("crowd", f"must be one of {list(crowd.CROWD_MODES)}")
        if self.multi_acquisition not in ("auto", *multi.MULTI_ACQUISITIONS):
            bad("multi_acquisition", f"must be one of {['auto', *multi.MULTI_ACQUISITIONS]}")
        if self.reference_point is not None:
            ref = self.reference_point
            if (isinstance(ref, (str, bytes)) or not isinstance(ref, (list, tuple))
                    or not 2 <= len(ref) <= MAX_OBJECTIVES
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                               for v in ref)):
                bad("reference_point", f"must be a list of 2 to {MAX_OBJECTIVES} finite numbers, one per objective")
            object.__setattr__(self, "reference_point", tuple(float(v) for v in ref))
        if self.levels is not None:
            most = int(SETTING_RANGES["n_levels"][1])
            if not isinstance(self.levels, (list, tuple)) or not 2 <= len(self.levels) <= most:
                bad("levels", f"must be a list of 2 to {most} levels")
            try:
                lv = check_levels(np.asarray(self.levels, dtype=float))
            except (ValueError, TypeError) as e:
                bad("levels", str(e))
            object.__setattr__(self, "levels", tuple(float(x) for x in lv))
            object.__setattr__(self, "n_levels", len(lv))
        for name in SETTING_RANGES:
            check_setting(name, getattr(self, name))
        if self.n_levels % 2:
            bad("n_levels", "must be even (the levels pair up into intervals)")
        if not (isinstance(self.ucb_pair, int) and not isinstance(self.ucb_pair, bool)
                and 0 <= self.ucb_pair < self.n_levels // 2):
            bad("ucb_pair", f"must be an integer in [0, {self.n_levels // 2 - 1}]")
        object.__setattr__(self, "surrogate_options",
                           check_surrogate_options(self.surrogate, self.surrogate_options))

    def warmed_up(self, n_observed: int, n_running: int = 0) -> bool:
        """Whether suggestions come from a fitted model yet (else from the warm-up sequence).

        Sequentially the warm-up is the first ``n_warmup`` observations. With trials in flight the
        model takes over once the finished and running trials together cover the warm-up and at
        least ``warmup_observed`` of it has finished. With 1.0 (the default) a crowd of 8 launches
        ``n_warmup + 7`` quasi-random trials and waits for ``n_warmup`` results; with 2/3 it launches
        ``n_warmup + 2`` and fits first on 10 results: ahead at 25 trials on the real-tuning
        benchmark, level at 100, with a larger calibration gap on the crowd benchmark, whose first
        predictions come from fewer observations (docs: the warm start with trials in flight). A
        fit needs at least 4 observations.
        """
        return n_observed >= self.warmup_least and n_observed + n_running >= self.n_warmup

    @property
    def warmup_least(self) -> int:
        """The fewest observations the model takes over from (``warmed_up``), however many run."""
        return max(4, math.ceil(self.warmup_observed * self.n_warmup - 1e-9))

    @property
    def level_grid(self) -> np.ndarray:
        if self.levels is not None:
            return np.asarray(self.levels, dtype=float)
        return midpoint_levels(self.n_levels)

    def for_objectives(self, n_objectives: int) -> EngineConfig:
        """This configuration as a study with ``n_objectives`` objectives takes it: a multi-objective
        study's QGP scores its conformal residuals in units of the GP's sd (``scores: normalized``)
        unless the settings choose. The expected hypervolume improvement compares candidates by the
        shape of their uncertainty, which one conformal width added everywhere (the quantile scores)
        flattens; on the multi-objective benchmark the normalised scores with ACI won 17 / 9 at 100
        trials with 8 in flight against the quantile scores and kept every objective's calibration gap
        within 0.05 (docs: benchmarks, multi-objective). Resolved when a study is defined and stored
        with it, so a study keeps the scores it was created with."""
        if n_objectives < 2 or self.surrogate != "qgp" or "scores" in self.surrogate_options:
            return self
        return replace(self, surrogate_options={**self.surrogate_options, "scores": "normalized"})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> EngineConfig:
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(unknown[0], "unknown setting")
        return cls(**d)


@dataclass
class Suggestion:
    """A configuration to evaluate, and the calibrated prediction it was chosen on (None in the
    warm start): quantiles, mean and intervals in the user's units."""

    params: dict[str, Any]
    prediction: dict[str, Any] | None = None


# --------------------------------------------------------------------- helpers
def _sign(direction: str) -> float:
    if direction not in DIRECTIONS:
        raise ConfigError("direction", "must be 'minimize' or 'maximize'")
    return 1.0 if direction == "minimize" else -1.0


def initial_states(config: EngineConfig, seed: int = 0) -> list[AdaptiveState]:
    """One adaptive state per interval pair, widest first."""
    return [
        new_state(config.adapter, float(a), gamma=config.aci_gamma, seed=seed * 1000 + j,
                  window=config.dtaci_window)
        for j, a in enumerate(pair_alphas(config.level_grid))
    ]


MAX_CONSTRAINTS = 16  # outcome constraints of a study


def check_constraint_names(names: Any) -> tuple[str, ...]:
    """Constraint names: distinct, printable, at most ``MAX_CONSTRAINTS``; ConfigError naming the field."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError("constraints", "must be a list of constraint names")
    if len(names) > MAX_CONSTRAINTS:
        raise ConfigError("constraints", f"at most {MAX_CONSTRAINTS} constraints (got {len(names)})")
    out = []
    for i, n in enumerate(names):
        try:
            out.append(check_text(n, f"constraints.{i}", MAX_PARAM_NAME))
        except FieldError as e:
            raise ConfigError(e.field, e.message) from None
    if len(set(out)) != len(out):
        raise ConfigError("constraints", "constraint names must be distinct")
    return tuple(out)


def check_directions(directions: Any) -> tuple[str, ...]:
    """A multi-objective study's directions: 2 to ``MAX_OBJECTIVES`` of minimize / maximize."""
    if isinstance(directions, str) or not isinstance(directions, (list, tuple)):
        raise ConfigError("directions", "must be a list of 'minimize' / 'maximize', one per objective")
    if not 2 <= len(directions) <= MAX_OBJECTIVES:
        raise ConfigError("directions", f"must name 2 to {MAX_OBJECTIVES} objectives (got {len(directions)})")
    for i, d in enumerate(directions):
        if d not in DIRECTIONS:
            raise ConfigError(f"directions.{i}", "must be 'minimize' or 'maximize'")
    return tuple(directions)


def check_values(values: Any, m: int, field: str = "values") -> list[float]:
    """One finite number per objective; ParamError naming ``field`` (and the position) otherwise."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__") or len(values) != m:
        raise ParamError(field, f"must be a list of {m} numbers, one per objective")
    out = []
    for i, v in enumerate(values):
        try:
            out.append(check_value(v))
        except ParamError as e:
            raise ParamError(f"{field}.{i}", e.message) from None
    return out


def check_value(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParamError("value", "must be a number")
    v = float(value)
    if not math.isfinite(v):
        raise ParamError("value", "must be finite (no NaN or infinity)")
    return v


# ------------------------------------------------------------------------ fit
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
) -> Snapshot:
    """Train, conformalize and score a fresh candidate set. Deterministic in its inputs.

    ``directions`` (2 to 4): several objectives; each observation's value is then a list, one value
    per objective. The first objective is the snapshot's own outcome, each further one a head of
    kind ``"objective"``; ``select`` then runs the multi-objective acquisition (``engine.multi``).

    ``constraints`` (one row per observation, one column per outcome constraint, feasible when
    every value is <= 0): each constraint gets its own surrogate, conformalized the same way, as a
    snapshot head; the incumbent the acquisition improves on is then the best *feasible* value.

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
    with threadpool_limits(1, user_api="blas"):
        try:
            snap = _fit(observations, space, config, direction, seed, candidates, where, pending, constraints,
                        directions)
        except Exception as e:
            if where != "cuda" or not devices.is_cuda_error(e):
                raise
            why = f"CUDA failed, refitted on the CPU: {type(e).__name__}: {str(e)[:300]}"
            snap = _fit(observations, space, config, direction, seed, candidates, "cpu", pending, constraints,
                        directions)
    if why:
        snap.meta["device_fallback"] = why
    return snap


class _Outcome:
    """One modelled outcome of a fit: its warp, warped values, conformal fit (``conformalize``)."""

    def __init__(self, values: np.ndarray, config: EngineConfig, make, X: np.ndarray, method: str,
                 fit_seed: int, weights: np.ndarray | None = None) -> None:
        self.warp = fit_warp(config.warp, values, weights)
        self.y = self.warp.forward(values)
        self.cf = conformalize(make, X, self.y, method, fit_seed, k_folds=config.cv_folds,
                               cal_fraction=config.cal_fraction, n_bootstraps=config.n_bootstraps,
                               refit=config.split_refit, split_scores=config.split_scores)


INCUMBENTS = ("observed", "model")
WARP_REFERENCES = ("observed", "warmup", "declustered")


def _warp_weights(config: EngineConfig, X: np.ndarray) -> np.ndarray | None:
    """Each observation's weight in the warps' centre and scale (``warp_reference``), the same for
    every outcome of a fit: computed once per fit."""
    if config.warp_reference == "warmup":
        return (np.arange(X.shape[0]) < config.n_warmup).astype(float)
    if config.warp_reference == "declustered":
        return decluster_weights(X)
    return None


def _incumbent(cf, X: np.ndarray, y: np.ndarray, feasible: np.ndarray, plug_in: bool) -> float:
    """What an improvement acquisition improves on (warped, minimised), over the feasible observations
    (all of them when none is feasible).

    The best observed value; with ``plug_in`` (``incumbent="model"``), the least of the surrogate's medians at the
    observed configurations, the plug-in incumbent of noisy EI (Picheny et al., 2013). The acquisition
    scores the objective (``EngineConfig.noise_free``); where the surrogate explains part of the spread
    as noise, the best observation is the luckiest draw, a level the objective itself may not reach,
    and measuring improvements against it leaves them to the most uncertain, least explored regions."""
    rows = np.flatnonzero(feasible) if feasible.any() else np.arange(y.size)
    if not plug_in:
        return float(y[rows].min())
    return float(acq.median(cf.model.predict_quantiles(X[rows])).min())


def _fit(observations, space, config, direction, seed, candidates, device, pending=(), constraints=None,
         directions=None) -> Snapshot:
    t0 = time.perf_counter()
    dirs = check_directions(directions) if directions is not None and len(directions) > 1 else (direction,)
    signs = [_sign(d) for d in dirs]
    sign = signs[0]
    n = len(observations)
    if n < 4:
        raise ValueError("fit needs at least 4 observations")
    U = space.to_unit([p for p, _ in observations])
    X = space.features(U)
    levels = config.level_grid
    method = schedule(n, config.conformalize_from, config.split_from, config.conformal, config.early_scores)
    rng = np.random.default_rng([seed, n, 7])
    fit_seed = int(rng.integers(2**31))

    def make():
        return make_surrogate(config.surrogate, levels, fit_seed, device=device,
                              **config.surrogate_options)

    V = np.asarray([v for _, v in observations], dtype=float).reshape(n, len(dirs))
    ww = _warp_weights(config, X)
    main = _Outcome(sign * V[:, 0], config, make, X, method, fit_seed, ww)
    warp, y, cf = main.warp, main.y, main.cf
    objs = [_Outcome(signs[j] * V[:, j], config, make, X, method, fit_seed + 101 + j, ww) for j in range(1, len(dirs))]
    C = np.asarray(constraints, dtype=float).reshape(n, -1) if constraints is not None else np.empty((n, 0))
    cons = [_Outcome(C[:, j], config, make, X, method, fit_seed + 1 + j, ww) for j in range(C.shape[1])]
    feasible = np.all(C <= 0, axis=1)
    best = _incumbent(cf, X, y, feasible, plug_in=config.incumbent == "model" and len(dirs) == 1)
    thresholds = [float(o.warp.forward(0.0)) for o in cons]
    Y = np.stack([main.y] + [o.y for o in objs], axis=1)  # (n, m): every objective, minimised, warped
    # what the candidate set mutates: the best observations, by Pareto rank with several objectives
    rank_y = y if not objs else multi.pareto_ranks(Y).astype(float)
    mo = _MultiScore(config, signs, Y, feasible, [warp] + [o.warp for o in objs], levels, rng) if objs else None

    if candidates is None:
        cand = candidate_set(space, U, np.where(feasible, rank_y, rank_y + np.ptp(rank_y) + 1.0), rng,
                             n_candidates=config.n_candidates, top_k=config.top_k,
                             mutation_fraction=config.mutation_fraction)
        if config.local_search and cand.shape[0]:
            extra = _searched(space, [cf.model] + [o.cf.model for o in objs], cand, U, rank_y, feasible, best,
                              config, [(o.cf.model, t) for o, t in zip(cons, thresholds, strict=True)], mo,
                              space.to_unit(list(pending)) if pending else None)
            if extra.shape[0]:
                cand = np.vstack([cand, extra])
        if pending:
            cand = _with_running(space, cand, pending)
    else:
        cand = space.snap(candidates)
    Xc = space.features(cand)

    def quantiles(model) -> np.ndarray:  # an exhausted small space leaves no candidate
        return model.predict_quantiles(Xc) if Xc.shape[0] else np.empty((0, levels.size))

    def f32(a: np.ndarray) -> np.ndarray:  # what storage keeps, so stored == in-memory
        return a.astype(np.float32).astype(np.float64)

    def spread(model) -> np.ndarray:
        return model.predict_scale(Xc) if Xc.shape[0] else np.empty(0)

    def outputs(c, objective: bool = True) -> dict[str, Any]:
        """What a snapshot keeps of a conformal fit at the candidates."""
        out = {"raw": None, "fold_raw": None, "scale": None, "fold_scale": None,
               "scores": c.scores, "fold_of": c.fold_of, "signal": None}
        if objective and config.noise_free and Xc.shape[0]:
            raw, signal = c.model.predict_quantiles_and_signal(Xc)
            out["signal"] = f32(signal)
        else:
            raw = quantiles(c.model)
        out["raw"] = f32(raw)
        if c.fold_models is not None:
            out["fold_raw"] = f32(np.stack([quantiles(m) for m in c.fold_models]))
        if c.scaled:
            out["scale"] = f32(spread(c.model))
            if c.fold_models is not None:
                out["fold_scale"] = f32(np.stack([spread(m) for m in c.fold_models]))
        else:  # split_scores="transported": the correction carried to the shown model at each candidate
            moved = c.transport(Xc, raw)
            out["scale"] = None if moved is None else f32(moved)
        return out

    mine = outputs(cf)
    raw = mine["raw"]
    cal_weight, cand_weight = snapshot_weights(config.shift, cf.method, X, cf.cal_index, Xc, raw, levels,
                                               config.acquisition, best, fit_seed)
    heads = [Head(kind="objective", best=_incumbent(o.cf, X, o.y, feasible, plug_in=False),
                  sign=signs[j], warp=None if o.warp.identity else o.warp.to_dict(), **outputs(o.cf))
             for j, o in enumerate(objs, start=1)]
    heads += [Head(kind="constraint", threshold=t, warp=None if o.warp.identity else o.warp.to_dict(),
                   **outputs(o.cf, objective=False)) for o, t in zip(cons, thresholds, strict=True)]
    meta = {"device": cf.model.ran_on,
            "crowd": crowd.fit_info(cf.model, cand, raw, config.crowd, [o.cf.model for o in objs])}
    if not warp.identity:
        meta["warp"] = warp.to_dict()
    if cons:
        meta["n_feasible"] = int(feasible.sum())
    if objs:
        meta["directions"] = list(dirs)
    return Snapshot(
        n_obs=n,
        method=cf.method,
        levels=levels,
        candidates=cand,
        raw=raw,
        best=best,
        observed=U,
        scores=cf.scores,
        fold_raw=mine["fold_raw"],
        fold_of=cf.fold_of,
        scale=mine["scale"],
        fold_scale=mine["fold_scale"],
        cal_weight=cal_weight,
        cand_weight=cand_weight,
        signal=mine["signal"],
        surrogate=config.surrogate,
        fit_seconds=time.perf_counter() - t0,
        meta=meta,
        heads=heads,
        observed_y=Y if objs else None,
        observed_ok=feasible if objs else None,
    )


class _MultiScore:
    """The multi-objective acquisition (``engine.multi``) on a study's observations.

    The objectives are compared on a common, scale-free footing: each one's warped values (minimised)
    are shifted and divided by their observed range, so 0 is the best and 1 the worst value
    observed. The front is the feasible observations' non-dominated set; the reference point is the
    study's (``config.reference_point``, in the objectives' own units, mapped the same way) or, by
    default, 1.1 in every objective: the worst observed value plus a tenth of the observed range.
    """

    def __init__(self, config: EngineConfig, signs: Sequence[float], Y: np.ndarray, ok: np.ndarray,
                 warps: Sequence[Warp], levels: np.ndarray, rng: np.random.Generator,
                 samples: int = multi.SAMPLES) -> None:
        self.m = Y.shape[1]
        self.kind = multi.resolve(config.multi_acquisition, self.m)
        self.levels = levels
        self.lo = Y.min(axis=0)
        span = np.ptp(Y, axis=0)
        self.span = np.where(span > 0, span, 1.0)
        Yn = (Y - self.lo) / self.span
        self.observed = Yn[ok]
        self.front = self.observed[multi.pareto_mask(self.observed)] if self.observed.shape[0] else self.observed
        if config.reference_point is not None:
            if len(config.reference_point) != self.m:
                raise ConfigError("reference_point", f"must have one value per objective ({self.m})")
            r = np.array([float(w.forward(np.array([s * v]))[0])
                          for w, s, v in zip(warps, signs, config.reference_point, strict=True)])
            self.ref = (r - self.lo) / self.span
        else:
            self.ref = multi.reference_point(Yn)
        self.u = multi.uniforms(self.m, rng, samples)
        self.weights = multi.simplex_weights(self.m, rng)

    def __call__(self, Qs: Sequence[np.ndarray], believed: np.ndarray | None = None) -> np.ndarray:
        """Lower-is-better scores of candidates with the (warped, minimised) quantiles ``Qs``, one
        array per objective; ``believed``: running points' predicted objectives (warped) that count
        as observed (the kriging believer)."""
        Qn = [(Q - self.lo[j]) / self.span[j] for j, Q in enumerate(Qs)]
        observed, front = self.observed, self.front
        if believed is not None and believed.shape[0]:
            observed = np.vstack([observed, (believed - self.lo) / self.span])
            front = observed[multi.pareto_mask(observed)]
        incumbent = None
        if self.kind == "parego":
            base = observed if observed.shape[0] else self.ref[None, :]
            incumbent = float(multi.chebyshev(base, self.weights).min())
        return multi.scores(self.kind, Qn, self.levels, front, self.ref, self.u, self.weights, incumbent)


# what fit's local search optimises for each acquisition: a deterministic stand-in for the sampled ones
_SEARCHED = {"ts": "mean", "its": "mean", "obs": "mean"}


def _searched(space: SearchSpace, models: Sequence[Any], cand: np.ndarray, U: np.ndarray, y: np.ndarray,
              feasible: np.ndarray, best: float, config: EngineConfig, constraints: Sequence[tuple[Any, float]] = (),
              mo: _MultiScore | None = None, running: np.ndarray | None = None) -> np.ndarray:
    """New candidates from a local search of the acquisition (on the fitted models' raw quantiles;
    ``models``: one per objective, ``mo`` the multi-objective acquisition when there are several).

    ``running``: the unit rows of the trials in flight. With the ``believer`` crowd mode and GP
    models, the acquisition searched is the one ``select`` will score: conditioned on them
    (``crowd.Fantasies``: each objective with its own kernel, the running points believed at their
    medians), so the search climbs to what is still worth asking, not to where the crowd already is.

    Starts: the ``config.local_search`` best drawn candidates and the two best (feasible first;
    ``y`` ranks them) observed configurations; each descends the acquisition, weighed by the probability of
    feasibility under each constraint model, by one-coordinate moves (``candidates.local_search``).
    Returns the points reached that are neither observed nor drawn already. The calibrated
    acquisition at the current alpha is select's: these only give it better places to choose from.
    """
    name = "logei" if mo is not None else _SEARCHED.get(config.acquisition, config.acquisition)
    levels = config.level_grid
    dummy = np.random.default_rng(0)

    narrowed = _narrows(config, several=mo is not None)

    def predicted(model, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The raw quantiles, and what select scores of them (optimizer._scored)."""
        if not narrowed:
            raw = model.predict_quantiles(feats)
            return raw, raw
        raw, signal = model.predict_quantiles_and_signal(feats)
        return raw, crowd.narrow(raw, signal)

    fantasies = None  # select's believer needs the first objective's GP kernel: without it, nothing to condition on
    if config.crowd == "believer" and running is not None and len(running):
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
            sc = acq.score(name, Qs[0], levels, best=best, rng=dummy, ucb_pair=config.ucb_pair)
        if constraints:
            log_pf = sum(acq.log_prob_below(m.predict_quantiles(feats), levels, t) for m, t in constraints)
            sc = _with_feasibility(sc, log_pf, name, any_feasible=bool(feasible.any()))
        return sc

    sc = score(cand)
    top = cand[np.argsort(sc, kind="stable")[: config.local_search]]
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


def _with_feasibility(sc: np.ndarray, log_pf: np.ndarray, acquisition: str, any_feasible: bool) -> np.ndarray:
    """An acquisition's scores (lower is better) weighed by each candidate's log probability of
    satisfying every constraint (Gardner et al., 2014; Gelbart et al., 2014).

    log EI adds it (EI times the probability); EI and PI utilities are multiplied by it; the
    others (UCB, Thompson draws, the mean) choose among candidates at least as likely feasible as
    not, the likeliest when none is. Before any feasible observation there is no incumbent to
    improve on, and the probability of feasibility alone is the acquisition.
    """
    if not any_feasible:
        return -log_pf
    if acquisition in acq.LOG_UTILITY:
        return sc - log_pf
    if acquisition in acq.POSITIVE_UTILITY:
        return sc * np.exp(log_pf)
    likely = log_pf >= math.log(0.5)
    if not likely.any():
        return -log_pf
    return np.where(likely, sc, np.inf)


def _narrows(config: EngineConfig, several: bool) -> bool:
    """Whether the acquisition scores the noise-free narrowing (``_scored``): with ``noise_free``,
    for the improvement acquisitions and for several objectives (EHVI and ParEGO are improvements)."""
    return config.noise_free and (several or config.acquisition in acq.IMPROVEMENT)


def _scored(Q: np.ndarray, signal: np.ndarray | None) -> np.ndarray:
    """What an improvement acquisition (``acquisition.IMPROVEMENT``, and the multi-objective ones)
    scores of calibrated quantiles ``Q``: with the fit's signal fractions
    (``EngineConfig.noise_free``), ``Q`` narrowed about its median to the objective's own spread.

    The calibrated quantiles cover an *observation*; an improvement is one of the objective. Where
    the surrogate explains the spread near observed points as noise (a plateau of tied or quantized
    values), an observation there may land below the best by chance, but the objective does not:
    scoring the noisy spread makes every new point on a plateau of the best value look like an even
    chance of improving, and the search stays there. Optuna's GPSampler and BoTorch score the latent
    function's posterior for the same reason."""
    return Q if signal is None else crowd.narrow(Q, signal)


def _with_running(space: SearchSpace, cand: np.ndarray, pending: Sequence[dict[str, Any]]) -> np.ndarray:
    """The candidate set plus the running configurations it lacks."""
    have = set(space.keys(cand))
    run = space.to_unit(list(pending))
    new = [i for i, k in enumerate(space.keys(run)) if k not in have]
    return np.vstack([cand, run[new]]) if new else cand


# --------------------------------------------------------------------- select
def _user_view(q_int: np.ndarray, sign: float, warp: Warp) -> np.ndarray:
    """Internal (minimise, warped) quantiles, levels ascending -> user units, levels ascending."""
    q = warp.inverse(q_int)
    return q if sign > 0 else -q[::-1]


def _finite(x: float) -> float:
    """A number a prediction can carry in JSON: infinities saturate at the warp's bound."""
    return float(np.clip(np.nan_to_num(float(x), nan=0.0, posinf=BIG, neginf=-BIG), -BIG, BIG))


def _outcome(bounds, method: str, levels: np.ndarray, row: int, Q: np.ndarray, alphas: np.ndarray,
             sign: float, warp: Warp) -> dict[str, Any]:
    """One outcome's calibrated prediction at candidate ``row``, in the user's units, with what
    ``adapt`` needs (the conformal point sets, the orientation, the warp)."""
    L = levels.size
    q_user = _user_view(Q[row], sign, warp)
    # (2, P, n): each pair's sorted lower / upper point sets (with FCS weights: engine.shift), for adapt
    pts = None if method == "raw" else bounds.packed(row)
    intervals = []
    # A pair's interval is its own conformal set at its alpha, the set beta_t (adapt) refers to,
    # nested with the others' (conformal.nested); Q is sorted across pairs for the acquisition.
    nominal = pair_alphas(levels)
    if pts is None:
        lows, highs = Q[row, : nominal.size], Q[row, L - 1 : L - 1 - nominal.size : -1]
    else:
        lows, highs = pair_intervals(pts, alphas[: nominal.size], bounds.weighted)
    for j, a in enumerate(nominal):
        lo, hi = (float(v) for v in warp.inverse(np.array([lows[j], highs[j]])))
        if sign < 0:
            lo, hi = -hi, -lo
        intervals.append({"coverage": round(1.0 - float(a), 10), "alpha": float(alphas[j]),
                          "lower": float(lo), "upper": float(hi)})
    with np.errstate(over="ignore", invalid="ignore"):  # saturated far quantiles (engine.warp) may overflow
        mean = acq.mean_of(np.sort(warp.inverse(Q[row : row + 1]), axis=1), levels)[0]
    pred: dict[str, Any] = {
        "method": method,
        "levels": levels.tolist(),
        "quantiles": q_user.tolist(),
        "mean": _finite(sign * mean),
        "intervals": intervals,
        "sign": sign,
    }
    if not warp.identity:  # adapt maps a told value through it before reading the point sets
        pred["warp"] = warp.to_dict()
    if pts is not None:
        pred["points"] = pts
        if bounds.weighted:  # the point sets carry their FCS weights
            pred["shift"] = "fcs"
    return pred


def _prediction(snap: Snapshot, row: int, Q: np.ndarray, alphas: np.ndarray, sign: float,
                acquisition: str, score: float, heads: Sequence[tuple[np.ndarray, np.ndarray]] = (),
                log_pf: np.ndarray | None = None) -> dict[str, Any]:
    """The prediction a suggestion is chosen on: the objective's (with several objectives, one per
    objective under ``"objectives"``), and each constraint's (``heads``: the calibrated quantiles and
    alphas of every snapshot head) under ``"constraints"``."""
    pred = _outcome(snap.bounds, snap.method, snap.levels, row, Q, alphas, sign,
                    Warp.from_dict(snap.meta.get("warp")))
    if snap.meta.get("directions"):
        pred = {"objectives": [pred] + [
            _outcome(h.bounds(snap.method), snap.method, snap.levels, row, Qh, ah, h.sign, Warp.from_dict(h.warp))
            for h, (Qh, ah) in zip(snap.heads, heads, strict=True) if h.kind == "objective"]}
    pred.update(surrogate=snap.surrogate, fitted_on=snap.n_obs, acquisition=acquisition, score=_finite(score))
    if any(h.kind == "constraint" for h in snap.heads):
        pred["constraints"] = [
            _outcome(h.bounds(snap.method), snap.method, snap.levels, row, Qh, ah, h.sign, Warp.from_dict(h.warp))
            for h, (Qh, ah) in zip(snap.heads, heads, strict=True) if h.kind == "constraint"]
        pred["feasibility"] = float(np.exp(log_pf[row])) if log_pf is not None else None
    return pred


def warmup_points(space: SearchSpace, seed: int, start: int, count: int,
                  exclude: set[bytes]) -> np.ndarray:
    """Points ``start..`` of the study's scrambled Sobol sequence, skipping excluded ones."""
    out, keys, pos = [], set(), start
    while len(out) < count and pos < start + 64 * count + 64:
        batch = space.sample(count, seed, skip=pos)
        for row, k in zip(batch, space.keys(batch), strict=True):
            pos += 1
            if k not in exclude and k not in keys:
                keys.add(k)
                out.append(row)
                if len(out) == count:
                    break
    rng = np.random.default_rng([seed, start])
    size = space.size
    tries = 0
    while len(out) < count and tries < 1000:  # small discrete space: uniform draws for what is left
        if size is not None and len(keys) + len(exclude) >= size and len(keys | set(exclude)) >= size:
            break  # every configuration is taken
        tries += 1
        batch = space.sample_uniform(64, rng)
        for row, k in zip(batch, space.keys(batch), strict=True):
            if k not in exclude and k not in keys:
                keys.add(k)
                out.append(row)
                if len(out) == count:
                    break
    return np.array(out).reshape(-1, space.dim)


def select(
    snapshot: Snapshot | None,
    states: Sequence[AdaptiveState],
    space: SearchSpace,
    config: EngineConfig,
    *,
    count: int = 1,
    direction: str = "minimize",
    seed: int = 0,
    asked: int = 0,
    exclude: Sequence[dict[str, Any]] = (),
    pending: Sequence[dict[str, Any]] = (),
    n_observed: int | None = None,
    exclude_keys: Collection[bytes] = (),
    head_states: Sequence[Sequence[AdaptiveState]] = (),
) -> list[Suggestion]:
    """``count`` distinct configurations.

    ``head_states``: the adaptive states of each snapshot head (its constraints), one list per
    head; the acquisition is weighed by the calibrated probability of feasibility.

    ``exclude``: configurations never to return (observed since the snapshot,
    failed ...). ``pending``: running configurations; never returned, and the
    choice is conditioned on them as ``config.crowd`` says (``engine.crowd``),
    as is each further choice of a batch on the ones before it. ``asked``: how many trials
    the study has asked so far (position in its warm-start sequence and the
    select rng's key). ``exclude_keys``: like ``exclude``, as ``space.keys``
    of the configurations (what the service stores with each trial). Before
    the warm-up (``EngineConfig.warmed_up``: ``n_warmup`` trials launched, counting ``pending``),
    or without a snapshot, points come from the study's scrambled Sobol sequence.
    """
    sign = _sign(direction)
    rng = np.random.default_rng([seed, asked, 11])
    pend_unit = space.to_unit(list(pending)) if pending else np.empty((0, space.dim))
    pend_keys = space.keys(pend_unit) if pending else []
    busy_keys = set(pend_keys)
    if exclude:
        busy_keys.update(space.keys(space.to_unit(list(exclude))))
    busy_keys.update(exclude_keys)
    n_obs = snapshot.n_obs if n_observed is None and snapshot is not None else (n_observed or 0)
    if snapshot is None or not config.warmed_up(n_obs, len(pending)):
        if snapshot is not None:
            busy_keys |= set(space.keys(snapshot.observed))
        pts = warmup_points(space, seed, asked, count, busy_keys)
        return [Suggestion(p, None) for p in space.from_unit(pts)] if len(pts) else []

    cand = snapshot.candidates
    keys = snapshot.candidate_keys()
    if "index" not in snapshot.cache:  # candidate key -> row, once per snapshot
        snapshot.cache["index"] = {k: i for i, k in enumerate(keys)}
    index = snapshot.cache["index"]
    alive = np.ones(cand.shape[0], dtype=bool)
    if len(index) == len(keys):  # distinct candidates (fit's own set): one lookup per busy key
        alive[[index[k] for k in busy_keys if k in index]] = False
    elif busy_keys:  # given candidates may repeat a configuration
        alive &= np.array([k not in busy_keys for k in keys])
    alphas = np.array([s.alpha for s in states], dtype=float)
    Q = snapshot.bounds.at(alphas)  # what each suggestion's prediction reports, and adapt scores
    dirs = snapshot.meta.get("directions")
    narrowed = _narrows(config, several=bool(dirs))
    view = crowd.Crowd(config.crowd, snapshot, space, _scored(Q, snapshot.signal if narrowed else None),
                       config.diversity * math.sqrt(space.dim))
    if pending:
        view.add(view.rows_of(pend_unit, pend_keys, index))

    heads, log_pf = [], None
    if snapshot.heads:
        if len(head_states) != len(snapshot.heads):
            raise ValueError(f"the snapshot has {len(snapshot.heads)} constraint heads; "
                             f"{len(head_states)} adaptive states were given")
        for h, hs in zip(snapshot.heads, head_states, strict=True):
            ah = np.array([st.alpha for st in hs], dtype=float)
            heads.append((h.bounds(snapshot.method).at(ah), ah))
        log_pf = sum(acq.log_prob_below(Qh, snapshot.levels, h.threshold)
                     for h, (Qh, _) in zip(snapshot.heads, heads, strict=True) if h.kind == "constraint")
    any_feasible = snapshot.meta.get("n_feasible", 1) > 0
    acquisition, mo = config.acquisition, None
    if dirs:  # several objectives: the first is the snapshot's own outcome, the others its objective heads
        objective = [i for i, h in enumerate(snapshot.heads) if h.kind == "objective"]
        Qs = [view.Q] + [_scored(heads[i][0], snapshot.heads[i].signal) for i in objective]
        warps = [Warp.from_dict(snapshot.meta.get("warp"))] + [Warp.from_dict(snapshot.heads[i].warp) for i in objective]
        mo = _MultiScore(config, [_sign(d) for d in dirs], snapshot.observed_y, snapshot.observed_ok, warps,
                         snapshot.levels, np.random.default_rng([seed, asked, 17]))
        acquisition = "logei"  # -log of an expected improvement: how crowd penalties and feasibility combine

    def score(Qv: np.ndarray, best: float) -> np.ndarray:
        if mo is None:
            sc = acq.score(config.acquisition, Qv, snapshot.levels, best=best, rng=rng, ucb_pair=config.ucb_pair)
        else:  # the believer narrows each objective with its own kernel (view.shrinks)
            believer = view.mode == "believer" and bool(view.rows)
            shrinks = view.shrinks() if believer else [None] * len(Qs)
            sc = mo([Qj if f is None else crowd.narrow(Qj, f) for Qj, f in zip(Qs, shrinks, strict=True)],
                    believed=crowd.believed_points(Qs, view.rows) if believer else None)
        return sc if log_pf is None else _with_feasibility(sc, log_pf, acquisition, any_feasible)

    rows: list[int] = []
    preds: list[dict[str, Any]] = []
    for _ in range(count):
        pool = alive & view.allowed()
        if not pool.any():
            pool = alive
        if not pool.any():
            break
        if mo is not None and mo.kind == "parego":  # ParEGO: a fresh scalarisation for every choice
            mo.weights = multi.simplex_weights(mo.m, rng)
        sc = view.scores(score, acquisition)
        idx = np.flatnonzero(pool)
        row = int(idx[np.argmin(sc[idx])])
        rows.append(row)
        # the prediction is the calibrated one: the running points' outcomes are not known
        preds.append(_prediction(snapshot, row, Q, alphas, sign, mo.kind if mo else config.acquisition, sc[row],
                                 heads, log_pf))
        alive[row] = False
        if len(rows) < count:  # the next choice of the batch is conditioned on this one
            view.add([row])
    params = space.from_unit(cand[rows]) if rows else []
    out = [Suggestion(p, pred) for p, pred in zip(params, preds, strict=True)]
    if len(out) < count:
        # The snapshot's candidates are used up (a crowd asked faster than fits land): the rest
        # comes from the study's quasi-random sequence, without a prediction, rather than nothing.
        taken = busy_keys | set(snapshot.candidate_keys()[r] for r in rows) | set(space.keys(snapshot.observed))
        pts = warmup_points(space, seed, asked + len(out), count - len(out), taken)
        out += [Suggestion(p, None) for p in space.from_unit(pts)] if len(pts) else []
    return out


# ---------------------------------------------------------------------- adapt
def adapt(
    states: Sequence[AdaptiveState], prediction: dict[str, Any] | None, value: float
) -> tuple[list[AdaptiveState], dict[str, Any] | None]:
    """Update every pair's alpha with the observed ``value``; return the calibration record.

    Raw (unconformalized) predictions are recorded but do not move alpha: there
    are no scores to re-weight yet. ACI is updated with the breach of the interval
    the prediction showed (each pair's own conformal set, nested with the others by
    ``conformal.nested``), so that the shown intervals are the calibrated ones and a
    state that moved since the ask (late feedback) reads the interval issued. DtACI's
    experts are updated with ``beta_t`` of the pair's own set, shifted by the move of
    its alpha since the ask (``conformal.issued_beta``).
    """
    if prediction is None:
        return list(states), None
    covered, widths, betas = [], [], []
    for iv in prediction["intervals"]:
        covered.append(bool(iv["lower"] <= value <= iv["upper"]))
        widths.append(float(iv["upper"] - iv["lower"]))
    new = list(states)
    pts = prediction.get("points")
    if pts is not None:
        pts = np.asarray(pts, dtype=float)  # (2, P, n), from select (or a JSON round trip of it)
        y_int = float(Warp.from_dict(prediction.get("warp")).forward(prediction.get("sign", 1.0) * value))
        weighted = prediction.get("shift") == "fcs"
        new = []
        for j, (s, iv) in enumerate(zip(states, prediction["intervals"], strict=True)):
            beta = beta_of(pts[0, j], pts[1, j], y_int, weighted)
            betas.append(beta)
            if isinstance(s, ACIState):  # ACI calibrates the interval shown: its own set, nested
                new.append(s.missed(not covered[j]))
            else:  # DtACI's experts need beta; late feedback: see issued_beta
                new.append(s.update(issued_beta(beta, s.alpha, iv["alpha"])))
    record = {
        "method": prediction["method"],
        "coverage": [iv["coverage"] for iv in prediction["intervals"]],
        "alpha": [iv["alpha"] for iv in prediction["intervals"]],
        "covered": covered,
        "lower": [float(iv["lower"]) for iv in prediction["intervals"]],
        "upper": [float(iv["upper"]) for iv in prediction["intervals"]],
        "width": widths,
        "beta": betas or None,
        "mean": prediction.get("mean"),
        "levels": prediction["levels"],
        "quantiles": prediction["quantiles"],
        "value": value,
    }
    return new, record


def adapt_constraints(head_states: Sequence[Sequence[AdaptiveState]], prediction: dict[str, Any] | None,
                      values: Sequence[float] | None, key: str = "constraints",
                      ) -> tuple[list[list[AdaptiveState]], list[dict[str, Any]] | None]:
    """``adapt`` for each constraint head (``key="objectives"``: each objective of a multi-objective
    prediction): its own states, prediction and told value."""
    preds = (prediction or {}).get(key)
    if not preds or values is None:
        return [list(hs) for hs in head_states], None
    out, records = [], []
    for hs, pred, v in zip(head_states, preds, values, strict=True):
        new, record = adapt(hs, pred, float(v))
        out.append(new)
        records.append(record)
    return out, records


def _jsonable(pred: dict[str, Any] | None) -> dict[str, Any] | None:
    if pred is None:
        return pred
    out = dict(pred)
    if isinstance(out.get("points"), np.ndarray):
        out["points"] = out["points"].tolist()
    for key in ("constraints", "objectives"):
        if out.get(key):
            out[key] = [_jsonable(c) for c in out[key]]
    return out


# ------------------------------------------------------------------ Optimizer
class Optimizer:
    """In-process ask/tell over ``fit`` / ``select`` / ``adapt``.

    >>> opt = Optimizer({"x": {"type": "float", "low": -5, "high": 5}}, seed=1)
    >>> s = opt.ask()[0]
    >>> opt.tell(s.params, s.params["x"] ** 2, s.prediction)

    ``constraints``: the names of outcome constraints every ``tell`` then carries values for (a
    trial is feasible when each is <= 0); ``best`` is the best feasible observation.
    ``enqueue(params)`` hands a configuration (or part of one: the rest is chosen) out at the next
    ask; ``add(params, value)`` records a trial evaluated elsewhere (no prediction: it feeds the fit
    and the best, never the calibration state).

    ``directions`` (2 to 4, instead of ``direction``): several objectives. Every ``tell`` and ``add``
    then takes a list of values, one per objective; each objective has its own calibrated surrogate
    and ACI/DtACI state (``objective_states``), ask chooses by expected hypervolume improvement (two
    objectives) or ParEGO (three or four, ``config.multi_acquisition``), and ``pareto`` holds the
    non-dominated (feasible) observations in place of ``best``.
    """

    def __init__(
        self,
        space: SearchSpace | dict[str, Any],
        direction: str = "minimize",
        seed: int = 0,
        surrogate: str | None = None,
        acquisition: str | None = None,
        n_warmup: int | None = None,
        config: EngineConfig | dict[str, Any] | None = None,
        constraints: Sequence[str] = (),
        directions: Sequence[str] | None = None,
        **settings: Any,
    ) -> None:
        self.space = SearchSpace.from_dict(space)
        if directions is not None and not (isinstance(directions, (list, tuple)) and len(directions) == 1):
            self.directions = check_directions(directions)
        else:
            self.directions = tuple(directions or (direction,))
        direction = self.directions[0]
        _sign(direction)
        self.direction = direction
        self.seed = int(seed)
        cfg = config if isinstance(config, EngineConfig) else EngineConfig.from_dict(config)
        over = {k: v for k, v in (("surrogate", surrogate), ("acquisition", acquisition),
                                  ("n_warmup", n_warmup)) if v is not None}
        self.config = replace(cfg, **over, **settings).for_objectives(len(self.directions))
        self.constraints = check_constraint_names(constraints)
        if self.multi:
            try:
                multi.resolve(self.config.multi_acquisition, len(self.directions))
            except ValueError as e:
                raise ConfigError("multi_acquisition", str(e)) from None
        ref = self.config.reference_point
        if ref is not None and len(ref) != len(self.directions):
            raise ConfigError("reference_point", f"must have one value per objective ({len(self.directions)})")
        self.states: list[AdaptiveState] = initial_states(self.config, self.seed)
        self.objective_states: list[list[AdaptiveState]] = [
            initial_states(self.config, self.seed + 101 + j) for j in range(1, len(self.directions))]
        self.constraint_states: list[list[AdaptiveState]] = [
            initial_states(self.config, self.seed + 1 + j) for j in range(len(self.constraints))]
        self.observations: list[tuple[dict[str, Any], Any]] = []  # (params, value or list of values)
        self.constraint_values: list[list[float]] = []  # one row per observation, when there are constraints
        self.failed: list[dict[str, Any]] = []  # added failed trials: never suggested again
        self.waiting: list[dict[str, Any]] = []  # enqueued (partial) configurations, handed out first
        self.pending: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        self.records: list[dict[str, Any]] = []
        self.asked = 0
        self._snapshot: Snapshot | None = None
        # (observations, running configurations) the snapshot was (or, restored, is to be) fitted with:
        # fit conditions on the running trials, and state_dict's "fitted_with" lets a restored optimizer
        # refit the same snapshot on the same observations
        self._fitted_with: tuple[int, list[dict[str, Any]]] | None = None
        self.timings: dict[str, float] = {"fit": 0.0, "select": 0.0, "adapt": 0.0}

    # ----------------------------------------------------------------- ask
    @property
    def snapshot(self) -> Snapshot | None:
        n = len(self.observations)
        if not self.config.warmed_up(n, len(self.pending)):
            return None
        if self._snapshot is None or self._snapshot.n_obs != n:
            t = time.perf_counter()
            pending = self._fit_pending()
            if pending is None:
                pending = [p for p, _ in self.pending]
            self._fitted_with = (n, pending)
            self._snapshot = fit(self.observations, self.space, self.config, self.direction, self.seed,
                                 pending=pending,
                                 constraints=self.constraint_values if self.constraints else None,
                                 directions=self.directions if self.multi else None)
            self.timings["fit"] += time.perf_counter() - t
        return self._snapshot

    def _fit_pending(self) -> list[dict[str, Any]] | None:
        """The running configurations the snapshot of the present observations was fitted with (or, in
        a restored optimizer that has not fitted it yet, will be); None when there is none."""
        if self._fitted_with is not None and self._fitted_with[0] == len(self.observations):
            return self._fitted_with[1]
        return None

    def ask(self, n: int = 1) -> list[Suggestion]:
        """``n`` new configurations, distinct from every observed and pending one, chosen together;
        enqueued configurations first, in order."""
        if not isinstance(n, int) or n < 1:
            raise ValueError("n must be a positive integer")
        queued = [self.waiting.pop(0) for _ in range(min(n, len(self.waiting)))]
        fixed = [q for q in queued if self.space.complete(q)]
        partial = [q for q in queued if not self.space.complete(q)]
        chosen: list[Suggestion] = []
        if n - len(fixed) > 0:
            snap = self.snapshot
            t = time.perf_counter()
            chosen = select(
                snap, self.states, self.space, self.config, count=n - len(fixed), direction=self.direction,
                seed=self.seed, asked=self.asked, exclude=[p for p, _ in self.observations] + self.failed,
                pending=[p for p, _ in self.pending] + fixed, n_observed=len(self.observations),
                head_states=self.objective_states + self.constraint_states if snap is not None and snap.heads else (),
            )
            self.timings["select"] += time.perf_counter() - t
        rng = np.random.default_rng([self.seed, self.asked, 13])
        # a partly enqueued configuration takes the rest from a chosen one (no prediction: it was not chosen)
        out = [Suggestion(dict(q), None) for q in fixed]
        out += [Suggestion(self.space.fill(q, s.params, rng), None) for q, s in zip(partial, chosen, strict=False)]
        out += chosen[len(partial):]
        for sug in out:  # a suggestion's prediction stays plain JSON for in-process users
            sug.prediction = _jsonable(sug.prediction)
        self.asked += len(out)
        self.pending.extend((s.params, s.prediction) for s in out)
        return out

    def enqueue(self, params: dict[str, Any]) -> None:
        """Hand ``params`` (all of a configuration, or some: the rest is chosen at ask) out next."""
        self.waiting.append(self.space.validate_partial(params))

    # ---------------------------------------------------------------- tell
    @property
    def multi(self) -> bool:
        """Several objectives."""
        return len(self.directions) > 1

    def _value(self, value: Any) -> Any:
        return check_values(value, len(self.directions), "value") if self.multi else check_value(value)

    def tell(self, params: dict[str, Any], value: Any, prediction: dict[str, Any] | None = None,
             constraints: Sequence[float] | None = None) -> None:
        """Record ``value`` (a list of values, one per objective, with several objectives; and the
        constraint values) for ``params``; a pending suggestion's prediction adapts the calibration
        states (ACI / DtACI), as does ``prediction`` when given.
        Raises ``ParamError`` for a bad value, constraints or params."""
        params = self.space.validate(params)
        value = self._value(value)
        cons = self._constraint_values(constraints)
        key = self.space.key(params)
        for i, (p, pred) in enumerate(self.pending):
            if self.space.key(p) == key:
                del self.pending[i]
                prediction = prediction if prediction is not None else pred
                break
        t = time.perf_counter()
        if self.multi:
            every, records = adapt_constraints([self.states, *self.objective_states], prediction, value, "objectives")
            self.states, self.objective_states = every[0], every[1:]
            record = None if records is None else {"objectives": records}
        else:
            self.states, record = adapt(self.states, prediction, value)
        if self.constraints:
            self.constraint_states, cons_records = adapt_constraints(self.constraint_states, prediction, cons)
            if record is not None and cons_records is not None:
                record["constraints"] = cons_records
        self.timings["adapt"] += time.perf_counter() - t
        if record is not None:
            self.records.append(record)
        self._observe(params, value, cons)

    def add(self, params: dict[str, Any], value: float | None = None, constraints: Sequence[float] | None = None,
            state: str = "complete") -> None:
        """Record a trial evaluated elsewhere: it feeds the next fit and the best, and is never suggested
        again, but it was not chosen on a prediction, so the calibration state does not move.
        ``state="failed"`` records a configuration that failed (no value)."""
        params = self.space.validate(params)
        if state == "failed":
            if value is not None:
                raise ParamError("value", "a failed trial has no value")
            self.failed.append(params)
            return
        if state != "complete":
            raise ParamError("state", "must be complete or failed")
        self._observe(params, self._value(value), self._constraint_values(constraints))

    def _constraint_values(self, constraints: Sequence[float] | None) -> list[float] | None:
        if not self.constraints:
            if constraints:
                raise ParamError("constraints", "the optimizer has no constraints")
            return None
        if constraints is None or len(constraints) != len(self.constraints):
            raise ParamError("constraints", f"needs {len(self.constraints)} values, one per constraint "
                                            f"{list(self.constraints)}")
        return [check_value(c) for c in constraints]

    def _observe(self, params: dict[str, Any], value: Any, cons: list[float] | None) -> None:
        self.observations.append((params, value))
        if cons is not None:
            self.constraint_values.append(cons)

    # ----------------------------------------------------------------- views
    def _feasible_rows(self) -> list[int]:
        rows = range(len(self.observations))
        if self.constraints:
            return [i for i in rows if all(c <= 0 for c in self.constraint_values[i])]
        return list(rows)

    @property
    def best(self) -> tuple[dict[str, Any], float] | None:
        """``(params, value)`` of the best feasible observation so far, or None. With several objectives
        there is no single best: see ``pareto``."""
        if self.multi:
            raise ValueError("a multi-objective optimizer has no single best observation: see pareto")
        rows = self._feasible_rows()
        if not rows:
            return None
        pick = min if self.direction == "minimize" else max
        return self.observations[pick(rows, key=lambda i: self.observations[i][1])]

    def _minimised(self, rows: Sequence[int]) -> np.ndarray:
        signs = np.array([_sign(d) for d in self.directions])
        return np.array([self.observations[i][1] for i in rows], dtype=float).reshape(-1, len(signs)) * signs

    @property
    def pareto(self) -> list[tuple[dict[str, Any], list[float]]]:
        """``(params, values)`` of the non-dominated feasible observations (several objectives)."""
        if not self.multi:
            raise ValueError("pareto is for several objectives: see best")
        rows = self._feasible_rows()
        if not rows:
            return []
        keep = multi.pareto_mask(self._minimised(rows))
        return [self.observations[i] for i, k in zip(rows, keep, strict=True) if k]

    def hypervolume(self, reference_point: Sequence[float] | None = None) -> float:
        """The hypervolume the feasible observations dominate (several objectives), up to
        ``reference_point`` (the objectives' own units; default ``config.reference_point``, else each
        objective's worst observed value plus a tenth of its observed range)."""
        if not self.multi:
            raise ValueError("hypervolume is for several objectives")
        signs = np.array([_sign(d) for d in self.directions])
        ref = reference_point if reference_point is not None else self.config.reference_point
        every = self._minimised(range(len(self.observations)))
        if ref is None:
            if not every.shape[0]:
                return 0.0
            r = multi.reference_point(every)
        else:
            r = np.asarray(ref, dtype=float) * signs
        return multi.hypervolume(self._minimised(self._feasible_rows()), r)

    def state_dict(self) -> dict[str, Any]:
        """Everything the optimizer holds, as JSON-able data (``from_state_dict`` resumes it)."""
        return {
            "version": 3,
            "space": self.space.to_dict(),
            "direction": self.direction,
            "directions": list(self.directions),
            "seed": self.seed,
            "config": self.config.to_dict(),
            "constraints": list(self.constraints),
            "observations": [[p, v] for p, v in self.observations],
            "constraint_values": self.constraint_values,
            "failed": self.failed,
            "waiting": self.waiting,
            "pending": [[p, pred] for p, pred in self.pending],
            # the running configurations the present snapshot was fitted with
            "fitted_with": self._fit_pending(),
            "states": [state_to_dict(s) for s in self.states],
            "constraint_states": [[state_to_dict(s) for s in hs] for hs in self.constraint_states],
            "objective_states": [[state_to_dict(s) for s in hs] for hs in self.objective_states],
            "records": self.records,
            "asked": self.asked,
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> Optimizer:
        """The optimizer ``state_dict`` described: its next ask is the one the original would make."""
        config = EngineConfig.from_dict(d["config"])
        opt = cls(d["space"], d["direction"], d["seed"], config=config, constraints=d.get("constraints", ()),
                  directions=d.get("directions"))
        opt.config = config  # as stored, not resolved again: a state from before a default keeps it
        opt.observations = [(dict(p), [float(x) for x in v] if opt.multi else float(v)) for p, v in d["observations"]]
        opt.constraint_values = [list(map(float, c)) for c in d.get("constraint_values", [])]
        opt.failed = [dict(p) for p in d.get("failed", [])]
        opt.waiting = [dict(p) for p in d.get("waiting", [])]
        opt.pending = [(dict(p), pred) for p, pred in d["pending"]]
        if d.get("fitted_with") is not None:
            opt._fitted_with = (len(opt.observations), [dict(p) for p in d["fitted_with"]])
        opt.states = [state_from_dict(s) for s in d["states"]]
        opt.constraint_states = [[state_from_dict(s) for s in hs] for hs in d.get("constraint_states", [])]
        opt.objective_states = [[state_from_dict(s) for s in hs] for hs in d.get("objective_states", [])]
        opt.records = list(d["records"])
        opt.asked = int(d["asked"])
        return opt
