"""Multi-fidelity pruning: which running trials to stop early, from the study's learning curves.

Pure functions of the stored curves (``Curve``: a trial's number, state and
``{step: value}``), so any replica holding the same database gives the same
answer. Values are losses once ``direction`` is applied (maximised metrics are
negated). Pruners:

- ``none``: never prune.
- ``median``: prune when the trial's best value so far is worse than the median
  of the completed trials' values at the same step (Optuna's MedianPruner rule),
  once ``n_startup_trials`` completed trials reported that step and past
  ``n_warmup_steps``.
- ``sh``: asynchronous successive halving (ASHA, Li et al. 2018). Rung ``k``
  sits at ``min_resource * reduction_factor ** (k + s)`` steps (``s`` the
  bracket's early-stopping rate). When a trial first reports a step at or past a
  rung, it is ranked by its value there among every trial that reached the rung;
  it goes on only if it is in the top ``max(1, n // reduction_factor)``.
- ``hb``: hyperband: each trial is drawn (reproducibly, from the study seed and
  its number) into one of the brackets ``s = 0 .. s_max`` with weights ``n_s``
  of Li et al. (2017), and runs ASHA against the trials of its bracket only.
- ``sh+`` / ``hb+``: the UQ-guided variants (Liu et al., "UQ-Guided Hyperparameter Optimization for Iterative
  Learners", NeurIPS 2024, sections 3.2-3.5):
  the number kept at a rung is not a fixed fraction but the ``k`` that balances
  exploration against exploitation (eq. 4-7) on the rung's confidence curve
  ``P_k`` (eq. 3), with each competitor's converged loss modelled as
  ``N(mu_c, sigma_c^2)``: ``mu_c`` its value at the rung and ``sigma_c`` the
  unbiased standard deviation of its last ``window + 1`` values (eq. 1).

Choices the paper leaves open, for the asynchronous setting of a service:

- eq. 3 is written for one shared sigma; here every competitor keeps its own:
  ``P_k = sum_{i <= k} Pr(candidate i is the minimum)``, integrated numerically;
- the round budget ``R`` of eq. 7 is what plain SH spends on the next round:
  ``(next rung - rung) * max(1, n // reduction_factor)`` steps;
- ``Delta_t sigma`` (eq. 6) is the appendix's estimate: the mean drop of the
  window's sigma from one step earlier to now; where it does not drop (early
  on, the curve's own trend dominates the window), the drop of a sigma that
  falls as ``t^-1/2``: ``sigma / (2 t)``;
- ``k`` maximises ``P_k + sum_{j > k} Delta c_up(j)`` (what dropping the
  ``n - k`` worst gains in reliability for what it loses in ``P``): the discrete
  optimum of eq. 4, whose first-order condition is eq. 7. Near-ties go to the
  smaller ``k``;
- a competitor with fewer than two values in its window takes the largest sigma
  among the others; when none has two (a rung at step 1: eq. 1 is undefined),
  nothing is known of the curves' uncertainty and the rung keeps every
  candidate: a ranking on one value per curve is the UQ-oblivious decision the
  scheme exists to avoid. (Falling back to SH's fraction there instead was
  measured too: ``benchmarks/multifidelity.py``, docs/benchmarks/multifidelity.md.)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import norm

from .errors import FieldError

PRUNERS = ("none", "median", "sh", "hb", "sh+", "hb+")
GRID = 512  # points of the numerical integrals of eq. 3 and 6


@dataclass(frozen=True)
class PrunerConfig:
    """A study's pruner and its settings (``pruner`` in the create request)."""

    name: str = "none"
    min_resource: int = 1  # steps before the first rung
    max_resource: int = 100  # steps of a full run: no pruning at or past it
    reduction_factor: int = 3
    window: int = 10  # delta of eq. 1: the sigma of a curve is over its last window + 1 values
    n_startup_trials: int = 5  # median: completed trials with a value at the step before it prunes
    n_warmup_steps: int = 0  # median: no pruning before this step
    min_early_stopping_rate: int = 0  # sh / sh+: the first rung at min_resource * factor ** rate
    feed_pruned: bool = False  # pruned trials' last values feed the surrogate (docs/concepts/pruning.md)

    LIMITS: ClassVar[dict[str, tuple[int, int]]] = {"min_resource": (1, 1_000_000), "max_resource": (1, 1_000_000),
              "reduction_factor": (2, 100), "window": (1, 1000), "n_startup_trials": (0, 10_000),
              "n_warmup_steps": (0, 1_000_000), "min_early_stopping_rate": (0, 30)}

    @classmethod
    def from_any(cls, value: Any) -> PrunerConfig:
        """From the create request's ``pruner``: a name, an object with ``name``, or None."""
        if value is None:
            return cls()
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, Mapping):
            raise FieldError("pruner", "must be a pruner name or an object with a name")
        d = dict(value)
        name = d.pop("name", "none")
        if name not in PRUNERS:
            raise FieldError("pruner.name", f"must be one of {', '.join(PRUNERS)}")
        kw: dict[str, Any] = {"name": name}
        for key, v in d.items():
            if key == "feed_pruned":
                if not isinstance(v, bool):
                    raise FieldError("pruner.feed_pruned", "must be true or false")
                kw[key] = v
                continue
            if key not in cls.LIMITS:
                raise FieldError(f"pruner.{key}",
                                 f"unknown pruner setting (known: {', '.join([*cls.LIMITS, 'feed_pruned'])})")
            lo, hi = cls.LIMITS[key]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise FieldError(f"pruner.{key}", f"must be an integer in [{lo}, {hi}]")
            kw[key] = v
        cfg = cls(**kw)
        if cfg.max_resource < cfg.min_resource:
            raise FieldError("pruner.max_resource", "must be at least min_resource")
        return cfg

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> PrunerConfig:
        return cls(**dict(d)) if d else cls()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Curve:
    """A trial's learning curve: ``values[step]``, as reported."""

    number: int
    state: str  # running, complete, pruned, failed
    values: dict[int, float] = field(default_factory=dict)

    def at_or_after(self, step: int) -> float | None:
        """Its value at the first reported step >= ``step`` (where it crossed that rung)."""
        later = [s for s in self.values if s >= step]
        return self.values[min(later)] if later else None


@dataclass(frozen=True)
class Decision:
    should_prune: bool
    rung: int | None = None  # the rung's step, when the report crossed one
    competitors: int = 0
    kept: int | None = None  # how many of them go on


# ------------------------------------------------------------------ rungs
def n_brackets(cfg: PrunerConfig) -> int:
    """Hyperband's ``s_max + 1``: brackets from ``min_resource`` up to ``max_resource``."""
    ratio = cfg.max_resource / cfg.min_resource
    return max(1, int(math.floor(math.log(ratio, cfg.reduction_factor) + 1e-9)) + 1)


@functools.lru_cache(maxsize=1 << 16)  # asked for every competitor at every judged report
def bracket_of(cfg: PrunerConfig, number: int, seed: int) -> int:
    """The hyperband bracket (its early-stopping rate) of trial ``number``: drawn with weights
    ``n_s = ceil((s_max + 1) / (s + 1) * eta ** s)`` (Li et al. 2017), reproducibly."""
    s_max = n_brackets(cfg) - 1
    eta = cfg.reduction_factor
    weights = np.array([math.ceil((s_max + 1) / (s + 1) * eta ** s) for s in range(s_max + 1)], float)
    u = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(number), 0x4842]).random()
    s = int(np.searchsorted(np.cumsum(weights) / weights.sum(), u, side="right"))
    return s_max - min(s, s_max)  # bracket s runs s rungs: its first rung at min_resource * eta ** (s_max - s)


def rungs(cfg: PrunerConfig, rate: int) -> list[int]:
    """Rung steps below ``max_resource`` for early-stopping rate ``rate``."""
    out: list[int] = []
    k = 0
    while True:
        r = cfg.min_resource * cfg.reduction_factor ** (rate + k)
        if r >= cfg.max_resource:
            return out
        out.append(r)
        k += 1


# ------------------------------------------------------------ uq-guided
def window_sigma(values: Mapping[int, float], step: int, window: int) -> float | None:
    """eq. 1: the unbiased std of the curve's values at steps in ``[step - window, step]``."""
    w = [v for s, v in values.items() if step - window <= s <= step]
    return float(np.std(w, ddof=1)) if len(w) >= 2 else None


def _grid(mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    return np.linspace(float(np.min(mu - 8 * sigma)), float(np.max(mu + 8 * sigma)), GRID)


def argmin_probabilities(mu: ArrayLike, sigma: ArrayLike) -> np.ndarray:
    """``Pr(candidate i has the smallest converged loss)`` for independent ``N(mu_i, sigma_i^2)``."""
    m, sd = np.asarray(mu, float), np.asarray(sigma, float)
    x = _grid(m, sd)
    z = (x[None, :] - m[:, None]) / sd[:, None]
    pdf = norm.pdf(z) / sd[:, None]
    log_sf = norm.logsf(z)
    total = log_sf.sum(axis=0)
    p: NDArray[np.float64] = np.trapezoid(pdf * np.exp(total[None, :] - log_sf), x, axis=1)
    s = p.sum()
    return p / s if s > 0 else np.full(len(m), 1.0 / len(m))


def confidence_curve(mu: ArrayLike, sigma: ArrayLike) -> np.ndarray:
    """eq. 3: ``P_k`` for ``k = 1..n``, candidates sorted by ``mu``: the probability that the best
    converged loss is among the first ``k``."""
    order = np.argsort(mu, kind="stable")
    return np.cumsum(argmin_probabilities(np.asarray(mu)[order], np.asarray(sigma)[order]))


def _first_is_best(mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """For each ``k``: ``Pr(candidate 0 beats candidates 1..k-1)`` (``mu`` sorted)."""
    x = _grid(mu, sigma)
    pdf0 = norm.pdf((x - mu[0]) / sigma[0]) / sigma[0]
    log_sf = norm.logsf((x[None, :] - mu[1:, None]) / sigma[1:, None])
    cum = np.vstack([np.zeros_like(x), np.cumsum(log_sf, axis=0)])
    out: NDArray[np.float64] = np.trapezoid(pdf0[None, :] * np.exp(cum), x, axis=1)
    return out


def uq_keep(mu: Sequence[float] | np.ndarray, sigma: ArrayLike, delta_sigma: float, round_budget: float) -> int:
    """How many of the candidates to keep (eq. 4-7): the ``k`` maximising
    ``P_k + sum_{j > k} R / (j (j - 1)) * zeta(j)``, with ``zeta(j)`` (eq. 6) the gain in
    ``Pr(the leader is the best of the top j)`` from one more step of training (sigma down by
    ``delta_sigma``)."""
    n = len(mu)
    if n <= 1:
        return n
    order = np.argsort(mu, kind="stable")
    m, s = np.asarray(mu, float)[order], np.asarray(sigma, float)[order]
    p = np.cumsum(argmin_probabilities(m, s))
    s_next = np.maximum(s - delta_sigma, s * 1e-3)
    zeta = _first_is_best(m, s_next) - _first_is_best(m, s)  # index j-1: the top j
    j = np.arange(2, n + 1)
    up = np.zeros(n + 1)
    up[2:] = round_budget / (j * (j - 1)) * np.maximum(zeta[1:], 0.0)
    tail = np.concatenate([np.cumsum(up[::-1])[::-1][1:], [0.0]])  # tail[k] = sum_{j > k} up[j]
    gain = p + tail[1:n + 1]
    if not np.all(np.isfinite(gain)):  # degenerate spreads (ties at a bound): keep them all
        return n
    best = gain.max()
    return int(np.flatnonzero(gain >= best - 1e-9 * max(1.0, abs(best)))[0]) + 1


# -------------------------------------------------------------- decide
def _loss(values: Mapping[int, float], sign: float) -> dict[int, float]:
    return {s: sign * v for s, v in values.items()}


def judged_rung(cfg: PrunerConfig, trial: int, step: int, earlier: Iterable[int], seed: int = 0) -> int | None:
    """The rung at which a report of ``trial`` at ``step`` is judged (the sh / hb family: the highest
    rung crossed since its previous report, ``earlier`` its reported steps), or None."""
    rate = bracket_of(cfg, trial, seed) if cfg.name.startswith("hb") else cfg.min_early_stopping_rate
    prev = max((s for s in earlier if s < step), default=-1)
    crossed = [r for r in rungs(cfg, rate) if prev < r <= step]
    return crossed[-1] if crossed else None


def may_prune(cfg: PrunerConfig, trial: int, step: int, earlier: Iterable[int], seed: int = 0) -> bool:
    """Whether a report of ``trial`` at ``step`` can be pruned at all (``earlier``: its reported
    steps). Where not, ``decide`` answers False without looking at the other curves: a caller that
    reads them from storage asks this first."""
    if cfg.name == "none" or step >= cfg.max_resource:
        return False
    if cfg.name == "median":
        return step >= cfg.n_warmup_steps
    return judged_rung(cfg, trial, step, earlier, seed) is not None


def decide(cfg: PrunerConfig, direction: str, trial: int, step: int, curves: Sequence[Curve],
           seed: int = 0) -> Decision:
    """Should trial ``trial``, which has just reported ``step`` (its curve in ``curves`` includes
    it), stop? ``curves``: every trial of the study with reports (failed ones are ignored)."""
    sign = -1.0 if direction == "maximize" else 1.0
    by = {c.number: c for c in curves if c.state != "failed"}
    me = by.get(trial)
    if me is None or step not in me.values:
        raise ValueError(f"trial {trial} has no report at step {step}")
    if not may_prune(cfg, trial, step, me.values, seed):
        return Decision(False)
    if cfg.name == "median":
        return _median(cfg, sign, me, step, by.values())
    rung = judged_rung(cfg, trial, step, me.values, seed)
    assert rung is not None  # may_prune said so
    rate = cfg.min_early_stopping_rate
    pool = list(by.values())
    if cfg.name.startswith("hb"):
        rate = bracket_of(cfg, trial, seed)
        pool = [c for c in pool if bracket_of(cfg, c.number, seed) == rate]
    values = {c.number: c.at_or_after(rung) for c in pool}
    known = {n: v for n, v in values.items() if v is not None}
    numbers = list(known)
    mu = np.array([sign * known[n] for n in numbers])
    n = len(numbers)
    keep = max(1, n // cfg.reduction_factor)
    if cfg.name.endswith("+") and n > 1:
        # the curves' spreads and the confidence curve are those of the losses scaled by a power of
        # two that keeps their squares finite (any finite report is valid, up to +-1.8e308): a
        # location-scale model's probabilities do not depend on the scale
        scale = _safe_scale([v for k in numbers for v in by[k].values.values()])
        uq = _uq_keep_at(cfg, sign * scale, rung, [by[k] for k in numbers], mu * scale, rate)
        keep = n if uq is None else uq
    rank = int(np.sum(mu < sign * known[trial])) + sum(
        1 for k, v in zip(numbers, mu, strict=True) if v == sign * known[trial] and k < trial)
    return Decision(rank >= keep, rung=rung, competitors=n, kept=keep)


SAFE = 1e150  # losses are scaled below this for the UQ-guided computations (their squares stay finite)


def _safe_scale(values: Sequence[float]) -> float:
    """1.0 for ordinary values; else the power of two (exact) that brings them within +-SAFE."""
    top = max((abs(v) for v in values), default=0.0)
    return 1.0 if top <= SAFE else 2.0 ** -math.ceil(math.log2(top / SAFE))


def _uq_keep_at(cfg: PrunerConfig, sign: float, rung: int, pool: list[Curve], mu: np.ndarray,
                rate: int) -> int | None:
    """The UQ-guided keep count at ``rung`` (None: no curve has two points in its window: keep all)."""
    sig, prev_sig = [], []
    for c in pool:
        loss = _loss(c.values, sign)
        at = min(s for s in c.values if s >= rung)  # the step it crossed the rung at
        sig.append(window_sigma(loss, at, cfg.window))
        earlier = [s for s in c.values if s < at]
        prev_sig.append(window_sigma(loss, max(earlier), cfg.window) if earlier else None)
    known = [s for s in sig if s is not None]
    if not known:
        return None
    fill = max(known)
    floor = 1e-9 * max(1.0, float(np.max(np.abs(mu))))
    sigma = np.array([max(s if s is not None else fill, floor) for s in sig])
    drops = [p - s for p, s in zip(prev_sig, sig, strict=True) if p is not None and s is not None]
    delta = float(np.mean(drops)) if drops else 0.0
    if delta <= 0:  # the window's sigma still grows (early, the trend dominates it): sigma(t) ~ t^-1/2
        delta = float(np.mean(sigma)) / (2.0 * rung)
    later = [r for r in rungs(cfg, rate) if r > rung]
    step_next = (later[0] if later else cfg.max_resource) - rung
    budget = step_next * max(1, len(pool) // cfg.reduction_factor)
    return uq_keep(mu, sigma, delta, budget)


def _median(cfg: PrunerConfig, sign: float, me: Curve, step: int, curves: Any) -> Decision:
    if step < cfg.n_warmup_steps:
        return Decision(False)
    others = [sign * c.values[step] for c in curves if c.state == "complete" and step in c.values]
    if len(others) < max(1, cfg.n_startup_trials):
        return Decision(False)
    best = min(sign * v for s, v in me.values.items() if s <= step)
    return Decision(bool(best > _median_of(others)), competitors=len(others))


def _median_of(v: Sequence[float]) -> float:
    """``np.median``, whose mean of the two middle values overflows near +-1.8e308: there the halves
    are added instead (the same number wherever the sum is finite)."""
    m = float(np.median(v))
    if np.isfinite(m):
        return m
    s = np.sort(np.asarray(v, dtype=float))
    k = s.size // 2
    return float(s[k]) if s.size % 2 else float(s[k - 1] / 2.0 + s[k] / 2.0)
