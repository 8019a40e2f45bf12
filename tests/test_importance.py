"""Hyperparameter importance: the engine's decomposition on functions with known first-order
indices (Ishigami, an additive function, dummies, a categorical, a conditional space), on outcomes of
any finite size (scaled by up to 1e300, with outliers up to +-1.8e308: finite shares that sum to 1,
the same as on the unscaled values), and GET /v1/studies/{study}/importance over HTTP on SQLite and
PostgreSQL (answer, caching, invalidation by a tell, errors, read tokens, multi-objective, extreme
values), through the client too."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from conftest import LiveServer, backend_server, unique
from test_api import ask, tell

from calibo import Client
from calibo.engine.importance import MIN_TRIALS, importance
from calibo.engine.space import SearchSpace

WRITE = {"Authorization": "Bearer w-token"}
READ = {"Authorization": "Bearer r-token"}


def _obs(space: dict, f, n: int, seed: int = 0) -> tuple[SearchSpace, list]:
    sp = SearchSpace.from_dict(space)
    configs = sp.from_unit(sp.sample_uniform(n, np.random.default_rng(seed)))
    return sp, [(c, f(c)) for c in configs]


def _shares(r) -> dict[str, float]:
    return {p["param"]: p["importance"] for p in r.params}


# ------------------------------------------------------------------ engine
def test_ishigami_first_order_indices() -> None:
    space = {f"x{i}": {"type": "float", "low": -np.pi, "high": np.pi} for i in range(4)}
    sp, obs = _obs(space, lambda p: float(np.sin(p["x0"]) + 7 * np.sin(p["x1"]) ** 2
                                         + 0.1 * p["x2"] ** 4 * np.sin(p["x0"])), 200)
    r = importance(obs, sp, seed=0)
    s = _shares(r)
    # first-order Sobol' indices 0.314, 0.442, 0, (dummy) 0: normalised 0.415, 0.585, 0, 0
    assert [p["param"] for p in r.params[:2]] == ["x1", "x0"]
    assert s["x1"] == pytest.approx(0.585, abs=0.12) and s["x0"] == pytest.approx(0.415, abs=0.12)
    assert s["x2"] < 0.05 and s["x3"] < 0.05  # x2 acts only through its interaction with x0
    assert sum(s.values()) == pytest.approx(1.0)
    for p in r.params:
        assert 0.0 <= p["low"] <= p["high"] <= 1.0
    assert r.r2_oob is not None and r.r2_oob > 0.3 and r.n_trials == 200


def test_additive_shares_and_a_dummy() -> None:
    a = {"x0": 3.0, "x1": 2.0, "x2": 1.0, "x3": 0.0}
    space = {k: {"type": "float", "low": 0.0, "high": 1.0} for k in a}
    sp, obs = _obs(space, lambda p: sum(a[k] * p[k] for k in a), 150, seed=1)
    s = _shares(importance(obs, sp, seed=1))
    truth = {k: v * v / 14 for k, v in a.items()}  # each a_k**2 / sum a**2
    for k in a:
        assert s[k] == pytest.approx(truth[k], abs=0.08), k
    assert s["x3"] < 0.02


def test_categorical_is_one_factor_and_direction_does_not_matter() -> None:
    space = {"kind": {"type": "categorical", "choices": ["a", "b", "c", "d"]},
             "x": {"type": "float", "low": 0.0, "high": 1.0}, "noise": {"type": "float", "low": 0.0, "high": 1.0}}
    shift = {"a": 0.0, "b": 3.0, "c": -2.0, "d": 1.0}
    sp, obs = _obs(space, lambda p: shift[p["kind"]] + p["x"], 120, seed=2)
    r = importance(obs, sp, seed=2)
    assert [p["param"] for p in r.params] == ["kind", "x", "noise"]  # one entry per parameter
    assert _shares(r)["kind"] > 0.8
    flipped = importance([(c, -v) for c, v in obs], sp, seed=2)
    assert _shares(flipped) == pytest.approx(_shares(r), abs=1e-3)  # the same model up to GBM ties


def test_conditional_parameter_counts_where_active() -> None:
    space = {"kernel": {"type": "categorical", "choices": ["linear", "rbf"]},
             "gamma": {"type": "float", "low": 0.0, "high": 1.0, "condition": {"parent": "kernel", "values": ["rbf"]}},
             "C": {"type": "float", "low": 0.0, "high": 1.0}}
    sp, obs = _obs(space, lambda p: 5.0 * p.get("gamma", 0.5) + 0.1 * p["C"], 160, seed=3)
    r = importance(obs, sp, seed=3)
    s = _shares(r)
    assert r.params[0]["param"] == "gamma" and s["gamma"] > 0.6 and s["C"] < s["gamma"]


def test_too_few_trials_and_failed_values_are_dropped() -> None:
    sp, obs = _obs({"x": {"type": "float", "low": 0.0, "high": 1.0}}, lambda p: p["x"], MIN_TRIALS - 1)
    with pytest.raises(ValueError, match="at least"):
        importance(obs + [({"x": 0.5}, float("nan"))], sp)
    obs = _obs({"x": {"type": "float", "low": 0.0, "high": 1.0},
                "y": {"type": "float", "low": 0.0, "high": 1.0}}, lambda p: p["x"], 40)[1]
    r = importance(obs + [({"x": 0.1, "y": 0.1}, float("inf"))], SearchSpace.from_dict(
        {"x": {"type": "float", "low": 0.0, "high": 1.0}, "y": {"type": "float", "low": 0.0, "high": 1.0}}))
    assert r.n_trials == 40 and r.params[0]["param"] == "x"


# ------------------------------------------------------------------ extreme outcomes
ADDITIVE = {"x0": 3.0, "x1": 2.0, "x2": 1.0, "x3": 0.0}  # x3 a dummy


def _additive(n: int = 60, seed: int = 1) -> tuple[SearchSpace, list]:
    return _obs({k: {"type": "float", "low": 0.0, "high": 1.0} for k in ADDITIVE},
                lambda p: sum(a * p[k] for k, a in ADDITIVE.items()), n, seed=seed)


def _assert_sound(r) -> None:
    """What any answer must be, whatever the values: finite numbers (JSON has no NaN or infinity),
    shares in [0, 1] summing to 1 where any is positive, bands holding the estimate, and an R^2 that
    is a number no greater than 1 (or null), never the 1.0 of a model scored against nothing."""
    json.dumps(r.to_dict(), allow_nan=False)
    est = [p["importance"] for p in r.params]
    assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in est), est
    if any(v > 0 for v in est):
        assert sum(est) == pytest.approx(1.0, abs=1e-9)
    for p in r.params:
        assert all(math.isfinite(v) for v in (p["low"], p["high"], *p["shares"])), p
        assert 0.0 <= p["low"] <= p["importance"] <= p["high"] <= 1.0, p
    if r.r2_oob is not None:
        assert math.isfinite(r.r2_oob) and r.r2_oob < 1.0, r.r2_oob


def _all_shares(r) -> dict[str, list[float]]:
    return {p["param"]: p["shares"] for p in r.params}


@pytest.mark.parametrize("scale", [1e20, 1e200, 1e300, 1e-300])
def test_outcomes_of_any_scale_give_the_same_answer(scale: float) -> None:
    sp, obs = _additive()
    ordinary = importance(obs, sp, seed=1)
    r = importance([(c, v * scale) for c, v in obs], sp, seed=1)
    _assert_sound(r)
    assert r.params[0]["param"] == "x0" and sum(_shares(r).values()) == pytest.approx(1.0, abs=1e-9)
    assert r.r2_oob == pytest.approx(ordinary.r2_oob, abs=1e-9) and r.r2_oob > 0.5
    for name, shares in _all_shares(ordinary).items():
        assert _all_shares(r)[name] == pytest.approx(shares, abs=1e-9), name


@pytest.mark.parametrize("transform", [lambda v: 1e250 * v, lambda v: v + 1e6, lambda v: 2.0 ** 900 * v],
                         ids=["times-1e250", "plus-1e6", "times-2**900"])
@pytest.mark.parametrize("seed", [0, 3])
def test_shares_do_not_depend_on_the_units(transform, seed: int) -> None:
    # Tolerance 1e-9: the answer is computed on the standardised values, so a change of units moves
    # it only by the rounding of the rescaled values (measured: at most 3e-16 on every share and 5e-13
    # on R^2 over 12 such data sets); the smallest real change, a GBM tie resolved the other way (as
    # negating the values does), moves a share by 1e-3 or more.
    space = {f"x{i}": {"type": "float", "low": -np.pi, "high": np.pi} for i in range(4)}
    sp, obs = _obs(space, lambda p: float(np.sin(p["x0"]) + 7 * np.sin(p["x1"]) ** 2
                                         + 0.1 * p["x2"] ** 4 * np.sin(p["x0"])), 80, seed=seed)
    ordinary = importance(obs, sp, seed=seed)
    r = importance([(c, transform(v)) for c, v in obs], sp, seed=seed)
    _assert_sound(r)
    assert r.r2_oob == pytest.approx(ordinary.r2_oob, abs=1e-9)
    for p, q in zip(ordinary.params, r.params, strict=True):
        assert q["param"] == p["param"]
        assert (q["importance"], q["low"], q["high"]) == pytest.approx((p["importance"], p["low"], p["high"]), abs=1e-9)
        assert q["shares"] == pytest.approx(p["shares"], abs=1e-9)


@pytest.mark.parametrize("outlier", [1e20, 1e200, 1e300, -1e20, 1.7976931348623157e308])
def test_one_extreme_outcome_does_not_flatten_the_others(outlier: float) -> None:
    # one diverged run among ordinary values: it is the worst by far, but the others' differences
    # still decide the ranking (the dummy x3 stays last, x0 first)
    sp, obs = _additive()
    r = importance(obs[:-1] + [(obs[-1][0], outlier)], sp, seed=1)
    _assert_sound(r)
    s = _shares(r)
    assert sum(s.values()) == pytest.approx(1.0, abs=1e-9)
    assert r.params[0]["param"] == "x0" and s["x0"] > s["x1"] > s["x3"] and s["x3"] < 0.05
    assert r.r2_oob is not None  # the refits cannot predict the outlier: an honest low R^2, not 1.0


@pytest.mark.parametrize("extremes", [(1e308, -1.7e308), (-1e308, -1.7e308),
                                      (1.7976931348623157e308, -1.7976931348623157e308)],
                         ids=["both-signs", "both-negative", "the-largest-floats"])
def test_ordinary_values_mixed_with_outcomes_near_the_largest_float(extremes: tuple[float, float]) -> None:
    sp, obs = _additive()
    mixed = obs[:-2] + [(obs[-2][0], extremes[0]), (obs[-1][0], extremes[1])]
    r = importance(mixed, sp, seed=1)
    _assert_sound(r)
    assert sum(_shares(r).values()) == pytest.approx(1.0, abs=1e-9) and r.r2_oob is not None
    assert r.params[0]["param"] == "x0"


def test_constant_outcomes_and_a_flat_model_explain_nothing() -> None:
    sp, obs = _additive(20, seed=4)
    r = importance([(c, 2.5) for c, _ in obs], sp, seed=4)
    _assert_sound(r)
    assert all(p["importance"] == p["high"] == 0.0 for p in r.params)
    assert r.r2_oob is None  # R^2 of values that do not vary is undefined, not 1.0
    # a step the median GBM fits flat: its predictions vary only by rounding (a variance ~1e-31), and
    # shares of that noise are not importances (they were 0.25 each for the three dummies)
    sp, obs = _obs({k: {"type": "float", "low": 0.0, "high": 1.0} for k in ADDITIVE},
                   lambda p: float(round(p["x0"])), 50, seed=4)
    r = importance(obs, sp, seed=4)
    _assert_sound(r)
    assert all(p["high"] == 0.0 for p in r.params if p["param"] != "x0")


# ------------------------------------------------------------------ HTTP
SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "y": {"type": "float", "low": 0.0, "high": 1.0},
         "z": {"type": "categorical", "choices": ["a", "b"]}}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with backend_server(request, tmp_path_factory, "importance", workers=0, api_tokens="w-token,r-token:read") as s:
        yield s


@pytest.fixture
def http(srv: LiveServer) -> Iterator[httpx.Client]:
    with srv.client(headers=WRITE) as c:
        yield c


def _study(http: httpx.Client, n: int, extreme: tuple[float, ...] = (), **extra) -> int:
    r = http.post("/v1/studies", json={"name": unique("imp"), "space": SPACE, **extra})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    rng = np.random.default_rng(0)
    trials = []
    for _ in range(n):
        x, y, z = float(rng.random()), float(rng.random()), str(rng.choice(["a", "b"]))
        value = 10 * x + 0.5 * y + (0.0 if z == "a" else 0.2)
        trials.append({"params": {"x": x, "y": y, "z": z}, "state": "complete",
                       **({"values": [value, y]} if "directions" in extra else {"value": value})})
    for i, v in enumerate(extreme):  # the first trials' values replaced by extreme ones
        trials[i]["value"] = v
    if trials:
        r = http.post(f"/v1/studies/{sid}/trials", json={"trials": trials})
        assert r.status_code in (200, 201), r.text
    return sid


def test_route_answers_caches_and_a_tell_invalidates(http: httpx.Client, srv: LiveServer) -> None:
    sid = _study(http, 40)
    r = http.get(f"/v1/studies/{sid}/importance")
    assert r.status_code == 200, r.text
    body = r.json()
    assert [p["param"] for p in body["importances"]][0] == "x"
    assert {"importance", "low", "high"} <= set(body["importances"][0])
    assert sum(p["importance"] for p in body["importances"]) == pytest.approx(1.0)
    assert body["n_trials"] == 40 and "r2_oob" in body["fit"] and body["computed_at"] and body["cached"] is False
    again = http.get(f"/v1/studies/{sid}/importance").json()
    assert again["cached"] is True and again["computed_at"] == body["computed_at"]
    (trial,) = ask(http, sid)
    assert tell(http, sid, trial["id"], value=1.0).status_code in (200, 204)
    fresh = http.get(f"/v1/studies/{sid}/importance").json()
    assert fresh["cached"] is False and fresh["n_trials"] == 41
    with srv.client(headers=READ) as ro:
        assert ro.get(f"/v1/studies/{sid}/importance").status_code == 200
    with srv.client() as anon:
        assert anon.get(f"/v1/studies/{sid}/importance").status_code == 401


def test_route_answers_finite_shares_for_extreme_values(http: httpx.Client) -> None:
    # the study's seed is the importance's: with two outliers of both signs near the largest float among
    # 40 trials the model resolves the rest weakly (out-of-bag R^2 about 0.04), and x comes first for 24 of
    # 30 seeds, so the seed is fixed (without, the test failed now and then)
    sid = _study(http, 40, extreme=(1e300, -1.7e308), seed=0)
    r = http.get(f"/v1/studies/{sid}/importance")
    assert r.status_code == 200, r.text
    body = json.loads(r.text, parse_constant=lambda c: pytest.fail(f"{c} in the answer"))
    shares = [p["importance"] for p in body["importances"]]
    assert all(0.0 <= v <= 1.0 for v in shares) and sum(shares) == pytest.approx(1.0, abs=1e-9)
    assert body["importances"][0]["param"] == "x" and body["n_trials"] == 40
    for p in body["importances"]:
        assert 0.0 <= p["low"] <= p["importance"] <= p["high"] <= 1.0, p
    r2 = body["fit"]["r2_oob"]
    assert r2 is None or (math.isfinite(r2) and r2 < 1.0)


def test_route_errors(http: httpx.Client) -> None:
    sid = _study(http, 2)
    r = http.get(f"/v1/studies/{sid}/importance")
    assert r.status_code == 200 and r.json()["importances"] == [] and "at least 4" in r.json()["reason"]
    r = http.get("/v1/studies/987654321/importance")
    assert r.status_code == 404 and r.json()["error"]["field"] == "study"
    r = http.get(f"/v1/studies/{sid}/importance", params={"objective": 1})
    assert r.status_code == 422 and r.json()["error"]["field"] == "objective"
    r = http.get(f"/v1/studies/{sid}/importance", params={"objective": "x"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "objective"


def test_multi_objective_per_objective(http: httpx.Client) -> None:
    sid = _study(http, 40, directions=["minimize", "maximize"])
    first = http.get(f"/v1/studies/{sid}/importance").json()
    second = http.get(f"/v1/studies/{sid}/importance", params={"objective": 1}).json()
    assert first["importances"][0]["param"] == "x" and second["importances"][0]["param"] == "y"
    assert second["objective"] == 1


def test_client_importance(srv: LiveServer, http: httpx.Client) -> None:
    sid = _study(http, 30)
    with Client(srv.url, token="r-token") as c:
        assert c.importance(sid)["importances"][0]["param"] == "x"
        assert c.load_study(sid).importance()["n_trials"] == 30
    small = _study(http, 1)
    with Client(srv.url, token="w-token") as c:
        early = c.importance(small)
        assert early["importances"] == [] and early["n_trials"] == 1 and early["reason"]


def test_a_conditional_parameter_does_not_take_its_parents_effect() -> None:
    # k is active only under kind == "b" and does nothing; kind's effect must stay with kind
    space = {"kind": {"type": "categorical", "choices": ["a", "b", "c"]},
             "k": {"type": "int", "low": 1, "high": 8, "condition": {"parent": "kind", "values": ["b"]}},
             "x": {"type": "float", "low": 0.0, "high": 1.0}}
    sp, obs = _obs(space, lambda p: {"a": 0.0, "b": 8.0, "c": 0.0}[p["kind"]] + 2.0 * p["x"], 120, seed=4)
    s = _shares(importance(obs, sp, seed=4))
    assert s["kind"] > 0.8 and s["k"] < 0.05


def test_the_band_holds_the_estimate() -> None:
    space = {f"x{i}": {"type": "float", "low": -np.pi, "high": np.pi} for i in range(4)}
    for seed in range(4):  # few trials: the bootstrap refits' shares spread away from the full fit's
        sp, obs = _obs(space, lambda p: float(np.sin(p["x0"]) + 7 * np.sin(p["x1"]) ** 2
                                             + 0.1 * p["x2"] ** 4 * np.sin(p["x0"])), 60, seed=seed)
        for p in importance(obs, sp, seed=seed).params:
            assert 0.0 <= p["low"] <= p["importance"] <= p["high"] <= 1.0, (seed, p)
