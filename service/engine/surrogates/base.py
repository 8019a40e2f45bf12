"""The surrogate protocol: ``fit(X, y)`` and ``predict_quantiles(X, levels) -> (n, L)``.

Every surrogate is built for a fixed, sorted grid of quantile levels (some
families, e.g. gradient boosting, train one model per level). ``y`` is
standardised here once so each family sees a unit-scale target, and the
returned quantiles are sorted along the level axis (quantile-crossing repair).

Two optional parts of the protocol:

* ``device``: torch surrogates train on it (``"cpu"`` or ``"cuda"``); the fit
  worker picks it per fit (``engine.device``), the others ignore it.
* ``scaled``: a surrogate whose uncertainty is a point estimate and a spread
  (ACHO's locally weighted estimators, the BANANAS ensemble) sets it and
  implements ``_scale``; the conformal layer then divides its scores by the
  spread (ACHO eq. 17, BANANAS eq. 3.4) and widens intervals by the spread
  times the score quantile (ACHO eq. 18).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, Self

import numpy as np
from numpy.typing import NDArray


class QuantileSurrogate(Protocol):
    levels: np.ndarray

    def fit(self, X: np.ndarray, y: np.ndarray) -> Self: ...

    def predict_quantiles(self, X: np.ndarray, levels: Sequence[float] | None = None) -> np.ndarray: ...

    def fold_clone(self) -> QuantileSurrogate: ...


MIN_SCALE = 1e-6  # floor of a spread estimate, in units of the target's standard deviation
MIN_SIGNAL = 0.01  # floor of predict_signal_fraction: the objective's spread never vanishes entirely


class BaseSurrogate(ABC):
    """Shared plumbing: level checks, target scaling, crossing repair.

    Subclasses implement ``_fit(X, z)`` and ``_predict(X) -> (n, L)`` on the
    standardised target ``z``.
    """

    name = "base"
    scaled = False  # True: ``_scale`` gives a spread and conformal scores are normalised by it
    # True: ``fold_clone().fit`` on more points is the same model conditioned on them (a GP keeps its
    # tuned kernel), so split conformal may show that refit with the split's scores (conformal.conformalize)
    conditions_on_refit = False

    def __init__(self, levels: Iterable[float], seed: int = 0, device: str = "cpu",
                 **options: Any) -> None:
        lv = np.asarray(sorted(float(x) for x in levels))
        if lv.size == 0 or lv[0] <= 0.0 or lv[-1] >= 1.0:
            raise ValueError("quantile levels must lie strictly inside (0, 1)")
        self.levels = lv
        self.seed = int(seed)
        self.device = str(device)
        self.ran_on = "cpu"  # where the last fit trained: torch families set it to their device
        self.options = options
        self._mu = 0.0
        self._sd = 1.0
        self.fitted = False

    def fold_clone(self) -> BaseSurrogate:
        """An unfitted copy for a cross-validation fold.

        Families with expensive hyperparameter search (the GP) hand their tuned
        hyperparameters to the clone so that folds only refit, as CV+ and
        stacking need K extra fits per refit.
        """
        return type(self)(self.levels, self.seed, device=self.device, **self.options)

    def fit(self, X: np.ndarray, y: np.ndarray) -> Self:
        X = np.asarray(X, dtype=float)
        y = np.asarray(y, dtype=float).ravel()
        if X.shape[0] != y.shape[0] or X.shape[0] < 2:
            raise ValueError("need at least two observations with matching X and y")
        self._mu = float(np.mean(y))
        sd = float(np.std(y))
        self._sd = sd if sd > 1e-12 else 1.0
        self._fit(X, (y - self._mu) / self._sd)
        self.fitted = True
        return self

    def predict_quantiles(self, X: np.ndarray, levels: Sequence[float] | None = None) -> np.ndarray:
        if not self.fitted:
            raise RuntimeError(f"{self.name} surrogate is not fitted")
        if levels is not None and not np.allclose(np.sort(np.asarray(levels, float)), self.levels):
            raise ValueError("this surrogate was fitted for other quantile levels")
        return self._target_quantiles(self._predict(np.asarray(X, dtype=float)))

    def predict_scale(self, X: np.ndarray) -> np.ndarray:
        """(n,) spread in the target's units (scaled surrogates); ones for the others."""
        if not self.fitted:
            raise RuntimeError(f"{self.name} surrogate is not fitted")
        X = np.asarray(X, dtype=float)
        if not self.scaled:
            return self._scale(X)
        return self._target_spread(self._scale(X))

    def _scale(self, X: np.ndarray) -> np.ndarray:
        """(n,) spread of the standardised target: one (plain CQR scores) unless a family is scaled."""
        return np.ones(X.shape[0])

    def _target_quantiles(self, q: np.ndarray) -> np.ndarray:
        """Standardised quantiles (n, L) -> the target's units, crossings repaired by sorting."""
        return np.sort(q, axis=1) * self._sd + self._mu

    def _target_spread(self, s: np.ndarray) -> np.ndarray:
        """A standardised spread (n,) -> the target's units, floored at ``MIN_SCALE``."""
        spread: NDArray[np.float64] = np.maximum(np.asarray(s, float), MIN_SCALE) * self._sd
        return spread

    def predict_signal_fraction(self, X: np.ndarray) -> np.ndarray:
        """(n,) the share of the predictive spread that is uncertainty about the objective itself:
        ``sqrt(1 - v / s^2)`` with ``s`` the predictive sd of an observation and ``v`` the fitted
        observation noise, in ``[MIN_SIGNAL, 1]``. Ones for families that do not separate a noise
        term (quantile regressors, forests): their whole spread is taken as the objective's."""
        if not self.fitted:
            raise RuntimeError(f"{self.name} surrogate is not fitted")
        frac: NDArray[np.float64] = np.clip(self._signal_fraction(np.asarray(X, dtype=float)), MIN_SIGNAL, 1.0)
        return frac

    def _signal_fraction(self, X: np.ndarray) -> np.ndarray:
        return np.ones(X.shape[0])

    def predict_quantiles_and_signal(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``predict_quantiles`` and ``predict_signal_fraction`` of the same rows, from one
        ``_predict_with_signal`` (families whose two come from one prediction make it once)."""
        if not self.fitted:
            raise RuntimeError(f"{self.name} surrogate is not fitted")
        q, frac = self._predict_with_signal(np.asarray(X, dtype=float))
        return self._target_quantiles(q), np.clip(frac, MIN_SIGNAL, 1.0)

    def _predict_with_signal(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_predict`` and ``_signal_fraction`` of ``X``."""
        return self._predict(X), self._signal_fraction(X)

    @abstractmethod
    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        """Fit on features ``X`` and the standardised target ``z``."""

    @abstractmethod
    def _predict(self, X: np.ndarray) -> np.ndarray:
        """(n, L) quantiles of the standardised target at ``self.levels``."""


# Every family by its name: ``make_surrogate``'s table. The package's ``__init__`` (which imports each
# family's module) fills it; it lives here, below the families, so that QE, which builds the families
# its ``bases`` name, needs no import of the package that imports it.
SURROGATES: dict[str, type[BaseSurrogate]] = {}


def make_surrogate(name: str, levels: Iterable[float], seed: int = 0, device: str = "cpu",
                   **options: Any) -> BaseSurrogate:
    """An unfitted surrogate; torch families train on ``device`` ("cpu" or "cuda")."""
    try:
        cls = SURROGATES[name]
    except KeyError:
        raise ValueError(f"unknown surrogate {name!r}; choose from {sorted(SURROGATES)}") from None
    return cls(levels, seed, device=device, **options)
