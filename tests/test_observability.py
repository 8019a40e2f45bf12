"""Operators' view over HTTP: /metrics (Prometheus), request ids, JSON-lines request logs."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest
from conftest import LiveServer, free_port, unique
from prometheus_client.parser import text_string_to_metric_families
from test_api import BRANIN, branin
from test_restart import ServerProcess


def scrape(c: httpx.Client) -> dict[tuple[str, tuple], float]:
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape_until(c: httpx.Client, key: tuple[str, tuple], after: dict | None = None) -> dict[tuple[str, tuple], float]:
    """Scrape until ``key`` is among the samples: the per-study gauges are read from the database
    and cached 10 s, so a study's first reading can take one cache period."""
    after = scrape(c) if after is None else after
    deadline = time.monotonic() + 30
    while key not in after:
        assert time.monotonic() < deadline, f"no sample {key}"
        time.sleep(1)
        after = scrape(c)
    return after


def test_metrics_count_what_the_api_did(http: httpx.Client) -> None:
    sid = http.post("/v1/studies", json={"name": unique("obs"), "space": BRANIN, "seed": 1,
                                         "settings": {"n_warmup": 4, "ask_wait_seconds": 30}}).json()["id"]
    before = scrape(http)
    ask_route = (("method", "POST"), ("route", "/v1/studies/{study}/ask"), ("status", "200"))
    n = 12
    for _ in range(n):
        t = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
        http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": branin(t["params"])})
    t = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
    http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"state": "failed"})
    after = scrape(http)

    def delta(name: str, labels: tuple = ()) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert delta("calibo_asked_trials_total") >= n + 1  # other tests may share the server: at least ours
    assert delta("calibo_tells_total", (("state", "complete"),)) >= n
    assert delta("calibo_tells_total", (("state", "failed"),)) >= 1
    assert delta("calibo_http_request_duration_seconds_count", ask_route) >= n + 1
    assert ("calibo_fit_queue_depth", ()) in after
    name = http.get(f"/v1/studies/{sid}").json()["name"]
    after = scrape_until(http, ("calibo_study_coverage", (("nominal", "0.9"), ("study", name))), after)
    cal = http.get(f"/v1/studies/{sid}/calibration").json()
    predicted = [t for t in cal["trials"]]
    covered = [t["intervals"][0]["covered"] for t in predicted]
    assert after[("calibo_study_coverage", (("nominal", "0.9"), ("study", name)))] == pytest.approx(
        sum(covered) / len(covered))
    assert after[("calibo_study_breach_rate", (("nominal", "0.9"), ("study", name)))] == pytest.approx(
        1 - sum(covered) / len(covered))
    assert after[("calibo_study_trials", (("state", "complete"), ("study", name)))] == n


def test_metrics_read_each_objective_of_a_multi_objective_study(http: httpx.Client) -> None:
    from test_api import wait_fitted
    from test_multi_objective_api import mo, tell, zdt1

    sid = mo(http)["id"]
    for _ in range(14):
        (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
        assert tell(http, sid, t, zdt1(t["params"])).status_code == 200
        if _ >= 5:
            wait_fitted(http, sid, _ + 1)  # every later ask is predicted: records to read
    cal = http.get(f"/v1/studies/{sid}/calibration").json()
    name = http.get(f"/v1/studies/{sid}").json()["name"]
    after = scrape_until(http, ("calibo_study_objective_coverage",
                                (("nominal", "0.9"), ("objective", "1"), ("study", name))))
    assert 0 < cal["n"] <= 100  # the gauges read the last 100: here all of them, as the view does
    for i, obj in enumerate(cal["objectives"]):
        key = (("nominal", "0.9"), ("objective", str(i)), ("study", name))
        assert after[("calibo_study_objective_coverage", key)] == pytest.approx(obj["cumulative_coverage"][-1][0])
    # the study's own gauges read its first objective
    assert after[("calibo_study_coverage", (("nominal", "0.9"), ("study", name)))] == pytest.approx(
        cal["objectives"][0]["cumulative_coverage"][-1][0])


def test_request_ids_are_echoed_or_made(http: httpx.Client) -> None:
    r = http.get("/v1/studies", headers={"X-Request-ID": "job-42.attempt_3"})
    assert r.headers["x-request-id"] == "job-42.attempt_3"
    for bad in ("x" * 200, "has space", "semi;colon"):
        r = http.get("/healthz", headers={"X-Request-ID": bad})
        assert r.headers["x-request-id"] != bad and len(r.headers["x-request-id"]) == 32
    ids = {http.get("/nope").headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3  # fresh ones, on a 404 too
    r = http.post("/v1/studies", json={"name": "", "space": BRANIN})
    assert r.status_code == 422 and "x-request-id" in r.headers


def test_metrics_need_a_token_when_auth_is_on(tmp_path: Path) -> None:
    srv = LiveServer(f"sqlite:///{tmp_path / 'a.db'}", workers=0, api_tokens="w,r:read").start()
    try:
        with srv.client() as c:
            assert c.get("/metrics").status_code == 401
            assert c.get("/metrics", headers={"Authorization": "Bearer r"}).status_code == 200
    finally:
        srv.stop()


def test_json_lines_request_log_carries_the_request_id(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    srv = ServerProcess(f"sqlite:///{tmp_path / 'j.db'}", free_port(), log,
                        env={"CALIBO_LOG_FORMAT": "json", "CALIBO_ACCESS_LOG": "true", "CALIBO_WORKERS": "0"})
    try:
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            c.post("/v1/studies", json={"name": "j", "space": BRANIN}, headers={"X-Request-ID": "create-1"})
            c.get("/v1/studies/999", headers={"X-Request-ID": "missing-1"})
        time.sleep(0.3)
    finally:
        srv.stop(signal.SIGTERM)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]  # every line is JSON
    access = {r["request_id"]: r for r in lines if r["logger"] == "calibo.access"}
    assert access["create-1"]["status"] == 201 and access["create-1"]["path"] == "/v1/studies"
    assert access["missing-1"]["status"] == 404 and access["missing-1"]["duration_ms"] >= 0
    assert {"ts", "level", "logger", "message", "request_id"} <= set(lines[0])
