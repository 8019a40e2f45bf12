"""What an improvement acquisition improves on (EngineConfig.incumbent): the best observation, or the
surrogate's least median at the observed configurations (the plug-in incumbent of noisy EI)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from conftest import unique
from test_api import BRANIN, assert_error

from calibo.engine import EngineConfig, SearchSpace, fit, initial_states, select
from calibo.engine.acquisition import median
from calibo.engine.errors import ConfigError

SPACE = SearchSpace.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})


def noisy(n: int = 60, sd: float = 0.3, seed: int = 4) -> list[tuple[dict, float]]:
    """A smooth bowl (minimum 0 at x = 0.7) observed with known noise, plus one lucky draw far below it."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, n)
    y = 4.0 * (x - 0.7) ** 2 + rng.normal(0.0, sd, n)
    y[np.argmin(np.abs(x - 0.2))] = -2.0  # at x ~ 0.2 the bowl is ~1: a draw no configuration repeats
    return [({"x": float(a)}, float(b)) for a, b in zip(x, y, strict=True)]


def test_the_plug_in_incumbent_is_the_models_best_median_not_the_luckiest_draw() -> None:
    obs = noisy()
    cfg = EngineConfig(incumbent="model", warp="none", n_candidates=300)
    snap = fit(obs, SPACE, cfg, seed=0)
    lucky = min(v for _, v in obs)
    assert snap.best > lucky + 1.0  # the model does not believe the -2.0
    assert -0.4 < snap.best < 0.4  # near the bowl's true minimum, 0
    # the fit's own surrogate at the observed configurations: a fit of the same data and seed whose
    # candidates are those rows stores its quantiles there
    at = fit(obs, SPACE, cfg, seed=0, candidates=snap.observed)
    assert snap.best == pytest.approx(float(median(at.raw).min()), abs=1e-5)
    observed = fit(obs, SPACE, EngineConfig(warp="none", n_candidates=300), seed=0)
    assert observed.best == lucky  # the default: the best observation


def test_measured_against_the_luckiest_draw_the_search_leaves_the_known_basin() -> None:
    """Against -2.0 no configuration near the bowl's minimum can improve, and log EI sends the next
    trial to where the model knows least; against the model's own best it refines the bowl."""
    obs = noisy()
    chosen = {}
    for incumbent in ("observed", "model"):
        cfg = EngineConfig(incumbent=incumbent, warp="none", n_candidates=300)
        snap = fit(obs, SPACE, cfg, seed=0)
        (s,) = select(snap, initial_states(cfg), SPACE, cfg, count=1, seed=0, asked=len(obs))
        chosen[incumbent] = s.params["x"]
    assert abs(chosen["model"] - 0.7) < 0.15, chosen
    assert abs(chosen["observed"] - 0.7) > abs(chosen["model"] - 0.7), chosen


def test_incumbent_must_be_known() -> None:
    with pytest.raises(ConfigError) as e:
        EngineConfig(incumbent="median")
    assert e.value.field == "incumbent"


def test_the_setting_goes_through_the_api(http: httpx.Client) -> None:
    body = {"name": unique(), "space": BRANIN,
            "settings": {"incumbent": "model"}}
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 201 and r.json()["settings"]["incumbent"] == "model"
    bad = {**body, "name": body["name"] + "-bad", "settings": {"incumbent": "lucky"}}
    assert_error(http.post("/v1/studies", json=bad), 422, "invalid_request", "settings.incumbent")


def test_with_several_objectives_there_is_no_single_incumbent_and_the_setting_changes_nothing() -> None:
    obs = noisy(30)
    values = [(p, [v, (p["x"] - 0.2) ** 2]) for p, v in obs]
    snaps = [fit(values, SPACE, EngineConfig(incumbent=inc, n_candidates=200), seed=0,
                 directions=["minimize", "minimize"]) for inc in ("observed", "model")]
    assert snaps[0].best == snaps[1].best
    np.testing.assert_array_equal(snaps[0].candidates, snaps[1].candidates)
