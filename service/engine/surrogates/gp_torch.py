"""QGP's torch backend: gpytorch models for the exact and the inducing-point GP.

Imported only by ``qgp.QGP`` when a fit runs on torch, never at package import:
the API process imports the engine and must not pay for torch.

The model is the scikit-learn path's, in float64 on ``device``:
``ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=d))`` plus a Gaussian likelihood,
zero mean on the standardised target. Hyperparameters live in log space with
the same boxes as scikit-learn's kernel (lengthscales and outputscale in
[1e-2, 1e2], noise in [1e-6, 1]) and start from the same point (lengthscales
0.5, outputscale 1, noise 1e-2); they maximise the exact marginal likelihood
(gpytorch's ``ExactMarginalLogLikelihood``, values and gradients by autograd)
with L-BFGS-B, on the same seeded subsample of ``max_opt_points`` rows as the
scikit-learn path when there are more observations. The two backends therefore
land on the same hyperparameters up to round-off (``tests/test_qgp_torch.py``).
A CUDA fit tunes on the CPU below ``TUNE_ON_DEVICE_FROM`` (300) tuning rows and
conditions on the GPU: on an H200, tuning on 150 rows took 0.11 s on one CPU
thread and 0.15 s on the GPU, on 300 rows 0.32 and 0.20 s, on 1,000 rows 6.4
and 0.21 s (``benchmarks/device_paths.py``).

Conditioning on all ``n`` observations:

* ``n <= exact_up_to``: the exact GP, the gpytorch model's kernel matrix
  factorised once by Cholesky at fit and reused by every prediction (no CG or
  Lanczos approximation in the mean or the variance). On the CPU this costs
  what scikit-learn's exact GP costs: same algorithm, one thread.
* ``n > exact_up_to``: SGPR (Titsias 2009) through gpytorch's
  ``InducingPointKernel``: ``inducing_points`` inducing inputs (default 512)
  drawn as a seeded subsample of the observations, kernel and noise from the
  subsample's exact fit, then conditioned on all points. O(n m^2) time and
  O(n m) memory (30,000 points x 512 is 120 MB) instead of O(n^3) and O(n^2);
  gpytorch's SGPR diagonal correction keeps the predictive variance from
  collapsing away from the inducing inputs. What its prediction needs from the
  training data is computed once at fit (``TorchGP._condition_sparse``), as the
  exact path keeps its Cholesky factor. Measured on Hartmann-6 with noise
  (7500 points, 2 shared CPU cores): 512 inducing inputs 1.9 s for the fit and
  2500 predictions, held-out RMSE 0.146 (exact GP 0.133 in 26 s); 256 inputs
  0.9 s and RMSE 0.168; 1024 inputs 5.5 s and RMSE 0.145. Ten L-BFGS-B steps
  of the collapsed SGPR bound on all points (hyperparameters, inducing inputs
  fixed) cost 17 to 32 s and ended worse (RMSE 0.34), so the kernel is the
  subsample's, as on the exact path, and a CV fold's SGPR only solves.

Everything random (both subsamples) is drawn from the seed with numpy; torch
itself draws nothing, so a fit is reproducible on CPU.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, cast

import gpytorch
import numpy as np
import torch
from gpytorch.constraints import Positive
from linear_operator.utils.cholesky import psd_safe_cholesky
from linear_operator.utils.errors import NanError, NotPSDError
from scipy.optimize import minimize

from ..device import torch_threads
from .gp_prior import neg_log_prior

LENGTHSCALE_BOUNDS = (1e-2, 1e2)
OUTPUTSCALE_BOUNDS = (1e-2, 1e2)
NOISE_BOUNDS = (1e-6, 1.0)
INIT = {"lengthscale": 0.5, "outputscale": 1.0, "noise": 1e-2}
# tuning rows from which the marginal likelihood is maximised on the fit's device rather than the CPU:
# below, an L-BFGS-B step on a GPU is a few dozen small kernels and a host round-trip, slower than the
# CPU's float64 on a matrix that small (the default tunes on at most 150 rows)
TUNE_ON_DEVICE_FROM = 300
PRED_CHUNK = 2048  # test rows per predictive batch: bounds the (chunk, n) cross-covariance
DTYPE = torch.float64


def _log_positive() -> Positive:
    """value = exp(raw): the raw parameter is the log, as scikit-learn's theta."""
    return Positive(transform=torch.exp, inv_transform=torch.log)


def _base_kernel(d: int) -> gpytorch.kernels.ScaleKernel:
    return gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=d, lengthscale_constraint=_log_positive()),
        outputscale_constraint=_log_positive(),
    )


class ExactGPModel(gpytorch.models.ExactGP):  # type: ignore[misc]  # gpytorch ships no type information
    """Zero mean, ARD Matern-5/2 times an outputscale; the exact GP."""

    def __init__(self, X: torch.Tensor, z: torch.Tensor, likelihood: gpytorch.likelihoods.Likelihood):
        super().__init__(X, z, likelihood)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = _base_kernel(X.shape[-1])

    @property
    def base_kernel(self) -> gpytorch.kernels.ScaleKernel:
        return self.covar_module

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


class SGPRModel(gpytorch.models.ExactGP):  # type: ignore[misc]  # gpytorch ships no type information
    """The same kernel behind gpytorch's ``InducingPointKernel`` (SGPR)."""

    def __init__(self, X: torch.Tensor, z: torch.Tensor, likelihood: gpytorch.likelihoods.Likelihood,
                 inducing: torch.Tensor):
        super().__init__(X, z, likelihood)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.InducingPointKernel(
            _base_kernel(X.shape[-1]), inducing_points=inducing, likelihood=likelihood)

    @property
    def base_kernel(self) -> gpytorch.kernels.ScaleKernel:
        return self.covar_module.base_kernel

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _likelihood() -> gpytorch.likelihoods.GaussianLikelihood:
    return gpytorch.likelihoods.GaussianLikelihood(noise_constraint=_log_positive())


def _hyper_params(model: ExactGPModel | SGPRModel) -> list[torch.nn.Parameter]:
    """The log hyperparameters, in scikit-learn's theta order: outputscale, lengthscales, noise."""
    k = model.base_kernel
    return [k.raw_outputscale, k.base_kernel.raw_lengthscale, model.likelihood.noise_covar.raw_noise]


def _bounds(d: int) -> list[tuple[float, float]]:
    def log(b: tuple[float, float]) -> tuple[float, float]:
        return (math.log(b[0]), math.log(b[1]))
    return [log(OUTPUTSCALE_BOUNDS)] + [log(LENGTHSCALE_BOUNDS)] * d + [log(NOISE_BOUNDS)]


def _set_hyper(model: ExactGPModel | SGPRModel, hyper: dict[str, Any]) -> None:
    k = model.base_kernel
    dev = k.raw_outputscale.device
    with torch.no_grad():
        k.raw_outputscale.fill_(math.log(float(hyper["outputscale"])))
        ls = torch.as_tensor(np.log(np.asarray(hyper["lengthscale"], float)), dtype=DTYPE, device=dev)
        k.base_kernel.raw_lengthscale.copy_(ls.reshape(k.base_kernel.raw_lengthscale.shape))
        model.likelihood.noise_covar.raw_noise.fill_(math.log(float(hyper["noise"])))


def _get_hyper(model: ExactGPModel | SGPRModel) -> dict[str, Any]:
    k = model.base_kernel
    return {
        "outputscale": float(k.outputscale.detach().cpu()),
        "lengthscale": k.base_kernel.lengthscale.detach().cpu().numpy().ravel().astype(float),
        "noise": float(model.likelihood.noise.detach().cpu().ravel()[0]),
    }


def _maximise(model: ExactGPModel | SGPRModel, X: torch.Tensor, z: torch.Tensor, maxiter: int | None = None,
              prior: bool = False) -> None:
    """L-BFGS-B on the negative log marginal likelihood (summed, as scikit-learn's), plus QGP's
    ``neg_log_prior`` when ``prior``."""
    params = _hyper_params(model)
    sizes = [p.numel() for p in params]
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    n = z.shape[0]
    model.train()
    model.likelihood.train()

    def set_flat(theta: np.ndarray) -> None:
        t = torch.as_tensor(theta, dtype=DTYPE, device=X.device)
        with torch.no_grad():
            for p, chunk in zip(params, torch.split(t, sizes), strict=True):
                p.copy_(chunk.reshape(p.shape))

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        set_flat(theta)
        for p in params:
            p.grad = None
        try:
            loss = -mll(model(X), z) * n
            if not torch.isfinite(loss):
                return 1e25, np.zeros_like(theta)
            loss.backward()
        except (NotPSDError, NanError):  # a non-PSD corner of the box: steer away from it
            return 1e25, np.zeros_like(theta)
        # backward() gave every hyperparameter its gradient
        grad = torch.cat([cast("torch.Tensor", p.grad).reshape(-1) for p in params]).detach().cpu().numpy()
        value = float(loss.detach().cpu())
        if prior:
            pv, pg = neg_log_prior(theta)
            value, grad = value + pv, grad + pg
        return value, grad

    theta0 = torch.cat([p.detach().reshape(-1) for p in params]).cpu().numpy()
    options = {} if maxiter is None else {"maxiter": int(maxiter)}
    with gpytorch.settings.max_cholesky_size(max(n, 800)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = minimize(objective, theta0, method="L-BFGS-B", jac=True, bounds=_bounds(X.shape[1]),
                       options=options)
    best = res.x if np.isfinite(res.fun) and res.fun < 1e25 else theta0
    set_flat(best)


def tune(X: np.ndarray, z: np.ndarray, *, seed: int, max_opt_points: int, device: str,
         prior: bool = False) -> dict[str, Any]:
    """Hyperparameters by exact marginal likelihood, on a seeded subsample beyond ``max_opt_points``."""
    if X.shape[0] > max_opt_points:  # the scikit-learn path's draw, row for row
        sub = np.random.default_rng(seed).choice(X.shape[0], max_opt_points, replace=False)
        X, z = X[sub], z[sub]
    Xt = torch.as_tensor(X, dtype=DTYPE, device=device)
    zt = torch.as_tensor(z, dtype=DTYPE, device=device)
    lik = _likelihood().to(device=device, dtype=DTYPE)
    model = ExactGPModel(Xt, zt, lik).to(device=device, dtype=DTYPE)
    _set_hyper(model, {"lengthscale": np.full(X.shape[1], INIT["lengthscale"]),
                       "outputscale": INIT["outputscale"], "noise": INIT["noise"]})
    _maximise(model, Xt, zt, prior=prior)
    return _get_hyper(model)


class TorchGP:
    """A GP conditioned on all observations with given hyperparameters (exact or SGPR)."""

    def __init__(self, X: np.ndarray, z: np.ndarray, hyper: dict[str, Any], *, device: str, seed: int,
                 exact_up_to: int, inducing_points: int) -> None:
        n = X.shape[0]
        self.device = device
        self.n = n
        self.sparse = n > exact_up_to
        Xt = torch.as_tensor(X, dtype=DTYPE, device=device)
        zt = torch.as_tensor(z, dtype=DTYPE, device=device)
        lik = _likelihood()
        if self.sparse:
            m = min(int(inducing_points), n)
            idx = np.sort(np.random.default_rng([seed, 1]).choice(n, m, replace=False))
            model = SGPRModel(Xt, zt, lik, Xt[idx].clone())
        else:
            model = ExactGPModel(Xt, zt, lik)
        self.model = model.to(device=device, dtype=DTYPE)
        _set_hyper(self.model, hyper)
        self.hyper = _get_hyper(self.model)
        self.model.eval()
        self.model.likelihood.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        if self.sparse:
            self._condition_sparse(Xt, zt)
        else:
            self._condition_exact(Xt, zt)

    def _condition_exact(self, X: torch.Tensor, z: torch.Tensor) -> None:
        """One Cholesky of K + noise I, kept for every prediction (as scikit-learn does).

        gpytorch's default prediction strategy re-factorises per predictive call
        and its ``fast_pred_var`` cache forms the full inverse root: both measured
        2-6x slower than this on CPU at n = 2000 to 4000, for the same numbers.
        """
        with torch.no_grad():
            K = self.model.covar_module(X).to_dense()
            K.diagonal().add_(self.hyper["noise"] + 1e-10)  # scikit-learn's alpha, the same jitter
            self._L = psd_safe_cholesky(K)
            self._alpha = torch.cholesky_solve(z.unsqueeze(-1), self._L).squeeze(-1)
            self._X = X
            self._prior_var = self.hyper["outputscale"] + self.hyper["noise"]

    def _condition_sparse(self, X: torch.Tensor, z: torch.Tensor) -> None:
        """What gpytorch's SGPR prediction computes from the training data, computed once.

        gpytorch's ``InducingPointKernel`` in eval mode gives the training points
        the covariance ``C = R R^T + D``: ``R = K_xu U^-1`` (``K_uu = U^T U``) and
        ``D`` the diagonal correction ``max(k(x, x) - |R_x|^2, 0)`` plus the noise.
        Its ``SGPRPredictionStrategy`` predicts ``mean = R_* R^T C^-1 z`` and
        ``var = k(x_*, x_*) - R_* (R^T C^-1 R) R_*^T``, and by Woodbury, with
        ``A = I + R^T D^-1 R``, ``R^T C^-1 R = I - A^-1`` and ``R^T C^-1 z =
        A^-1 R^T D^-1 z``. Kept here: ``U^-1``, the Cholesky factor of ``A`` and
        ``w = A^-1 R^T D^-1 z``, so a prediction costs O(t m^2) for t test
        points. Through gpytorch's own path every predictive call rebuilt the
        (n + t) x m root and its inducing kernel: 0.43 s per call at n = 10,000 on
        one CPU thread, 22 calls in a refit's local search (the same numbers to
        round-off; ``tests/test_qgp_torch.py`` checks them against gpytorch's).
        """
        with torch.no_grad():
            kern = self.model.covar_module
            base, Zu = kern.base_kernel, kern.inducing_points
            U = psd_safe_cholesky(base(Zu, Zu).to_dense(), upper=True)
            eye = torch.eye(U.shape[-1], dtype=U.dtype, device=U.device)
            self._inv_root = torch.linalg.solve_triangular(U, eye, upper=True)
            R = base(X, Zu).to_dense() @ self._inv_root
            prior = base(X, X, diag=True)
            D = (prior - (R * R).sum(-1)).clamp_min(0.0) + self.hyper["noise"]
            RD = R / D.unsqueeze(-1)
            self._LA = torch.linalg.cholesky(R.mT @ RD + eye)
            self._w = torch.cholesky_solve((RD.mT @ z).unsqueeze(-1), self._LA).squeeze(-1)
            self._Zu, self._base = Zu, base

    def _moments_chunk(self, Xt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sparse:
            Rs = self._base(Xt, self._Zu).to_dense() @ self._inv_root
            V = torch.linalg.solve_triangular(self._LA, Rs.mT, upper=False)
            prior = self._base(Xt, Xt, diag=True)
            var = prior - (Rs * Rs).sum(-1) + (V * V).sum(0) + self.hyper["noise"]
            return Rs @ self._w, var
        Ks = self.model.covar_module(Xt, self._X).to_dense()
        V = torch.linalg.solve_triangular(self._L, Ks.mT, upper=False)
        return Ks @ self._alpha, self._prior_var - (V * V).sum(0)

    def moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and sd of an observation (noise included), standardised units."""
        means, sds = [], []
        with torch_threads(self.device), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", gpytorch.utils.warnings.GPInputWarning)
            for start in range(0, X.shape[0], PRED_CHUNK):
                Xt = torch.as_tensor(X[start:start + PRED_CHUNK], dtype=DTYPE, device=self.device)
                mean, var = self._moments_chunk(Xt)
                means.append(mean.cpu().numpy())
                sds.append(var.clamp_min(0.0).sqrt().cpu().numpy())
        if not means:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(means), np.concatenate(sds)


def fit(X: np.ndarray, z: np.ndarray, *, seed: int, device: str, max_opt_points: int, exact_up_to: int,
        inducing_points: int, hyper: dict[str, Any] | None = None, prior: bool = False) -> TorchGP:
    """Tune (unless ``hyper`` is given, as for a CV fold: then it only solves) and condition on all points;
    ``prior``: maximum a posteriori with QGP's hyperpriors instead of maximum likelihood."""
    if hyper is None:
        where = device if min(X.shape[0], max_opt_points) >= TUNE_ON_DEVICE_FROM else "cpu"
        with torch_threads(where):
            hyper = tune(X, z, seed=seed, max_opt_points=max_opt_points, device=where, prior=prior)
    with torch_threads(device):
        return TorchGP(X, z, hyper, device=device, seed=seed, exact_up_to=exact_up_to,
                       inducing_points=inducing_points)
