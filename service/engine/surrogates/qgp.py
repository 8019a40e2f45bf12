"""QGP: a Gaussian process whose Gaussian posterior predictive gives the quantiles.

ARD Matern-5/2 kernel times a constant plus a white-noise term, hyperparameters
by maximum marginal likelihood (L-BFGS-B in log space). Beyond
``max_opt_points`` observations (150) the hyperparameters are tuned on a
seeded subsample and the posterior is then conditioned on all points with that
kernel: the likelihood search is the O(n^3)-per-step part, the final solve is
one Cholesky. ``fold_clone`` reuses the tuned kernel so CV+ folds and stacking
folds only solve, not re-optimise (across backends too: the hyperparameters
are handed on as plain numbers when a fold lands on the other backend).

Two backends, option ``backend`` in ``("auto", "sklearn", "torch")``:

* ``sklearn``: scikit-learn's exact GP. Exact at every size (O(n^2) memory:
  30,000 points need a 7 GB Gram matrix).
* ``torch``: the same model in gpytorch (``gp_torch``), on ``self.device``:
  exact up to ``exact_up_to`` observations (default 4000), SGPR with
  ``inducing_points`` inducing inputs (default 512) beyond, O(n m^2) time and
  O(n m) memory. Imported only when used: ``import calibo.engine`` never
  loads torch.

``auto`` (the default) on a CUDA device picks torch from ``CUDA_FROM`` (200)
observations and scikit-learn on the CPU below: a small fit on the GPU is
launch-bound. A whole default refit on an H200 machine (median of 3, QGP on
the GPU against scikit-learn on one core of its host) took 0.15 against 0.11 s
on 100 observations, 0.17 against 0.24 s on 200 and 0.17 against 0.53 s on
1,000 (``benchmarks/device_paths.py``). Below ``CUDA_FROM`` a study on a GPU
machine therefore runs the CPU's search exactly: 20 of 20 runs of 100 trials
were identical, at 90 ms per trial against 210 ms with the GPU at every size.

On the CPU ``auto`` picks scikit-learn up to ``exact_up_to`` and torch's SGPR
beyond. Measured on 2 shared cores (one BLAS / torch thread, Hartmann-6 with
noise, fit plus 2000 predictions): both exact paths solve the same problem to
the same numbers and cost the same (1000 points 0.25 s each, 2000 0.6 / 0.7 s,
4000 3.2 / 3.0 s), and scikit-learn is faster below ~150 points (50 points
0.06 s vs 0.15 s: torch pays Python overhead per likelihood step), so on the
CPU torch is worth it only where SGPR replaces the O(n^3) solve: 10,000 points
0.8 s instead of 31 s, held-out RMSE 0.107 vs 0.101 (``benchmarks/fit_time.py``,
which keeps the curves; the engine's default refit at 10,000 observations:
1.3 s).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import cho_solve, cholesky, solve_triangular
from scipy.spatial.distance import cdist, pdist, squareform
from scipy.stats import norm
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import (
    ConstantKernel,
    Kernel,
    Matern,
    Product,
    Sum,
    WhiteKernel,
)

from ..limits import SURROGATE_CHOICES
from .base import MIN_SIGNAL, BaseSurrogate
from .gp_prior import neg_log_prior

if TYPE_CHECKING:  # torch is loaded by a torch fit only (_fit_torch)
    from .gp_torch import TorchGP

# the options that take a word (backend, prior, scores), each's first choice its default: the table the
# study settings are checked against
CHOICES = SURROGATE_CHOICES["qgp"]
MAX_OPT_POINTS = 150
EXACT_UP_TO = 4000  # torch backend: exact GP up to here, SGPR beyond; auto on CPU: torch beyond
INDUCING_POINTS = 512
# auto on a CUDA device: scikit-learn on the CPU below this many observations, torch on the GPU from it
# (a whole default refit on an H200 machine: benchmarks/device_paths.py's engine rows)
CUDA_FROM = 200


def _map_optimizer(obj_func: Callable[..., tuple[float, np.ndarray]], initial_theta: np.ndarray,
                   bounds: np.ndarray) -> tuple[np.ndarray, float]:
    """scikit-learn's ``optimizer`` hook: L-BFGS-B on -log marginal likelihood + ``neg_log_prior``."""
    from scipy.optimize import minimize

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        nll, grad = obj_func(theta, eval_gradient=True)
        p, pg = neg_log_prior(theta)
        return nll + p, grad + pg

    res = minimize(f, initial_theta, jac=True, method="L-BFGS-B", bounds=bounds)
    return res.x, res.fun


def _sklearn_kernel(d: int, hyper: dict[str, Any] | None = None) -> Kernel:
    """``C * Matern52(ARD) + White``: the initial kernel, or one with given hyperparameters."""
    h = hyper or {"outputscale": 1.0, "lengthscale": np.full(d, 0.5), "noise": 1e-2}
    return ConstantKernel(float(h["outputscale"]), (1e-2, 1e2)) * Matern(
        length_scale=np.asarray(h["lengthscale"], float).copy(), length_scale_bounds=(1e-2, 1e2), nu=2.5,
    ) + WhiteKernel(float(h["noise"]), (1e-6, 1.0))


def _hyper_of(kernel: Kernel, d: int) -> dict[str, Any] | None:
    """The hyperparameters of a kernel shaped as ``_sklearn_kernel``'s; None for any other."""
    try:
        const, matern, white = kernel.k1.k1, kernel.k1.k2, kernel.k2
        ls = np.broadcast_to(np.asarray(matern.length_scale, float), (d,)).copy()
        return {"outputscale": float(const.constant_value), "lengthscale": ls,
                "noise": float(white.noise_level)}
    except (AttributeError, ValueError):
        return None


class _Conditioned(GaussianProcessRegressor):  # type: ignore[misc]  # scikit-learn ships no type information
    """scikit-learn's GP on a kernel kept as given (``optimizer=None``: fold models, split models,
    the fits that keep a full refit's hyperparameters), whose ``fit`` leaves out the log marginal
    likelihood scikit-learn computes for the record after fitting: a second kernel evaluation and
    Cholesky factorization, a third of such a fit, that nothing here reads
    (``log_marginal_likelihood_value_`` is NaN).

    For the ``_sklearn_kernel`` shape the fit is scikit-learn's own arithmetic, written out
    (``_factor``): the Matern kernel on the pairs' condensed distances, the constant, the white
    noise and ``alpha`` on the diagonal, the Cholesky factor and the weights, operation by
    operation as scikit-learn does them (the same numbers), without its input validation and kernel
    objects (half of such a fit at 500 observations). Any other kernel fits through scikit-learn."""

    _recording = False

    def fit(self, X: Any, y: Any) -> _Conditioned:
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        hyper = _default_shaped(self.kernel, X.shape[1]) if X.ndim == 2 and y.ndim == 1 else None
        if hyper is not None and not self.normalize_y and np.isscalar(self.alpha):
            self._factor(X, y, hyper)
            return self
        self._recording = True
        try:
            super().fit(X, y)
        finally:
            self._recording = False
        return self

    def _factor(self, X: np.ndarray, y: np.ndarray, hyper: dict[str, Any]) -> None:
        """``fit``'s attributes as scikit-learn's fit sets them, for the default-shaped kernel."""
        self.kernel_ = clone(self.kernel)
        self.n_features_in_ = X.shape[1]
        self._y_train_mean, self._y_train_std = np.zeros(1), np.ones(1)
        self.X_train_, self.y_train_ = np.copy(X), np.copy(y)
        d = pdist(X / np.asarray(hyper["lengthscale"], float), metric="euclidean") * math.sqrt(5)
        K = squareform((1.0 + d + d**2 / 3.0) * np.exp(-d))  # Matern-5/2, as sklearn's Matern
        np.fill_diagonal(K, 1)
        K = np.full(K.shape, float(hyper["outputscale"])) * K  # ConstantKernel * Matern
        K = K + float(hyper["noise"]) * np.eye(K.shape[0])  # + WhiteKernel
        K[np.diag_indices_from(K)] += self.alpha
        self.L_ = cholesky(K, lower=True, check_finite=False)
        self.alpha_ = cho_solve((self.L_, True), self.y_train_, check_finite=False)
        self.log_marginal_likelihood_value_ = float("nan")

    def log_marginal_likelihood(self, theta: Any = None, eval_gradient: bool = False,
                                clone_kernel: bool = True) -> Any:
        if self._recording and self.optimizer is None and not eval_gradient:
            return float("nan")
        return super().log_marginal_likelihood(theta, eval_gradient, clone_kernel)


def _default_shaped(kernel: Kernel | None, d: int) -> dict[str, Any] | None:
    """The hyperparameters of a kernel of ``_sklearn_kernel``'s shape (Matern-5/2), else None."""
    shaped = (isinstance(kernel, Sum) and isinstance(kernel.k1, Product) and isinstance(kernel.k1.k1, ConstantKernel)
              and isinstance(kernel.k1.k2, Matern) and kernel.k1.k2.nu == 2.5 and isinstance(kernel.k2, WhiteKernel))
    return _hyper_of(kernel, d) if shaped else None


class _Posterior:
    """The fitted scikit-learn GP's predictive mean and sd (noise included), computed directly from
    its Cholesky factor and weights: the same numbers as ``GaussianProcessRegressor.predict(...,
    return_std=True)`` for the ``_sklearn_kernel`` shape, without the kernel objects' per-call
    overhead (a fit predicts at the candidates and at each round of the local search: 1.5 to 2.6
    times faster per call at 120 to 500 observations)."""

    def __init__(self, gp: GaussianProcessRegressor, hyper: dict[str, Any]) -> None:
        self.ls = np.asarray(hyper["lengthscale"], float)
        self.c = float(hyper["outputscale"])
        self.prior_var = self.c + float(hyper["noise"])  # the kernel's diagonal: signal plus white noise
        self.train = gp.X_train_ / self.ls
        self.alpha = gp.alpha_
        self.L = gp.L_

    @classmethod
    def of(cls, gp: GaussianProcessRegressor, d: int) -> _Posterior | None:
        hyper = _default_shaped(gp.kernel_, d)
        return None if hyper is None or gp.normalize_y else cls(gp, hyper)

    def cross(self, X: np.ndarray) -> np.ndarray:
        """(m, n) the kernel between rows ``X`` and the training inputs (Matern-5/2, no noise):
        ``c * (1 + r + r^2 / 3) * exp(-r)``, in place (a third faster than the expression's
        temporaries at 2000 x 500), each operation in the expression's order, so the same numbers."""
        r = cdist(X / self.ls, self.train)
        r *= np.sqrt(5.0)
        t = r * r
        t /= 3.0
        K: NDArray[np.float64] = r + 1.0
        K += t
        K *= self.c
        np.negative(r, out=t)
        np.exp(t, out=t)
        K *= t
        return K

    def moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        K = self.cross(X)
        mean = K @ self.alpha
        V = solve_triangular(self.L, K.T, lower=True, check_finite=False)
        var = self.prior_var - np.einsum("ij,ij->j", V, V)
        return mean, np.sqrt(np.maximum(var, 0.0))

    def extended(self, X: np.ndarray, var_before: np.ndarray, n_before: int) -> tuple[np.ndarray, np.ndarray]:
        """``moments`` at ``X`` from the predictive variances ``var_before`` there of the same kernel
        conditioned on the first ``n_before`` training rows only: O(m n) instead of O(m n^2).

        With the factor split as ``L = [[L0, 0], [P, Q]]`` (``L0`` the first ``n_before`` rows'
        factor, ``Q`` the new rows' Schur complement's), ``L^-1 k = [L0^-1 k0, Q^-1 (k1 - W^T k0)]``
        with ``W = L0^-T P^T = K0^-1 K01``: the variance loses ``|Q^-1 (k1 - W^T k0)|^2`` and
        nothing of ``L0^-1 k0`` is formed. The mean is the full ``K alpha``."""
        K = self.cross(X)
        mean = K @ self.alpha
        if n_before == self.L.shape[0]:  # no new rows: the same inputs, the same variance
            return mean, np.sqrt(np.maximum(np.asarray(var_before, float), 0.0))
        L0, P, Q = self.L[:n_before, :n_before], self.L[n_before:, :n_before], self.L[n_before:, n_before:]
        W = solve_triangular(L0, P.T, lower=True, trans="T", check_finite=False)  # (n_before, k)
        g = K[:, n_before:] - K[:, :n_before] @ W  # (m, k): each new row's covariance with X, given the first rows
        U = solve_triangular(Q, g.T, lower=True, check_finite=False)  # (k, m)
        var = np.asarray(var_before, float) - np.einsum("ij,ij->j", U, U)
        return mean, np.sqrt(np.maximum(var, 0.0))


class QGP(BaseSurrogate):
    name = "qgp"
    conditions_on_refit = True  # fold_clone keeps the tuned kernel: a refit is the posterior on more points

    @property
    def scaled(self) -> bool:  # type: ignore[override]  # BaseSurrogate's class attribute, derived here
        """Option ``scores``: ``normalized`` scores the conformal layer's residuals in units of the
        GP's own predictive sd (``_scale``), so calibrated intervals keep the posterior's
        heteroskedastic shape; ``cqr`` (the plain quantile scores) widens every interval alike."""
        scores: str = self.options.get("scores", CHOICES["scores"][0])
        return scores == "normalized"

    def _scale(self, X: np.ndarray) -> np.ndarray:
        return self._moments(X)[1] if self.scaled else super()._scale(X)

    def __init__(self, levels: Iterable[float], seed: int = 0, kernel: Kernel | None = None, device: str = "cpu",
                 hyper: dict[str, Any] | None = None, **options: Any) -> None:
        super().__init__(levels, seed, device=device, **options)
        for key, allowed in CHOICES.items():
            value = self.options.get(key, allowed[0])
            if value not in allowed:
                raise ValueError(f"{key} must be one of {allowed}, not {value!r}")
        self._fixed_kernel = kernel  # a tuned scikit-learn kernel (fold clones)
        self._fixed_hyper = hyper  # tuned hyperparameters as numbers (fold clones of a torch fit)
        self.backend_: str | None = None  # the backend the last fit ran
        self._gp: GaussianProcessRegressor | None = None
        self._torch: TorchGP | None = None
        self._last_moments: tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None = None
        self._posterior: _Posterior | None = None

    @property
    def prior(self) -> bool:
        """Whether the hyperparameters are fitted with ``neg_log_prior`` (option ``prior="smooth"``)
        or by plain maximum likelihood (``"none"``, the default: on the real-tuning suite the prior
        ranked behind it, ``benchmarks/real_tuning.py``)."""
        prior: str = self.options.get("prior", "none")
        return prior == "smooth"

    @property
    def exact_up_to(self) -> int:
        return int(self.options.get("exact_up_to", EXACT_UP_TO))

    def choose_backend(self, n: int) -> str:
        """The backend a fit on ``n`` observations runs (see the module docstring)."""
        backend: str = self.options.get("backend", "auto")
        if backend != "auto":
            return backend
        if self.device == "cuda":
            return "torch" if n >= CUDA_FROM else "sklearn"
        return "torch" if n > self.exact_up_to else "sklearn"

    def tuned_hyperparameters(self) -> dict[str, Any] | None:
        """outputscale, lengthscale (d,), noise of the fitted GP, on the standardised target."""
        if not self.fitted:
            return None
        if self.backend_ == "torch":
            assert self._torch is not None
            return self._torch.hyper
        assert self._gp is not None
        return _hyper_of(self._gp.kernel_, self._d)

    def gp_kernel(self) -> dict[str, Any] | None:
        """The fitted kernel in the target's units (what ``engine.crowd`` conditions with)."""
        h = self.tuned_hyperparameters()
        if h is None:
            return None
        sd2 = self._sd**2
        return {"lengthscale": [float(x) for x in np.atleast_1d(h["lengthscale"])],
                "outputscale": float(h["outputscale"]) * sd2, "noise": float(h["noise"]) * sd2}

    def fold_clone(self) -> QGP:
        if not self.fitted:
            kernel, hyper = self._fixed_kernel, self._fixed_hyper
        elif self.backend_ == "sklearn":
            assert self._gp is not None
            kernel, hyper = self._gp.kernel_, None
        else:
            assert self._torch is not None
            kernel, hyper = None, self._torch.hyper
        return QGP(self.levels, self.seed, kernel=kernel, device=self.device, hyper=hyper, **self.options)

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        self._last_moments = None
        self._posterior = None
        self._d = X.shape[1]
        self.backend_ = self.choose_backend(X.shape[0])
        if self.backend_ == "torch":
            self._fit_torch(X, z)
        else:
            self._fit_sklearn(X, z)
        self._z = norm.ppf(self.levels)

    def _fit_sklearn(self, X: np.ndarray, z: np.ndarray) -> None:
        d = X.shape[1]
        self._torch = None
        if self._fixed_kernel is not None:
            kernel, optimizer = self._fixed_kernel, None
        elif self._fixed_hyper is not None:
            kernel, optimizer = _sklearn_kernel(d, self._fixed_hyper), None
        else:
            kernel = _sklearn_kernel(d)
            optimizer = _map_optimizer if self.prior else "fmin_l_bfgs_b"
        self._gp = (_Conditioned if optimizer is None else GaussianProcessRegressor)(
            kernel, optimizer=optimizer, n_restarts_optimizer=0, normalize_y=False,
            random_state=self.seed,
        )
        cap = int(self.options.get("max_opt_points", MAX_OPT_POINTS))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            if optimizer is not None and X.shape[0] > cap:
                sub = np.random.default_rng(self.seed).choice(X.shape[0], cap, replace=False)
                tuned = self._gp.fit(X[sub], z[sub]).kernel_
                self._gp = _Conditioned(tuned, optimizer=None, normalize_y=False)
            self._gp.fit(X, z)
        self._posterior = _Posterior.of(self._gp, X.shape[1])
        self.ran_on = "cpu"

    def _fit_torch(self, X: np.ndarray, z: np.ndarray) -> None:
        from . import gp_torch  # torch is loaded here, never at import

        hyper = self._fixed_hyper
        if hyper is None and self._fixed_kernel is not None:
            hyper = _hyper_of(self._fixed_kernel, X.shape[1])
        self._gp = None
        self._torch = gp_torch.fit(
            X, z, seed=self.seed, device=self.device,
            max_opt_points=int(self.options.get("max_opt_points", MAX_OPT_POINTS)),
            exact_up_to=self.exact_up_to,
            inducing_points=int(self.options.get("inducing_points", INDUCING_POINTS)),
            hyper=hyper, prior=self.prior,
        )
        self.ran_on = self.device

    def _moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and sd (noise included) of the standardised target.

        The last answer is kept for the same array (``X`` itself, not a copy; the engine never
        modifies a feature array it has predicted at): a fit asks the candidates' quantiles and,
        with normalised scores, their spread, each from one posterior evaluation of the same rows."""
        last = self._last_moments
        if last is not None and last[0] is X:
            return last[1]
        if self.backend_ == "torch":
            assert self._torch is not None
            mean, sd = self._torch.moments(X)
        elif self._posterior is not None:
            mean, sd = self._posterior.moments(X)
        else:
            assert self._gp is not None
            mean, sd = self._gp.predict(X, return_std=True)
        out = (mean, np.maximum(sd, 1e-9))
        self._last_moments = (X, out)
        return out

    def _signal_fraction(self, X: np.ndarray) -> np.ndarray:
        """The latent function's share of the predictive sd (its variance is the predictive one
        less the white-noise level): near many observations it is small, far from them near 1."""
        return self._fraction(self._moments(X)[1])

    def _fraction(self, sd: np.ndarray) -> np.ndarray:
        hyper = self.tuned_hyperparameters()
        if hyper is None:  # a kernel of the caller's without a white-noise term
            return np.ones(sd.shape[0])
        frac: NDArray[np.float64] = np.sqrt(np.maximum(sd * sd - float(hyper["noise"]), 0.0)) / sd
        return frac

    def _predict_with_signal(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, sd = self._moments(X)  # one posterior evaluation for both
        return self._gaussian_quantiles(mean, sd), self._fraction(sd)

    def standard_sd(self, X: np.ndarray) -> np.ndarray:
        """(m,) the predictive sd (noise included) of the standardised target at ``X``: what an
        ``extend`` of a snapshot (``engine.extend``) starts from. The same evaluation as the
        quantiles of the same array ``X``."""
        return self._moments(np.asarray(X, float))[1]

    def extended_moments(self, X: np.ndarray, sd_before: np.ndarray, n_before: int) -> tuple[np.ndarray, np.ndarray]:
        """``_moments`` at ``X`` (standardised) from ``sd_before``, this kernel's ``standard_sd`` at
        ``X`` when it was conditioned on the first ``n_before`` of its training rows
        (``_Posterior.extended``). Needs the scikit-learn backend."""
        if self._posterior is None:
            raise ValueError("extended moments need the scikit-learn backend with the default kernel")
        mean, sd = self._posterior.extended(np.asarray(X, float), np.asarray(sd_before, float) ** 2, n_before)
        return mean, np.maximum(sd, 1e-9)

    def predict_from_moments(self, mean: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``predict_quantiles_and_signal`` of the rows whose standardised moments are ``mean, sd``."""
        return (self._target_quantiles(self._gaussian_quantiles(mean, sd)),
                np.clip(self._fraction(sd), MIN_SIGNAL, 1.0))

    def target_spread(self, sd: np.ndarray) -> np.ndarray:
        """``predict_scale`` of the rows whose standardised sd is ``sd``."""
        return self._target_spread(sd) if self.scaled else np.ones(np.shape(sd)[0])

    def predict_moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.fitted:
            raise RuntimeError(f"{self.name} surrogate is not fitted")
        mean, sd = self._moments(np.asarray(X, float))
        return mean * self._sd + self._mu, sd * self._sd

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return self._gaussian_quantiles(*self._moments(X))

    def _gaussian_quantiles(self, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
        """(n, L) quantiles at the study's levels of the Gaussians ``N(mean, sd^2)`` (standardised)."""
        q: NDArray[np.float64] = mean[:, None] + sd[:, None] * self._z[None, :]
        return q
