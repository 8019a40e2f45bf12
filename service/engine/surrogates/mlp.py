"""Torch MLP surrogates (BANANAS-CP thesis, section 3.2.1): ``mlp-ensemble`` and ``mlp-quantile``.

torch is imported inside the functions that train and predict, never at module
import: the API process imports the engine and must not pay for torch.

Training (both). ReLU MLPs whose layer weights are stacked tensors ``(M, in,
out)``: a forward pass is one ``torch.baddbmm`` per layer over all ``M``
members at once, so one Adam step updates every member. Full batch up to
``BATCH`` rows (minibatches beyond), cosine-decayed learning rate, and the
loss is the mean loss plus ``weight_decay / n * ||W||^2`` over the weight
matrices (a Gaussian prior on them: firm on a few observations, fading as they
accumulate). Inputs are standardised per column with the training mean and sd.
On CUDA the full-batch step is captured once as a CUDA graph and replayed
(``_train_graphed``): the same steps, one launch each instead of a few dozen.

``mlp-ensemble`` (BANANAS). ``members`` MLPs on the squared error, differing by
their initialisation and their bootstrap resample (drawn from the seed). The
members' mean ``mu(x)`` and standard deviation ``s(x)`` (eq. 3.1) give a
Gaussian; the quantiles are ``mu + sigma Phi^-1(level)`` with ``sigma^2 =
s(x)^2 + v``, where ``v`` is the observation noise: the mean squared
out-of-bag residual (each point predicted by the members whose resample left
it out; floored at ``NOISE_FLOOR^2``). The ensemble spread alone is
epistemic: it shrinks towards zero at the observations and ignores the noise,
and its raw central 70% band covered 0.24 of held-out points on the
heteroskedastic test data (0.76 to 0.84 with ``v``, 20 to 2000 points). ``v``
is also what keeps ``sigma`` off zero where the members agree. The surrogate
is *scaled*: ``_scale`` is ``sigma``, which the conformal layer divides its
scores by (eq. 3.4, ``|y - mu| / sigma``) and widens intervals by.

``mlp-quantile``. One MLP with one output per level trained on the pinball
loss (eq. 3.6) averaged over rows and levels. The outputs are monotone by
construction: the first is the lowest quantile and each next one adds
``softplus(.) + MIN_GAP`` (in float64 at prediction, so every row is strictly
increasing). The output biases start at the standard normal's quantiles (the
standardised target's marginal). A quantile net overfits small data fast (its
bands collapse onto the training points); the weight prior is what holds it:
without it the raw 70% band covered 0.16 (20 points) to 0.55 (150 points) of
held-out data, with weight_decay 1.0 0.60 to 0.80, with the default 0.01 0.53
at 150 points (the conformal layer restores nominal coverage from 32
observations on). The default is the search's choice: on the four synthetic
tasks of benchmarks/search.py (2 seeds, 100 trials) weight_decay 0.01 found
far better optima than 1.0 for both nets (Ackley-5: 2.6 / 4.8 against 17.9 /
18.7 for the ensemble; Hartmann-6: -3.14 / -3.19 against -1.89 / -2.04 for
the quantile net), 0.1 in between.

Defaults: 2 hidden layers of 32 units, learning rate 1e-2, weight_decay 0.01;
the ensemble has 5 members and 200 epochs, the quantile net 150. Chosen on the
heteroskedastic test data with 3 features, and with 5 irrelevant ones added,
from 20 to 2000 points (held-out pinball loss and band coverage): 64 units or
3 layers were no better and cost 1.5 to 2x; a held-out early-stopping split
for the quantile net did no better on the pinball loss and cost a second fit.

Determinism: the initial weights, bootstrap counts and minibatch orders are
drawn on the CPU from a ``torch.Generator`` seeded with ``seed`` and then moved
to ``device``, so a CPU fit is reproducible and a CUDA fit starts from the same
point. CPU fits run on one intra-op thread (``CALIBO_TORCH_THREADS``
overrides), as the GP's torch path: the fit worker runs fits side by side.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from scipy.stats import norm

from ..device import torch_threads
from .base import BaseSurrogate

if TYPE_CHECKING:  # imported where a net trains or predicts, never at module import
    import torch

BATCH = 4096  # rows per optimizer step; more observations are split into minibatches
GRAPH_WARMUP = 3  # eager CUDA steps before the full-batch step is captured as a graph
PRED_CHUNK = 16384  # rows per prediction pass
MIN_GAP = 1e-4  # smallest gap between adjacent quantile outputs, standardised units
NOISE_FLOOR = 1e-3  # floor of the ensemble's noise sd, standardised units
CONSTANT = 1e-12  # a target whose range is below this is constant: no net is trained

ENSEMBLE_DEFAULTS = {"members": 5, "hidden": 32, "layers": 2, "epochs": 200, "lr": 1e-2,
                     "weight_decay": 0.01}
QUANTILE_DEFAULTS = {"hidden": 32, "layers": 2, "epochs": 150, "lr": 1e-2, "weight_decay": 0.01}


def init_stack(members: int, sizes: list[int], gen: Any, device: str) -> list[Any]:
    """``[W_1, b_1, ..., W_k, b_k]``, ``W_l`` (M, in, out) and ``b_l`` (M, 1, out).

    ``nn.Linear``'s default: uniform in ``+-1 / sqrt(in)``; drawn on the CPU from ``gen``.
    """
    import torch

    params = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / math.sqrt(a)
        W = (torch.rand(members, a, b, generator=gen) * 2 - 1) * bound
        bias = (torch.rand(members, 1, b, generator=gen) * 2 - 1) * bound
        params += [W.to(device), bias.to(device)]
    return params


def forward(params: list[Any], H: Any) -> Any:
    """(M, n, in) -> (M, n, out): every member at once, one ``baddbmm`` per layer."""
    import torch

    k = len(params) // 2
    for i in range(k):
        H = torch.baddbmm(params[2 * i + 1], H, params[2 * i])
        if i < k - 1:
            H = torch.relu(H)
    return H


def train(params: list[Any], X: Any, loss_fn: Any, n: int, epochs: int, lr: float,
          weight_decay: float, gen: Any) -> int:
    """Adam over the stacked ``params`` (cosine-decayed lr); returns the number of steps taken.

    ``X`` (n, d) is on the device; ``loss_fn(out, rows)`` is the members' summed
    mean loss of their outputs ``out`` (M, b, out) on the rows ``rows`` (None:
    all). The penalty ``weight_decay / n * ||W||^2`` on the weight matrices is a
    Gaussian prior on them: strong on a few observations, fading as they grow.
    """
    for p in params:
        p.requires_grad_(True)
    per_epoch = max(1, math.ceil(n / BATCH))
    total = epochs * per_epoch
    if X.device.type == "cuda" and per_epoch == 1 and total > GRAPH_WARMUP:
        step = _train_graphed(params, X, loss_fn, n, total, lr, weight_decay)
    else:
        step = _train_eager(params, X, loss_fn, n, epochs, per_epoch, lr, weight_decay, gen)
    for p in params:
        p.requires_grad_(False)
    return step


def _objective(params: list[Any], Xb: Any, rows: Any, loss_fn: Any, n: int, weight_decay: float) -> Any:
    """One step's loss: the members' loss on the rows ``rows`` (``Xb`` those rows) plus the weight prior."""
    M = params[0].shape[0]
    loss = loss_fn(forward(params, Xb.expand(M, *Xb.shape)), rows)
    if weight_decay > 0:
        loss = loss + weight_decay / n * sum((W * W).sum() for W in params[0::2])
    return loss


def _cosine(lr: float, step: int, total: int) -> float:
    return lr * 0.5 * (1.0 + math.cos(math.pi * step / total))


def _train_eager(params: list[Any], X: Any, loss_fn: Any, n: int, epochs: int, per_epoch: int, lr: float,
                 weight_decay: float, gen: Any) -> int:
    """``train``'s steps one by one: full batch, or ``per_epoch`` minibatches in a fresh order each epoch."""
    import torch

    opt = torch.optim.Adam(params, lr=lr)
    total = epochs * per_epoch
    step = 0
    for _ in range(epochs):
        order = None if per_epoch == 1 else torch.randperm(n, generator=gen).to(X.device)
        for b in range(per_epoch):
            rows = None if order is None else order[b * BATCH : (b + 1) * BATCH]
            for g in opt.param_groups:
                g["lr"] = _cosine(lr, step, total)
            opt.zero_grad(set_to_none=True)
            _objective(params, X if rows is None else X[rows], rows, loss_fn, n, weight_decay).backward()
            opt.step()
            step += 1
    return step


def _train_graphed(params: list[Any], X: Any, loss_fn: Any, n: int, total: int, lr: float,
                   weight_decay: float) -> int:
    """``train``'s full-batch steps on CUDA, replayed from one captured CUDA graph.

    A step on a few thousand rows is a few dozen tiny kernels, so on a GPU the
    launches, not the arithmetic, are its cost (0.3-0.4 s for 200 steps, whether
    on 100 or 4,000 rows, on an H200). The same Adam steps (``capturable``, its
    learning rate a device tensor set before each replay) are captured once
    after ``GRAPH_WARMUP`` eager steps and replayed, one launch a step.
    """
    import torch

    lr_t = torch.tensor(_cosine(lr, 0, total), device=X.device)
    opt = torch.optim.Adam(params, lr=lr_t, capturable=True)

    def one_step() -> None:
        _objective(params, X, None, loss_fn, n, weight_decay).backward()
        opt.step()

    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch.cuda.Stream.__new__ is unannotated
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # eager steps of the schedule: they also create Adam's state
        for step in range(GRAPH_WARMUP):
            lr_t.fill_(_cosine(lr, step, total))
            opt.zero_grad(set_to_none=True)
            one_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        one_step()
    for step in range(GRAPH_WARMUP, total):
        lr_t.fill_(_cosine(lr, step, total))
        graph.replay()
    torch.cuda.synchronize()
    return total


class _TorchMLP(BaseSurrogate):
    """Shared plumbing: options, input scaling, device transfer, batched prediction."""

    defaults: dict[str, Any] = {}
    params_: list[torch.Tensor]  # the fitted net(s): ``init_stack``'s layout, on ``device``

    def _opt(self, key: str) -> Any:
        v = self.options.get(key)
        return self.defaults[key] if v is None else v

    def _prepare(self, X: np.ndarray) -> None:
        self._xm = X.mean(axis=0)
        xs = X.std(axis=0)
        self._xs = np.where(xs > 1e-12, xs, 1.0)

    def _tensor(self, X: np.ndarray) -> Any:
        import torch

        return torch.as_tensor((X - self._xm) / self._xs, dtype=torch.float32, device=self.device)

    def _outputs(self, X: np.ndarray) -> np.ndarray:
        """(M, n, out) float64 outputs of the fitted net(s) at ``X``."""
        import torch

        parts = []
        with torch_threads(self.device), torch.no_grad():
            M = self.params_[0].shape[0]
            for s in range(0, X.shape[0], PRED_CHUNK):
                Xt = self._tensor(X[s : s + PRED_CHUNK])
                parts.append(forward(self.params_, Xt.expand(M, *Xt.shape)).double().cpu().numpy())
        return np.concatenate(parts, axis=1) if parts else np.zeros((M, 0, self.params_[-1].shape[-1]))


class MLPEnsemble(_TorchMLP):
    """BANANAS: a Gaussian from the mean and spread of an ensemble of MLPs (thesis eq. 3.1)."""

    name = "mlp-ensemble"
    scaled = True
    defaults = ENSEMBLE_DEFAULTS

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        self._const = float(np.ptp(z)) < CONSTANT
        self._zq = norm.ppf(self.levels)
        if self._const:
            self._level = float(np.mean(z))
            self._noise_var = NOISE_FLOOR ** 2
            return
        import torch

        n, d = X.shape
        M = int(self._opt("members"))
        hidden, layers = int(self._opt("hidden")), int(self._opt("layers"))
        self._prepare(X)
        with torch_threads(self.device):
            gen = torch.Generator().manual_seed(self.seed)
            self.params_ = init_stack(M, [d] + [hidden] * layers + [1], gen, self.device)
            idx = torch.randint(0, n, (M, n), generator=gen)
            counts = torch.zeros(M, n).scatter_add_(1, idx, torch.ones(M, n))  # bootstrap weights
            w = counts.to(self.device)
            zt = torch.as_tensor(z, dtype=torch.float32, device=self.device)
            Xt = self._tensor(X)

            def loss_fn(out: Any, rows: Any) -> Any:
                zb, wb = (zt, w) if rows is None else (zt[rows], w[:, rows])
                return ((out[..., 0] - zb) ** 2 * wb).sum() / zb.shape[0]

            self.steps_ = train(self.params_, Xt, loss_fn, n, int(self._opt("epochs")),
                                float(self._opt("lr")), float(self._opt("weight_decay")), gen)
        self.ran_on = self.device
        # observation noise: mean squared out-of-bag residual (in-sample when too few are out of bag)
        f = self._outputs(X)[..., 0]  # (M, n)
        oob = counts.numpy() == 0
        c = oob.sum(axis=0)
        ok = c > 0
        if ok.sum() >= 2:
            r = z[ok] - (f * oob).sum(axis=0)[ok] / c[ok]
        else:
            r = z - f.mean(axis=0)
        self._noise_var = max(float(np.mean(r ** 2)), NOISE_FLOOR ** 2)

    def _members(self, X: np.ndarray) -> np.ndarray:
        """(M, n) member predictions of the standardised target."""
        if self._const:
            return np.full((1, X.shape[0]), self._level)
        return self._outputs(X)[..., 0]

    def _moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        f = self._members(X)
        return f.mean(axis=0), np.sqrt(f.var(axis=0) + self._noise_var)

    def _predict(self, X: np.ndarray) -> np.ndarray:
        mu, sigma = self._moments(X)
        q: NDArray[np.float64] = mu[:, None] + sigma[:, None] * self._zq[None, :]
        return q

    def _scale(self, X: np.ndarray) -> np.ndarray:
        return self._moments(X)[1]

    def _signal_fraction(self, X: np.ndarray) -> np.ndarray:
        """The ensemble spread's share of the predictive sd (the rest is the out-of-bag noise)."""
        var = self._members(X).var(axis=0)
        frac: NDArray[np.float64] = np.sqrt(var / (var + self._noise_var))
        return frac

    def predict_members(self, X: np.ndarray) -> np.ndarray:
        """(M, n) member predictions in the target's units; their sd over axis 0 is eq. 3.1's."""
        if not self.fitted:
            raise RuntimeError(f"{self.name} surrogate is not fitted")
        return self._members(np.asarray(X, float)) * self._sd + self._mu

    def predict_moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and predictive sd (ensemble spread and noise) in the target's units."""
        if not self.fitted:
            raise RuntimeError(f"{self.name} surrogate is not fitted")
        mu, sigma = self._moments(np.asarray(X, float))
        return mu * self._sd + self._mu, sigma * self._sd


class MLPQuantile(_TorchMLP):
    """One MLP, one monotone output per level, trained on the pinball loss over all levels."""

    name = "mlp-quantile"
    defaults = QUANTILE_DEFAULTS

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        self._const = float(np.ptp(z)) < CONSTANT
        if self._const:
            self._level = float(np.mean(z))
            return
        import torch

        n, d = X.shape
        L = self.levels.size
        hidden, layers = int(self._opt("hidden")), int(self._opt("layers"))
        epochs = int(self._opt("epochs"))
        self._prepare(X)
        with torch_threads(self.device):
            gen = torch.Generator().manual_seed(self.seed)
            params = init_stack(1, [d] + [hidden] * layers + [L], gen, "cpu")
            start = norm.ppf(self.levels)  # the standardised marginal's quantiles
            gaps = np.maximum(np.diff(start) - MIN_GAP, 1e-3)
            params[-1][0, 0, 0] = float(start[0])
            params[-1][0, 0, 1:] = torch.as_tensor(np.log(np.expm1(gaps)), dtype=torch.float32)
            self.params_ = [p.to(self.device) for p in params]
            zt = torch.as_tensor(z, dtype=torch.float32, device=self.device)[:, None]
            tau = torch.as_tensor(self.levels, dtype=torch.float32, device=self.device)
            Xt = self._tensor(X)

            def loss_fn(out: Any, rows: Any) -> Any:
                zb = zt if rows is None else zt[rows]
                r = zb - monotone(out[0])
                return torch.maximum(tau * r, (tau - 1) * r).mean()  # over rows and levels

            self.steps_ = train(self.params_, Xt, loss_fn, n, epochs, float(self._opt("lr")),
                                float(self._opt("weight_decay")), gen)
        self.ran_on = self.device

    def _predict(self, X: np.ndarray) -> np.ndarray:
        if self._const:
            return np.full((X.shape[0], self.levels.size), self._level)
        import torch

        raw = torch.from_numpy(self._outputs(X)[0])  # float64: the increments stay strictly positive
        q: NDArray[np.float64] = monotone(raw).numpy()
        return q


def monotone(out: Any) -> Any:
    """(n, L) raw outputs -> increasing quantiles: first output plus cumulative positive gaps."""
    import torch
    import torch.nn.functional as F

    gaps = F.softplus(out[:, 1:]) + MIN_GAP
    return torch.cat([out[:, :1], out[:, :1] + torch.cumsum(gaps, dim=1)], dim=1)
