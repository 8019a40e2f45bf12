"""Importance from a surrogate fitted on the trials: the engine on functions with known importances,
and ``GET /v1/studies/{study}/importance`` over HTTP (SQLite and PostgreSQL)."""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest
from scipy.stats import spearmanr
from test_api import assert_error, create, unique

from calibo import Client
from calibo.engine import SearchSpace
from calibo.engine.importance import importance

W = [5.0, 3.0, 2.0, 1.0, 0.0]  # additive weights: first-order shares proportional to W**2


def _additive(n: int, seed: int) -> tuple[SearchSpace, list]:
    space = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0, "high": 1} for i in range(len(W))})
    rng = np.random.default_rng(seed)
    obs = []
    for _ in range(n):
        x = rng.random(len(W))
        obs.append(({f"x{i}": float(x[i]) for i in range(len(W))},
                    float(sum(w * math.sin(2 * math.pi * v) for w, v in zip(W, x, strict=True)))))
    return space, obs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_known_additive_importances_are_ranked_and_the_dummy_gets_little(seed: int) -> None:
    space, obs = _additive(100, seed)
    r = importance(obs, space, seed=seed)
    est = {p["param"]: p["importance"] for p in r.params}
    assert sum(est.values()) == pytest.approx(1.0)
    rho = spearmanr([est[f"x{i}"] for i in range(len(W))], np.square(W))[0]
    assert rho >= 0.85
    assert r.params[0]["param"] == "x0"
    assert est["x4"] < 0.05  # the parameter the function ignores
    for p in r.params:
        assert 0.0 <= p["low"] <= p["high"] <= 1.0
    assert r.r2_oob is not None and r.r2_oob > 0.3


def test_categorical_and_conditional_parameters_are_single_factors() -> None:
    space = SearchSpace.from_dict({
        "kind": {"type": "categorical", "choices": ["a", "b", "c"]},
        "x": {"type": "float", "low": 0, "high": 1},
        "k": {"type": "int", "low": 1, "high": 8, "condition": {"parent": "kind", "values": ["b"]}},
        "noise": {"type": "float", "low": 0, "high": 1},
    })
    rng = np.random.default_rng(0)
    obs = []
    for _ in range(120):
        kind = ["a", "b", "c"][int(rng.integers(3))]
        p = {"kind": kind, "x": float(rng.random()), "noise": float(rng.random())}
        y = {"a": 0.0, "b": 4.0, "c": 8.0}[kind] + 0.5 * p["x"]
        if kind == "b":
            p["k"] = int(rng.integers(1, 9))
            y += 0.1 * p["k"]
        obs.append((p, y))
    r = importance(obs, space, seed=0)
    order = [p["param"] for p in r.params]
    assert order[0] == "kind"
    assert {p["param"] for p in r.params} == {"kind", "x", "k", "noise"}
    assert next(p for p in r.params if p["param"] == "noise")["importance"] < 0.05


def test_too_few_trials_is_an_error() -> None:
    space, obs = _additive(3, 0)
    with pytest.raises(ValueError, match="at least 4"):
        importance(obs, space)


def test_the_route_computes_caches_and_refreshes_on_a_result(http: httpx.Client) -> None:
    space = {"a": {"type": "float", "low": 0, "high": 1}, "b": {"type": "float", "low": 0, "high": 1},
             "c": {"type": "categorical", "choices": ["u", "v"]}}
    sid = create(http, space=space, name=unique("imp"))["id"]
    assert_error(http.get(f"/v1/studies/{sid}/importance"), 409, "not_enough_trials")
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(40):
        a, b = float(rng.random()), float(rng.random())
        rows.append({"params": {"a": a, "b": b, "c": "u" if rng.random() < 0.5 else "v"}, "value": 10 * a + b})
    assert http.post(f"/v1/studies/{sid}/trials", json={"trials": rows}).status_code == 201
    first = http.get(f"/v1/studies/{sid}/importance")
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["importances"][0]["param"] == "a" and body["n_trials"] == 40 and body["cached"] is False
    again = http.get(f"/v1/studies/{sid}/importance").json()
    assert again["cached"] is True and again["importances"] == body["importances"]
    assert http.post(f"/v1/studies/{sid}/trials", json={"params": {"a": 0.5, "b": 0.5, "c": "u"},
                                                       "value": 5.5}).status_code == 201
    fresh = http.get(f"/v1/studies/{sid}/importance").json()
    assert fresh["cached"] is False and fresh["n_trials"] == 41
    assert_error(http.get(f"/v1/studies/{sid}/importance", params={"objective": 1}), 422, field="objective")
    assert http.get("/v1/studies/987654321/importance").status_code == 404


def test_the_client_reads_it(server) -> None:  # noqa: ANN001
    with Client(server.url) as client:
        study = client.create_study(unique("imp-client"), {"x": {"type": "float", "low": 0, "high": 1},
                                                           "y": {"type": "float", "low": 0, "high": 1}})
        study.add_trials([{"params": {"x": i / 20, "y": (i * 7 % 20) / 20}, "value": (i / 20) ** 2}
                          for i in range(20)])
        r = study.importance()
        assert [p["param"] for p in r["importances"]][0] == "x"
        assert set(r["fit"]) >= {"r2_oob"}
