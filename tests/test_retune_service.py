"""Full refits, updates and extends in the service (``engine.retune``, ``engine.extend``), over HTTP on
SQLite and PostgreSQL: between full refits a tell's fit keeps the hyperparameters (an extend of the
newest snapshot, or an update where a new best calls for new candidates), a full refit comes once the
data grew by a quarter, and the study's status and ``/metrics`` say which kind each fit was."""

from __future__ import annotations

import time
from typing import Any

import httpx
import numpy as np
from conftest import unique
from prometheus_client.parser import text_string_to_metric_families

BOX = {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(3)}
# CV+ throughout (split from 1000 observations): only the growth of the data calls for full refits
SETTINGS = {"n_warmup": 5, "split_from": 1000, "n_candidates": 200}


def value(p: dict[str, float]) -> float:
    return float(2 * p["x0"] + np.sin(4 * p["x1"]) + 0.3 * p["x2"])


def add(http: httpx.Client, sid: int, rng: np.random.Generator, n: int) -> None:
    rows = []
    for _ in range(n):
        p = {k: float(v) for k, v in zip(BOX, rng.random(3), strict=True)}
        rows.append({"params": p, "value": value(p), "state": "complete"})
    r = http.post(f"/v1/studies/{sid}/trials", json={"trials": rows})
    assert r.status_code == 201, r.text


def settled(http: httpx.Client, sid: int, n: int, timeout: float = 120.0) -> dict[str, Any]:
    """The surrogate status once no fit of the study runs or waits and the newest saw ``n`` trials."""
    deadline = time.monotonic() + timeout
    while True:
        st = http.get(f"/v1/studies/{sid}").json()["surrogate_status"]
        if st["fitted_on"] == n and not st["fitting"] and not st["queued"]:
            return st
        assert time.monotonic() < deadline, st
        time.sleep(0.05)


def samples(http: httpx.Client, name: str, key: str | None = None) -> dict[str | None, float]:
    """``/metrics`` samples named ``name``, by the value of their label ``key``."""
    text = http.get("/metrics").text
    return {s.labels.get(key) if key else None: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def fits(http: httpx.Client) -> dict[str | None, float]:
    return samples(http, "calibo_fits_total", "kind")


def test_fits_keep_the_hyperparameters_until_the_data_grew_by_a_quarter(http: httpx.Client) -> None:
    rng = np.random.default_rng(0)
    r = http.post("/v1/studies", json={"name": unique("retune"), "space": BOX, "settings": SETTINGS})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    add(http, sid, rng, 12)
    first = settled(http, sid, 12)
    assert first["fit_kind"] == "full"  # the first fit tunes

    before = fits(http)
    kinds = []
    for n in (13, 14, 15):  # 15 >= 12 * 1.25: the data grew by a quarter
        add(http, sid, rng, 1)
        kinds.append(settled(http, sid, n)["fit_kind"])
    assert kinds[0] in ("update", "extend") and kinds[1] in ("update", "extend") and kinds[2] == "full"
    after = fits(http)
    # the server is the session's and other tests fit on it too: at least this study's own fits
    kept = sum(after.get(k, 0) - before.get(k, 0) for k in ("update", "extend"))
    assert kept >= 2
    assert after.get("full", 0) - before.get("full", 0) >= 1


def tell_one(http: httpx.Client, sid: int, p: dict[str, float]) -> None:
    r = http.post(f"/v1/studies/{sid}/trials", json={"params": p, "value": value(p), "state": "complete"})
    assert r.status_code == 201, r.text


def test_a_tell_that_finds_no_new_best_extends_the_newest_snapshot_and_a_new_best_draws_again(
        http: httpx.Client) -> None:
    rng = np.random.default_rng(4)
    r = http.post("/v1/studies", json={"name": unique("extend"), "space": BOX, "settings": SETTINGS})
    sid = r.json()["id"]
    add(http, sid, rng, 40)
    settled(http, sid, 40)
    before = fits(http)
    kinds = []
    # 40 / 16 >= 2: two extends before the grown data draws candidates again
    for n, x0 in ((41, 0.9), (42, 0.95)):  # 2 * x0 >= 1.8: far from the best value
        tell_one(http, sid, {"x0": x0, "x1": 0.5, "x2": 0.5})
        kinds.append(settled(http, sid, n)["fit_kind"])
        ask = http.post(f"/v1/studies/{sid}/ask", json={})  # served from the extended snapshot
        assert ask.status_code == 200, ask.text
        tell = http.post(f"/v1/studies/{sid}/trials/{ask.json()['trials'][0]['id']}/tell", json={"state": "pruned"})
        assert tell.status_code == 200, tell.text
    assert kinds == ["extend", "extend"]
    tell_one(http, sid, {"x0": 0.0, "x1": 1.0, "x2": 0.0})  # sin(4): the box's least value, a new best
    assert settled(http, sid, 43)["fit_kind"] in ("update", "full")
    assert fits(http).get("extend", 0) - before.get("extend", 0) >= 2


def test_metrics_split_a_sequential_trial_into_the_wait_and_the_fit_jobs_phases(http: httpx.Client) -> None:
    rng = np.random.default_rng(2)
    r = http.post("/v1/studies", json={"name": unique("retune"), "space": BOX, "settings": SETTINGS})
    sid = r.json()["id"]
    add(http, sid, rng, 10)
    settled(http, sid, 10)
    waits = samples(http, "calibo_ask_fit_wait_seconds_count").get(None, 0.0)
    phases = samples(http, "calibo_fit_phase_seconds_count", "phase")
    n = 10
    for _ in range(5):  # an ask finding the fit landed already does not wait: a fast machine may, rarely
        add(http, sid, rng, 1)  # the next ask is a sequential user's: it waits for the fit of this one
        n += 1
        r = http.post(f"/v1/studies/{sid}/ask", json={})
        assert r.status_code == 200, r.text
        trial = r.json()["trials"][0]
        settled(http, sid, n)
        assert http.post(f"/v1/studies/{sid}/trials/{trial['id']}/tell", json={"state": "pruned"}).status_code == 200
        if samples(http, "calibo_ask_fit_wait_seconds_count")[None] >= waits + 1:
            break
    assert samples(http, "calibo_ask_fit_wait_seconds_count")[None] >= waits + 1
    after = samples(http, "calibo_fit_phase_seconds_count", "phase")
    for phase in ("load", "fit", "encode", "store"):
        assert after[phase] >= phases.get(phase, 0.0) + 1, phase


def test_a_study_set_to_retune_at_every_fit_refits_fully(http: httpx.Client) -> None:
    rng = np.random.default_rng(3)
    settings = {**SETTINGS, "surrogate_options": {"retune_growth": 0}}
    r = http.post("/v1/studies", json={"name": unique("retune"), "space": BOX, "settings": settings})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    add(http, sid, rng, 12)
    settled(http, sid, 12)
    add(http, sid, rng, 1)
    assert settled(http, sid, 13)["fit_kind"] == "full"
