"""Golden asks: the default engine's first 60 asks on four studies, committed as data.

A refactor of the engine, the service or their stored forms must leave every ask identical to the
bit: the parameters and a hash of the prediction each was chosen on (its JSON with sorted keys, every
float written in full). The four studies cover the shapes the per-study state has: a conditional
space, two objectives, an outcome constraint, and 8 trials in flight (told out of order).

``python tests/test_golden.py --write`` rewrites ``tests/golden/asks.json``: only on purpose, when a
change of behaviour is intended and said in its commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from calibo.engine import Optimizer

try:
    from .conftest import LiveServer
except ImportError:  # run as a script: python tests/test_golden.py --write
    from conftest import LiveServer

GOLDEN = Path(__file__).parent / "golden" / "asks.json"
N_ASKS = 60

pytestmark = pytest.mark.slow

CONDITIONAL = {
    "kernel": {"type": "categorical", "choices": ["linear", "rbf", "poly"]},
    "C": {"type": "float", "low": 1e-3, "high": 1e3, "log": True},
    "gamma": {"type": "float", "low": 1e-4, "high": 10.0, "log": True,
              "condition": {"parent": "kernel", "values": ["rbf", "poly"]}},
    "degree": {"type": "int", "low": 2, "high": 5, "condition": {"parent": "kernel", "values": ["poly"]}},
}
BOX = {
    "x": {"type": "float", "low": -2.0, "high": 2.0},
    "y": {"type": "float", "low": -2.0, "high": 2.0},
    "n": {"type": "int", "low": 1, "high": 64, "log": True},
    "opt": {"type": "categorical", "choices": ["adam", "sgd", "rmsprop"]},
}


def conditional_loss(p: dict[str, Any]) -> float:
    base = (math.log10(p["C"]) - 1.0) ** 2
    if p["kernel"] == "linear":
        return base + 0.5
    g = (math.log10(p["gamma"]) + 1.5) ** 2
    return base + 0.3 * g + (0.2 * abs(p["degree"] - 3) if p["kernel"] == "poly" else 0.0)


def box_loss(p: dict[str, Any]) -> float:
    bump = {"adam": 0.0, "sgd": 0.4, "rmsprop": 0.2}[p["opt"]]
    return (p["x"] - 0.7) ** 2 + 2 * (p["y"] + 0.3) ** 2 + 0.1 * (math.log2(p["n"]) - 4) ** 2 + bump


def two_objectives(p: dict[str, Any]) -> list[float]:
    return [box_loss(p), (p["x"] + 1.0) ** 2 + (p["y"] - 1.0) ** 2 + 0.05 * math.log2(p["n"])]


def constraint_of(p: dict[str, Any]) -> list[float]:
    return [p["x"] + p["y"] - 0.5]  # feasible when x + y <= 0.5


def _digest(prediction: dict[str, Any] | None) -> str | None:
    if prediction is None:
        return None
    text = json.dumps(prediction, sort_keys=True, default=lambda a: a.tolist())
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _entry(s: Any) -> dict[str, Any]:
    return {"params": s.params, "prediction": _digest(s.prediction)}


def sequential(opt: Optimizer, objective, constraint=None) -> list[dict[str, Any]]:
    out = []
    for _ in range(N_ASKS):
        (s,) = opt.ask()
        out.append(_entry(s))
        opt.tell(s.params, objective(s.params), constraints=None if constraint is None else constraint(s.params))
    return out


def in_flight(opt: Optimizer, objective, k: int = 8) -> list[dict[str, Any]]:
    """``k`` trials running: each ask hands one out; once ``k`` run, one finishes (the second oldest
    every other time, so results arrive out of order) before the next ask."""
    out, running = [], []
    for i in range(N_ASKS):
        if len(running) == k:
            done = running.pop(1 if i % 2 else 0)
            opt.tell(done, objective(done))
        (s,) = opt.ask()
        out.append(_entry(s))
        running.append(s.params)
    return out


def studies() -> dict[str, list[dict[str, Any]]]:
    return {
        "conditional": sequential(Optimizer(CONDITIONAL, seed=3), conditional_loss),
        "two_objectives": sequential(Optimizer(BOX, seed=5, directions=["minimize", "minimize"]), two_objectives),
        "constrained": sequential(Optimizer(BOX, seed=7, constraints=["sum"]), box_loss, constraint_of),
        "in_flight_8": in_flight(Optimizer(BOX, seed=11), box_loss),
    }


def served(url: str) -> dict[str, list[dict[str, Any]]]:
    """The three sequential studies through the service's REST API (each ask waits for its fit)."""
    import httpx

    def run(name: str, space: dict, seed: int, objective, constraint=None, directions=None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"name": name, "space": space, "seed": seed}
        if directions:
            body["directions"] = directions
        if constraint is not None:
            body["constraints"] = ["sum"]
        with httpx.Client(base_url=url, timeout=120.0) as c:
            sid = c.post("/v1/studies", json=body).raise_for_status().json()["id"]
            out = []
            for _ in range(N_ASKS):
                (t,) = c.post(f"/v1/studies/{sid}/ask", json={"count": 1}).raise_for_status().json()["trials"]
                out.append({"params": t["params"], "prediction": _digest(t["prediction"])})
                v = objective(t["params"])
                tell: dict[str, Any] = {"values": v} if directions else {"value": v}
                if constraint is not None:
                    tell["constraints"] = constraint(t["params"])
                c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json=tell).raise_for_status()
        return out

    return {
        "service_conditional": run("golden-conditional", CONDITIONAL, 3, conditional_loss),
        "service_two_objectives": run("golden-two", BOX, 5, two_objectives, directions=["minimize", "minimize"]),
        "service_constrained": run("golden-constrained", BOX, 7, box_loss, constraint_of),
    }


def sampled() -> dict[str, list[dict[str, Any]]]:
    """Two of the studies through ``CaliboSampler`` (an in-memory Optuna study, one trial at a time)."""
    import optuna

    from calibo.optuna import CaliboSampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def suggest(trial: Any) -> dict[str, Any]:
        return {"x": trial.suggest_float("x", -2.0, 2.0), "y": trial.suggest_float("y", -2.0, 2.0),
                "n": trial.suggest_int("n", 1, 64, log=True),
                "opt": trial.suggest_categorical("opt", ["adam", "sgd", "rmsprop"])}

    def run(seed: int, directions: list[str], objective, constraint=None) -> list[dict[str, Any]]:
        study = optuna.create_study(directions=directions, sampler=CaliboSampler(seed=seed))
        out = []
        for _ in range(N_ASKS):
            trial = study.ask()
            p = suggest(trial)
            if constraint is not None:
                trial.set_constraint("sum", constraint(p)[0])
            study.tell(trial, objective(p))
            out.append({"params": p, "prediction": None})
        return out

    return {
        "sampler_two_objectives": run(5, ["minimize", "minimize"], two_objectives),
        "sampler_constrained": run(7, ["minimize"], box_loss, constraint_of),
    }


def every(url: str) -> dict[str, list[dict[str, Any]]]:
    return {**studies(), **served(url), **sampled()}


@pytest.fixture(scope="module")
def asked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('golden') / 'calibo.db'}", ask_wait_seconds=300.0).start()
    try:
        return every(srv.url)
    finally:
        srv.stop()


@pytest.mark.parametrize("study", ["conditional", "two_objectives", "constrained", "in_flight_8",
                                   "service_conditional", "service_two_objectives", "service_constrained",
                                   "sampler_two_objectives", "sampler_constrained"])
def test_first_60_asks_are_the_committed_ones(asked: dict, study: str) -> None:
    golden = json.loads(GOLDEN.read_text())[study]
    got = json.loads(json.dumps(asked[study]))  # the committed form: JSON numbers
    assert len(got) == len(golden) == N_ASKS
    for i, (g, w) in enumerate(zip(got, golden, strict=True)):
        assert g == w, f"{study}: ask {i} differs: {g} != {w}"
    if not study.startswith("sampler"):  # Optuna keeps no prediction; its asks are the check
        assert sum(e["prediction"] is not None for e in golden) >= 30, "the model must choose most of the asks"


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/test_golden.py --write")
    import tempfile

    GOLDEN.parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        srv = LiveServer(f"sqlite:///{tmp}/calibo.db", ask_wait_seconds=300.0).start()
        try:
            data = every(srv.url)
        finally:
            srv.stop()
    GOLDEN.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {GOLDEN}")
