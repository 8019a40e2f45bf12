"""QGP's torch (gpytorch) backend against the scikit-learn one, its SGPR path, seeds and folds.

Agreement tolerance (``test_backends_agree``): on the same data (n = 200,
d = 3) the two backends' predictive means differ by an RMSE under 0.05 of the
mean predictive sd, and every predictive sd ratio lies in [0.85, 1.15]. Both
maximise the same likelihood from the same start with L-BFGS-B in the same log
space, so on one machine they agree to ~1e-9; the margin is for other BLAS
builds and GPUs, where round-off can move the optimiser a little.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibo.engine.surrogates import QGP, make_surrogate
from calibo.engine.surrogates import qgp as qgp_module

torch = pytest.importorskip("torch")
gpytorch = pytest.importorskip("gpytorch")

from calibo.engine.surrogates import gp_torch  # noqa: E402

LEVELS = (np.arange(10) + 0.5) / 10
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ROOT = Path(__file__).resolve().parents[1]


def data(n: int, seed: int, d: int = 3, noise: float = 0.2):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    f = 2 * X[:, 0] + np.sin(4 * X[:, 1])
    return X, f + noise * rng.standard_normal(n), f


def assert_agree(a: QGP, b: QGP, X: np.ndarray) -> None:
    ma, sa = a.predict_moments(X)
    mb, sb = b.predict_moments(X)
    assert np.sqrt(np.mean((ma - mb) ** 2)) < 0.05 * np.mean(sa)
    ratio = sb / sa
    assert 0.85 <= ratio.min() and ratio.max() <= 1.15, (ratio.min(), ratio.max())


def test_backends_agree() -> None:
    X, y, _ = data(200, 0)
    Xt, _, _ = data(500, 1)
    sk = make_surrogate("qgp", LEVELS, seed=0, backend="sklearn").fit(X, y)
    th = make_surrogate("qgp", LEVELS, seed=0, backend="torch").fit(X, y)
    assert sk.backend_ == "sklearn" and th.backend_ == "torch" and not th._torch.sparse
    assert th.ran_on == "cpu" and th._gp is None
    assert_agree(sk, th, Xt)
    q_sk, q_th = sk.predict_quantiles(Xt), th.predict_quantiles(Xt)
    assert q_th.shape == (500, 10) and np.all(np.diff(q_th, axis=1) >= 0)
    assert np.sqrt(np.mean((q_sk - q_th) ** 2)) < 0.05 * np.std(y)
    h_sk, h_th = sk.tuned_hyperparameters(), th.tuned_hyperparameters()
    np.testing.assert_allclose(np.log(h_th["lengthscale"]), np.log(h_sk["lengthscale"]), atol=0.1)


def test_auto_picks_sklearn_small_and_sgpr_beyond_exact_up_to() -> None:
    X, y, _ = data(130, 2)
    small = make_surrogate("qgp", LEVELS, seed=0, exact_up_to=200).fit(X, y)
    assert small.backend_ == "sklearn" and small.choose_backend(201) == "torch"
    assert make_surrogate("qgp", LEVELS).choose_backend(10_000) == "torch"
    on_cuda = make_surrogate("qgp", LEVELS, device="cuda")  # small fits stay on the CPU: launch-bound on a GPU
    assert on_cuda.choose_backend(qgp_module.CUDA_FROM - 1) == "sklearn"
    assert on_cuda.choose_backend(qgp_module.CUDA_FROM) == "torch"
    assert make_surrogate("qgp", LEVELS, device="cuda", backend="sklearn").choose_backend(20) == "sklearn"
    with pytest.raises(ValueError):
        make_surrogate("qgp", LEVELS, backend="jax")


def test_sgpr_beyond_exact_up_to_is_calibrated() -> None:
    """Raw central-80% band (levels 0.1, 0.9) on held-out data with known noise sd 0.2: 0.80 +- 0.05."""
    X, y, _ = data(1500, 3)
    Xt, yt, ft = data(2000, 4)
    m = make_surrogate("qgp", (0.1, 0.5, 0.9), seed=0, backend="torch", exact_up_to=300,
                       inducing_points=64).fit(X, y)
    assert m._torch.sparse and m._torch.model.covar_module.inducing_points.shape == (64, 3)
    q = m.predict_quantiles(Xt)
    band = np.mean((q[:, 0] <= yt) & (yt <= q[:, 2]))
    assert 0.75 <= band <= 0.85, band
    mean, sd = m.predict_moments(Xt)
    assert np.sqrt(np.mean((mean - ft) ** 2)) < 0.1  # the signal, well inside the noise
    assert 0.15 < np.median(sd) < 0.3  # about the noise sd: the data pin the function down
    # auto on CPU lands on the same model beyond exact_up_to
    auto = make_surrogate("qgp", (0.1, 0.5, 0.9), seed=0, exact_up_to=300, inducing_points=64).fit(X, y)
    assert auto.backend_ == "torch" and auto._torch.sparse
    np.testing.assert_array_equal(auto.predict_quantiles(Xt), q)


def test_sgpr_cached_prediction_is_gpytorchs() -> None:
    """The SGPR moments kept at fit (Woodbury on R R^T + D) are what gpytorch's own predictive path gives."""
    X, y, _ = data(900, 7)
    Xt, _, _ = data(700, 8)
    m = make_surrogate("qgp", LEVELS, seed=0, backend="torch", exact_up_to=300, inducing_points=64).fit(X, y)
    gp = m._torch
    assert gp.sparse
    mean, sd = gp.moments(Xt)
    with torch.no_grad(), gpytorch.settings.max_cholesky_size(10_000):
        out = gp.model.likelihood(gp.model(torch.as_tensor(Xt, dtype=gp_torch.DTYPE)))
        ref_mean, ref_sd = out.mean.numpy(), out.variance.clamp_min(0).sqrt().numpy()
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(sd, ref_sd, rtol=1e-6, atol=1e-8)
    assert sd.min() > 0 and np.ptp(mean) > 0.5  # not a degenerate case: the signal is there


@pytest.mark.parametrize("exact_up_to", [4000, 300])
def test_reproducible_under_the_seed(exact_up_to: int) -> None:
    X, y, _ = data(400, 5)
    Xt, _, _ = data(300, 6)

    def run(seed: int) -> np.ndarray:
        return make_surrogate("qgp", LEVELS, seed=seed, backend="torch", exact_up_to=exact_up_to,
                              inducing_points=48).fit(X, y).predict_quantiles(Xt)

    a = run(7)
    np.testing.assert_array_equal(a, run(7))
    if exact_up_to < 400:  # SGPR: another seed draws other subsamples and inducing inputs
        assert not np.array_equal(a, run(8))


def test_torch_threads_restored() -> None:
    before = torch.get_num_threads()
    X, y, _ = data(60, 7)
    make_surrogate("qgp", LEVELS, backend="torch").fit(X, y).predict_quantiles(X)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("exact_up_to", [4000, 150])
def test_fold_clone_reuses_the_torch_hyperparameters(exact_up_to: int, monkeypatch) -> None:
    X, y, _ = data(300, 8)
    m = make_surrogate("qgp", LEVELS, seed=0, backend="torch", exact_up_to=exact_up_to,
                       inducing_points=48).fit(X, y)

    def no_tuning(*a, **k):
        raise AssertionError("a fold clone must not tune hyperparameters")

    monkeypatch.setattr(gp_torch, "tune", no_tuning)
    clone = m.fold_clone()
    assert not clone.fitted and clone.options == m.options
    clone.fit(X[:200], y[:200])
    assert clone.backend_ == "torch"
    h, hc = m.tuned_hyperparameters(), clone.tuned_hyperparameters()
    np.testing.assert_allclose(hc["lengthscale"], h["lengthscale"], rtol=1e-12)
    np.testing.assert_allclose([hc["outputscale"], hc["noise"]], [h["outputscale"], h["noise"]], rtol=1e-12)
    mean, sd = clone.predict_moments(X[200:])
    assert mean.shape == sd.shape == (100,) and np.all(sd > 0)


def test_fold_clone_across_backends() -> None:
    # the full fit lands beyond exact_up_to (torch SGPR), a fold below it (scikit-learn): same kernel
    X, y, _ = data(240, 9)
    m = make_surrogate("qgp", LEVELS, seed=0, exact_up_to=200, inducing_points=48).fit(X, y)
    assert m.backend_ == "torch"
    clone = m.fold_clone().fit(X[:180], y[:180])
    assert clone.backend_ == "sklearn" and clone._gp.optimizer is None
    h, hc = m.tuned_hyperparameters(), clone.tuned_hyperparameters()
    np.testing.assert_allclose(hc["lengthscale"], h["lengthscale"], rtol=1e-12)
    # and back: a scikit-learn fit's kernel drives a torch fold
    sk = make_surrogate("qgp", LEVELS, seed=0, exact_up_to=200).fit(X[:180], y[:180])
    back = sk.fold_clone().fit(X, y)
    assert sk.backend_ == "sklearn" and back.backend_ == "torch"
    np.testing.assert_allclose(back.tuned_hyperparameters()["lengthscale"],
                               sk.tuned_hyperparameters()["lengthscale"], rtol=1e-12)


def test_conformal_folds_with_the_torch_backend() -> None:
    from calibo.engine.conformal import conformalize

    X, y, _ = data(45, 10)

    def make():
        return make_surrogate("qgp", LEVELS, seed=0, backend="torch")

    cf = conformalize(make, X, y, "cv+", 0, k_folds=5)
    assert len(cf.fold_models) == 5 and all(f.backend_ == "torch" for f in cf.fold_models)
    h = cf.model.tuned_hyperparameters()
    for f in cf.fold_models:
        np.testing.assert_allclose(f.tuned_hyperparameters()["lengthscale"], h["lengthscale"], rtol=1e-12)


@CUDA
def test_cuda_exact_matches_cpu() -> None:
    X, y, _ = data(200, 11)
    Xt, _, _ = data(500, 12)
    cpu = make_surrogate("qgp", LEVELS, seed=0, backend="torch").fit(X, y)
    gpu = make_surrogate("qgp", LEVELS, seed=0, device="cuda", backend="torch").fit(X, y)
    assert gpu.backend_ == "torch" and gpu.ran_on == "cuda" and cpu.ran_on == "cpu"
    assert gpu._torch.model.covar_module.raw_outputscale.device.type == "cuda"
    assert_agree(cpu, gpu, Xt)


@CUDA
def test_cuda_sgpr_matches_cpu() -> None:
    X, y, _ = data(1500, 13)
    Xt, _, _ = data(500, 14)
    opts = {"backend": "torch", "exact_up_to": 300, "inducing_points": 64}
    cpu = make_surrogate("qgp", LEVELS, seed=0, **opts).fit(X, y)
    gpu = make_surrogate("qgp", LEVELS, seed=0, device="cuda", **opts).fit(X, y)
    assert gpu._torch.sparse and gpu.ran_on == "cuda"
    assert_agree(cpu, gpu, Xt)
    clone = gpu.fold_clone().fit(X[:1000], y[:1000])  # folds stay on the GPU and only solve
    assert clone.ran_on == "cuda" and clone._torch.sparse


def test_importing_the_engine_does_not_import_torch() -> None:
    code = ("import sys, calibo.engine, calibo.engine.surrogates, calibo.engine.optimizer, calibo.engine.fit, "
            "calibo.engine.select, calibo.engine.state, calibo.engine.study; "
            "print('torch' in sys.modules, 'gpytorch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
