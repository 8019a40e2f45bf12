"""The torch MLP surrogates: BANANAS ensemble (``mlp-ensemble``) and quantile MLP (``mlp-quantile``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from calibo.engine.conformal import Bounds, conformalize, midpoint_levels
from calibo.engine.surrogates import make_surrogate
from calibo.engine.surrogates import mlp as mlp_module
from tests.test_surrogates import data, signal

torch = pytest.importorskip("torch")

LEVELS = midpoint_levels(10)  # 0.05, 0.15, ..., 0.95
NAMES = ["mlp-ensemble", "mlp-quantile"]


def far_points(n: int, seed: int) -> np.ndarray:
    """Points well outside the unit cube the training data fill."""
    return 2.0 + np.random.default_rng(seed).random((n, 3))


def test_ensemble_learns_the_signal_and_is_unsure_away_from_data() -> None:
    X, y = data(300, 0)
    Xt, yt = data(2000, 1)
    m = make_surrogate("mlp-ensemble", LEVELS, seed=0).fit(X, y)
    mean, sd = m.predict_moments(Xt)
    assert np.mean(np.abs(mean - signal(Xt))) < 0.2  # noise sd is 0.1 to 0.6; measured 0.07
    q = m.predict_quantiles(Xt)
    band = np.mean((q[:, 1] <= yt) & (yt <= q[:, 8]))  # raw, nominal 70%
    assert 0.6 <= band <= 0.9, band
    # the quantiles are the Gaussian mu + sigma Phi^-1(level), sigma the scale the conformal layer uses
    np.testing.assert_allclose(m.predict_scale(Xt), sd, rtol=1e-10)
    np.testing.assert_allclose(q[:, 5] - q[:, 4], 2 * 0.12566 * sd, rtol=1e-3)
    # eq. 3.1's spread over members: larger far from the data than among it
    near = m.predict_members(Xt).std(axis=0)
    far = m.predict_members(far_points(500, 2)).std(axis=0)
    assert far.mean() > 3 * near.mean(), (far.mean(), near.mean())
    assert np.mean(m.predict_scale(far_points(500, 2))) > np.mean(m.predict_scale(Xt))
    assert m.scaled and np.all(m.predict_scale(Xt) > 0)


def test_quantile_mlp_is_monotone_and_roughly_calibrated() -> None:
    levels = [0.1, 0.3, 0.5, 0.7, 0.9]
    bands = []
    for seed in range(3):
        X, y = data(400, seed)
        Xt, yt = data(2000, 100 + seed)
        m = make_surrogate("mlp-quantile", levels, seed=seed).fit(X, y)
        q = m.predict_quantiles(Xt)
        raw = m._predict(Xt)  # before the base class's crossing repair: monotone by construction
        assert np.all(np.diff(raw, axis=1) > 0)
        assert np.all(np.diff(q, axis=1) > 0)
        bands.append(np.mean((q[:, 0] <= yt) & (yt <= q[:, -1])))
        assert np.mean(np.abs(q[:, 2] - signal(Xt))) < 0.2
    assert abs(np.mean(bands) - 0.8) < 0.1, bands  # raw (unconformalized), held-out


@pytest.mark.parametrize("name", NAMES)
def test_split_conformal_coverage_is_nominal(name: str) -> None:
    alphas = np.array([0.1, 0.2, 0.4, 0.6, 0.8])  # one per pair, nested so the row sort keeps pairs apart
    cover = []
    for seed in range(30):  # one seed's coverage has sd ~0.06 (50 calibration points); the mean ~0.012
        X, y = data(200, seed)
        Xt, yt = data(1000, 1000 + seed)

        def make(seed=seed):
            return make_surrogate(name, LEVELS, seed=seed)

        cf = conformalize(make, X, y, "split", seed)
        assert cf.scaled == (name == "mlp-ensemble")
        raw = cf.model.predict_quantiles(Xt)
        Q = Bounds("split", raw, cf.scores, scale=cf.model.predict_scale(Xt)).at(alphas)
        cover.append([np.mean((Q[:, j] <= yt) & (yt <= Q[:, -1 - j])) for j in range(alphas.size)])
    cover = np.mean(cover, axis=0)
    np.testing.assert_allclose(cover, 1 - alphas, atol=0.05)


@pytest.mark.parametrize("name", NAMES)
def test_seeded_fits_are_reproducible(name: str) -> None:
    X, y = data(80, 3)
    Xt, _ = data(300, 4)
    a = make_surrogate(name, LEVELS, seed=5).fit(X, y)
    b = make_surrogate(name, LEVELS, seed=5).fit(X, y)
    np.testing.assert_array_equal(a.predict_quantiles(Xt), b.predict_quantiles(Xt))
    np.testing.assert_array_equal(a.predict_scale(Xt), b.predict_scale(Xt))
    c = make_surrogate(name, LEVELS, seed=6).fit(X, y)
    assert not np.allclose(a.predict_quantiles(Xt), c.predict_quantiles(Xt))
    clone = a.fold_clone().fit(X, y)  # same options and seed: the same fit
    np.testing.assert_array_equal(clone.predict_quantiles(Xt), a.predict_quantiles(Xt))
    assert a.ran_on == "cpu"


def test_members_train_together_in_one_batched_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = []
    original = torch.optim.Adam.step

    def counting_step(self, *args, **kwargs):
        steps.append([tuple(p.shape) for g in self.param_groups for p in g["params"]])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", counting_step)
    X, y = data(60, 0)
    m = make_surrogate("mlp-ensemble", LEVELS, seed=0, members=7, hidden=16, layers=3, epochs=40).fit(X, y)
    # one optimizer, 40 steps in all (not 7 x 40), each over stacked (members, in, out) tensors
    assert len(steps) == 40 == m.steps_
    assert steps[0] == [(7, 3, 16), (7, 1, 16), (7, 16, 16), (7, 1, 16), (7, 16, 16), (7, 1, 16),
                        (7, 16, 1), (7, 1, 1)]
    assert [tuple(p.shape) for p in m.params_] == steps[0]
    f = m.predict_members(X)
    assert f.shape == (7, 60)
    assert np.all(np.std(f, axis=0) > 0)  # the members differ (initialisation and bootstrap)


@pytest.mark.parametrize("name", NAMES)
def test_minibatches_beyond_the_batch_size(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mlp_module, "BATCH", 64)
    X, y = data(200, 1)
    Xt, _ = data(1000, 2)
    m = make_surrogate(name, LEVELS, seed=0, epochs=50).fit(X, y)
    assert m.steps_ == 50 * 4  # 200 rows in batches of 64: four steps an epoch
    q = m.predict_quantiles(Xt)
    assert np.mean(np.abs(np.median(q, axis=1) - signal(Xt))) < 0.3


def test_importing_the_engine_does_not_import_torch() -> None:
    code = "import sys, calibo.engine, calibo.engine.surrogates.mlp; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", NAMES)
def test_fits_on_cuda_like_on_the_cpu(name: str) -> None:
    X, y = data(150, 0)
    Xt, _ = data(500, 1)
    gpu = make_surrogate(name, LEVELS, seed=2, device="cuda").fit(X, y)
    cpu = make_surrogate(name, LEVELS, seed=2, device="cpu").fit(X, y)
    assert gpu.ran_on == "cuda" and cpu.ran_on == "cpu"
    assert all(p.device.type == "cuda" for p in gpu.params_)
    qg, qc = gpu.predict_quantiles(Xt), cpu.predict_quantiles(Xt)
    assert qg.dtype == np.float64 and np.all(np.isfinite(qg))
    # same initialisation and data; float32 round-off on another device drifts a little in training
    np.testing.assert_allclose(qg, qc, atol=0.1 * np.std(y))
    np.testing.assert_allclose(gpu.predict_scale(Xt), cpu.predict_scale(Xt), rtol=0.2, atol=0.02)
    clone = gpu.fold_clone()
    assert clone.device == "cuda"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", NAMES)
def test_cuda_graph_training_takes_the_eager_steps(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Full-batch CUDA training replays one captured step; it lands where eager CUDA steps land."""
    X, y = data(300, 3)
    Xt, _ = data(500, 4)
    graphed = make_surrogate(name, LEVELS, seed=1, device="cuda", epochs=120).fit(X, y)
    captured = []
    real = torch.cuda.CUDAGraph.replay
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", lambda g: captured.append(1) or real(g))
    graphed_again = make_surrogate(name, LEVELS, seed=1, device="cuda", epochs=120).fit(X, y)
    assert len(captured) == 120 - mlp_module.GRAPH_WARMUP and graphed_again.steps_ == 120
    warmup = mlp_module.GRAPH_WARMUP
    monkeypatch.setattr(mlp_module, "GRAPH_WARMUP", 10_000)  # never captured: every step eager
    eager = make_surrogate(name, LEVELS, seed=1, device="cuda", epochs=120).fit(X, y)
    assert eager.steps_ == 120 and len(captured) == 120 - warmup
    np.testing.assert_array_equal(graphed.predict_quantiles(Xt), graphed_again.predict_quantiles(Xt))
    # the same steps; capturable Adam keeps its step count on the device (float32 bias corrections),
    # and the round-off drifts in training as between devices (test_fits_on_cuda_like_on_the_cpu)
    gap = np.abs(graphed.predict_quantiles(Xt) - eager.predict_quantiles(Xt))
    # (H200: ensemble 0.0004 / 0.003 sd mean / max, the pinball-trained quantile net 0.015 / 0.08)
    assert gap.mean() < 0.03 * np.std(y) and gap.max() < 0.15 * np.std(y), (gap.mean(), gap.max())
