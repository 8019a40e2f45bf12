"""Where fits run: CALIBO_DEVICE, the CPU fallback on CUDA errors, and the device in the status."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from test_api import BRANIN, ask, create, tell, wait_fitted

from calibo.engine import EngineConfig, SearchSpace, fit
from calibo.engine import device as devices
from calibo.engine.surrogates import SURROGATES
from calibo.engine.surrogates.qgp import QGP

SPACE = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1},
                               "y": {"type": "float", "low": 0, "high": 1}})


def observations(n: int) -> list[tuple[dict, float]]:
    rng = np.random.default_rng(0)
    return [({"x": float(a), "y": float(b)}, float((a - 0.3) ** 2 + b)) for a, b in rng.random((n, 2))]


def test_resolve_reads_the_setting_and_never_picks_a_missing_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    assert devices.resolve("cpu") == ("cpu", None)
    assert devices.resolve("auto") == ("cpu", None)
    where, why = devices.resolve("cuda")
    assert where == "cpu" and "no GPU" in why
    monkeypatch.setenv("CALIBO_DEVICE", "cuda")
    assert devices.resolve()[0] == "cpu"
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    assert devices.resolve() == ("cuda", None) and devices.resolve("auto") == ("cuda", None)
    assert devices.resolve("cpu") == ("cpu", None)
    with pytest.raises(ValueError):
        devices.resolve("tpu")


def test_a_cpu_fit_records_its_device() -> None:
    snap = fit(observations(40), SPACE, EngineConfig(n_candidates=50), device="cpu")
    assert snap.meta.device == "cpu" and snap.meta.device_fallback is None


class CudaFails(QGP):
    """Raises what torch raises when a kernel fails, whenever it is asked to fit on CUDA."""

    name = "cuda-fails"

    def _fit(self, X, z):
        if self.device == "cuda":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        super()._fit(X, z)


def test_a_cuda_error_refits_on_the_cpu_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SURROGATES, "cuda-fails", CudaFails)
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    cfg = EngineConfig(surrogate="cuda-fails", n_candidates=50)
    snap = fit(observations(40), SPACE, cfg, device="cuda")
    assert snap.meta.device == "cpu"
    assert "CUDA failed" in snap.meta.device_fallback and "illegal memory" in snap.meta.device_fallback
    ref = fit(observations(40), SPACE, EngineConfig(n_candidates=50), device="cpu")
    np.testing.assert_array_equal(snap.raw, ref.raw)  # the same fit the CPU would have made: nothing lost


def test_other_errors_are_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(QGP):
        def _fit(self, X, z):
            raise RuntimeError("a bug, not CUDA")

    monkeypatch.setitem(SURROGATES, "broken", Broken)
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    cfg = EngineConfig(surrogate="broken", n_candidates=50)
    with pytest.raises(RuntimeError, match="a bug"):
        fit(observations(40), SPACE, cfg, device="cuda")


@pytest.mark.parametrize("surrogate,conformal", [("qgp", None), ("mlp-ensemble", "jab+"),
                                                 ("lw-knn", "crossval"), ("gp-recal", "split")])
def test_the_study_view_says_where_the_fit_ran(http: httpx.Client, surrogate: str, conformal: str | None) -> None:
    # every family fits in the server's fit process (torch ones import it there, lazily) and the
    # next ask is served from its conformalized snapshot
    settings = {"n_warmup": 5, "conformalize_from": 5, "n_bootstraps": 4} | (
        {"conformal": conformal} if conformal else {})
    s = create(http, BRANIN, surrogate=surrogate, settings=settings)
    for _ in range(6):
        t = ask(http, s["id"])[0]
        assert tell(http, s["id"], t["id"], value=float(t["params"]["x1"] ** 2)).status_code == 200
    st = wait_fitted(http, s["id"], 6)
    assert st["device"] == "cpu", st
    if conformal:
        assert st["method"] == conformal, st
        pred = ask(http, s["id"])[0]["prediction"]
        assert pred["surrogate"] == surrogate and pred["method"] == conformal
