"""Adaptive conformal intervals: ACI and DtACI, as plain serialisable state.

One state per interval pair. Each update takes ``beta_t``, the largest
miscoverage at which the observed value was still inside the interval built
for it at ask time (paper 002, eq. 20): the value is inside ``C(a)`` iff
``a < beta_t``, so a breach at level ``a`` is ``err = 1[a >= beta_t]``.

ACI (eq. 19):     a_{t+1} = a_t + gamma (alpha - err_t)

DtACI (eq. 20-24, Gibbs & Candes 2022, Algorithm 1), with K experts of learning
rates ``gammas``:

    wbar_i = w_i exp(-eta * l(beta_t, a_i))          l: pinball loss at level alpha
    w_i   <- (1 - sigma) wbar_i + sigma * sum(wbar) / K
    a_i   <- a_i + gamma_i (alpha - err_i)
    a_t   ~  a_i with probability w_i / sum(w)

    eta = sqrt(3/L * (log(L K) + 2) / ((1-alpha)^2 alpha^2)),  sigma = 1/(2L)

The draw is a splitmix64 hash of ``(seed, step)``, so that an update is a pure
function of the state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import reprs

DEFAULT_GAMMAS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128)


def pinball(beta: float, theta: np.ndarray | float, alpha: float) -> np.ndarray:
    """Gibbs & Candes' loss l(beta, theta) = alpha (beta - theta) - min(0, beta - theta)."""
    d = beta - np.asarray(theta, dtype=float)
    return alpha * d - np.minimum(0.0, d)


@dataclass
class ACIState:
    target: float  # nominal miscoverage alpha of this pair
    alpha: float  # current alpha_t
    gamma: float = 0.01
    steps: int = 0
    kind: str = "aci"

    def update(self, beta: float) -> ACIState:
        return self.missed(self.alpha >= beta)

    def missed(self, miss: bool) -> ACIState:
        """eq. 19 with the breach of the interval issued (``engine.optimizer.adapt`` passes whether the
        interval a prediction showed missed the outcome)."""
        err = 1.0 if miss else 0.0
        return ACIState(self.target, self.alpha + self.gamma * (self.target - err), self.gamma,
                        self.steps + 1)


@dataclass
class DtACIState:
    target: float
    alpha: float
    experts: list[float]
    weights: list[float]
    gammas: list[float] = field(default_factory=lambda: list(DEFAULT_GAMMAS))
    window: int = 50  # L in eq. 24
    seed: int = 0
    steps: int = 0
    kind: str = "dtaci"

    def __repr__(self) -> str:
        return reprs.build(self, ("target", reprs.value(self.target)), ("alpha", reprs.value(self.alpha)),
                           ("steps", str(self.steps)), ("experts", str(len(self.experts))),
                           ("window", str(self.window)))

    @classmethod
    def new(cls, target: float, gammas: Sequence[float] = DEFAULT_GAMMAS, window: int = 50,
            seed: int = 0) -> DtACIState:
        k = len(gammas)
        return cls(target, target, [target] * k, [1.0 / k] * k, list(gammas), window, seed)

    @property
    def eta(self) -> float:
        a, L, K = self.target, self.window, len(self.gammas)
        return math.sqrt(3.0 / L * (math.log(L * K) + 2.0) / ((1.0 - a) ** 2 * a**2))

    @property
    def sigma(self) -> float:
        return 1.0 / (2.0 * self.window)

    def update(self, beta: float) -> DtACIState:
        a_i = np.asarray(self.experts, dtype=float)
        w = np.asarray(self.weights, dtype=float)
        K = a_i.size
        wbar = w * np.exp(-self.eta * pinball(beta, a_i, self.target))
        w_new = (1.0 - self.sigma) * wbar + self.sigma * wbar.sum() / K
        w_new = w_new / w_new.sum() if w_new.sum() > 0 else np.full(K, 1.0 / K)
        err = (a_i >= beta).astype(float)
        a_new = a_i + np.asarray(self.gammas) * (self.target - err)
        u = _uniform(self.seed, self.steps)
        pick = min(int(np.searchsorted(np.cumsum(w_new), u * w_new.sum(), side="right")), K - 1)
        chosen = float(a_new[pick])
        return DtACIState(self.target, chosen, a_new.tolist(), w_new.tolist(), list(self.gammas),
                          self.window, self.seed, self.steps + 1)


@dataclass
class FixedState:
    """No adaptation: alpha stays at its nominal value (plain split / CV+)."""

    target: float
    alpha: float
    steps: int = 0
    kind: str = "none"

    def update(self, beta: float) -> FixedState:
        return FixedState(self.target, self.alpha, self.steps + 1)


def _uniform(seed: int, step: int) -> float:
    """A uniform draw in [0, 1) that is a pure function of (seed, step): splitmix64.

    Cheaper than seeding a numpy Generator per update (~60 us), which every tell
    pays once per interval pair.
    """
    mask = (1 << 64) - 1
    z = ((seed & mask) * 0x9E3779B97F4A7C15 + (step + 1) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


AdaptiveState = ACIState | DtACIState | FixedState
ADAPTERS = ("dtaci", "aci", "none")


def new_state(kind: str, target: float, *, gamma: float = 0.01, seed: int = 0,
              window: int = 50, gammas: Sequence[float] = DEFAULT_GAMMAS) -> AdaptiveState:
    if kind == "aci":
        return ACIState(target, target, gamma)
    if kind == "dtaci":
        return DtACIState.new(target, gammas, window, seed)
    if kind == "none":
        return FixedState(target, target)
    raise ValueError(f"unknown adapter {kind!r}; choose from {ADAPTERS}")


def state_to_dict(s: AdaptiveState) -> dict[str, Any]:
    # by hand: dataclasses.asdict deep-copies recursively and cost ~0.2 ms a state on every tell
    d = dict(vars(s))
    for k, v in d.items():
        if isinstance(v, list):
            d[k] = list(v)
    return d


def state_from_dict(d: dict[str, Any]) -> AdaptiveState:
    d = dict(d)
    kind: Any = d.get("kind")
    cls: type[AdaptiveState] | None = {"aci": ACIState, "dtaci": DtACIState, "none": FixedState}.get(kind)
    if cls is None:
        raise ValueError(f"unknown adaptive state kind {kind!r}")
    return cls(**d)
