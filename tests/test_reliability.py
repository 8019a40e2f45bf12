"""Issue 11's numbered shortfalls, one regression test each, over real HTTP on SQLite and PostgreSQL.

The server here runs with short deadlines (header/body timeouts, heartbeat
timeout, reaper interval) so the time-based rules are observable in a second
or two.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import BACKENDS, LiveServer, backend_server, unique
from test_api import BRANIN, FAST, ask, assert_error, create, tell

SHORT = {"header_timeout_seconds": 1.0, "body_timeout_seconds": 1.0, "heartbeat_timeout_seconds": 600.0,
         "reaper_interval_seconds": 0.2, "max_body_bytes": 64 * 1024}


@pytest.fixture(scope="module", params=BACKENDS)
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with backend_server(request, tmp_path_factory, "reliability", workers=0, settings=SHORT) as server:
        yield server


@pytest.fixture
def http(srv: LiveServer) -> Iterator[httpx.Client]:
    with srv.client() as c:
        yield c


def big_space(n: int) -> dict:
    return {f"p{i:03d}": {"type": "float", "low": 0, "high": 1} for i in range(n)}


def raw(srv: LiveServer, data: bytes, wait: float = 0.0, read_timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh socket, optionally wait, and read until the server closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=read_timeout) as s:
        s.sendall(data)
        if wait:
            time.sleep(wait)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


# 1 ------------------------------------------------------------ large spaces
@pytest.mark.parametrize("n", [33, 128])
def test_spaces_up_to_the_parameter_limit_ask_and_tell(http: httpx.Client, n: int) -> None:
    s = create(http, big_space(n), settings={**FAST, "n_warmup": 2})
    for _ in range(3):
        t = ask(http, s["id"])[0]
        assert len(t["params"]) == n
        assert tell(http, s["id"], t["id"], value=sum(t["params"].values())).status_code == 200
    assert http.get(f"/v1/studies/{s['id']}").json()["trials"]["complete"] == 3


def test_one_parameter_past_the_limit_is_refused(http: httpx.Client) -> None:
    assert_error(http.post("/v1/studies", json={"name": unique(), "space": big_space(129)}), 422,
                 "invalid_request", "space")


# 3 ------------------------------------------------- a 500 keeps the connection
def test_an_unexpected_error_answers_500_and_the_connection_stays_usable(srv: LiveServer) -> None:
    http = srv.client()
    study = create(http)
    app_state = srv._server.config.app.state  # the in-process app
    real = app_state.studies.calibration
    app_state.studies.calibration = lambda *a, **k: 1 / 0
    try:
        request = (f"GET /v1/studies/{study['id']}/calibration HTTP/1.1\r\nHost: x\r\n\r\n"
                   f"GET /v1/studies/{study['id']} HTTP/1.1\r\nHost: x\r\n\r\n").encode()
        out = raw(srv, request, read_timeout=2.0)
    finally:
        app_state.studies.calibration = real
        http.close()
    first, _, rest = out.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 500"), out[:200]
    assert b"connection: close" not in first.lower()
    assert b'"code":"internal"' in rest.replace(b" ", b"")
    # the second request on the same connection was answered
    assert b"HTTP/1.1 200" in rest, out[:600]


# 4 ---------------------------------------------------- bounded engine settings
@pytest.mark.parametrize("settings, field", [
    ({"n_levels": 1_000_000}, "settings.n_levels"),
    ({"n_levels": 7}, "settings.n_levels"),
    ({"n_candidates": 10**9}, "settings.n_candidates"),
    ({"n_candidates": 1e9}, "settings.n_candidates"),
    ({"n_warmup": 10_000}, "settings.n_warmup"),
    ({"cv_folds": 1000}, "settings.cv_folds"),
    ({"surrogate_options": {"n_estimators": 10**7}}, "settings.surrogate_options.n_estimators"),
    ({"surrogate_options": {"kernel": "rbf"}}, "settings.surrogate_options.kernel"),
    ({"surrogate_options": {"num_leaves": 8}}, "settings.surrogate_options.num_leaves"),  # qgbm's, not qgp's
    ({"surrogate_options": {"backend": "jax"}}, "settings.surrogate_options.backend"),
    ({"surrogate_options": {"splits": "loo"}}, "settings.surrogate_options.splits"),  # gp-recal's
    ({"surrogate_options": {"scores": "huber"}}, "settings.surrogate_options.scores"),
    ({"conformal": "jackknife"}, "settings.conformal"),
    ({"n_bootstraps": 1}, "settings.n_bootstraps"),
    ({"heartbeat_timeout_seconds": 0}, "settings.heartbeat_timeout_seconds"),
])
def test_engine_settings_outside_their_range_are_refused(http: httpx.Client, settings: dict, field: str) -> None:
    t0 = time.perf_counter()
    r = http.post("/v1/studies", json={"name": unique(), "space": BRANIN, "settings": settings})
    assert_error(r, 422, "invalid_request", field)
    assert time.perf_counter() - t0 < 5  # refused up front, not after building a huge grid


def test_settings_at_their_bounds_are_accepted(http: httpx.Client) -> None:
    s = create(http, settings={"n_levels": 20, "n_candidates": 10_000, "surrogate_options": {"max_opt_points": 50}})
    assert s["settings"]["n_levels"] == 20 and s["settings"]["n_candidates"] == 10_000
    assert len(ask(http, s["id"], count=3)) == 3


# 5 --------------------------------------------- names: no control characters
@pytest.mark.parametrize("bad", ["a\x00b", "tab\there", "bell\x07", "c1\x85", "lone\ud800"])
def test_names_with_control_characters_or_lone_surrogates_are_422(http: httpx.Client, bad: str) -> None:
    body = json.dumps({"name": bad, "space": BRANIN}).encode()
    headers = {"content-type": "application/json"}
    assert_error(http.post("/v1/studies", content=body, headers=headers), 422, "invalid_request", "name")
    r = http.post("/v1/studies", content=json.dumps({"name": unique(), "space": {bad: BRANIN["x1"]}}),
                  headers=headers)
    assert_error(r, 422, "invalid_request")
    assert r.json()["error"]["field"].startswith("space")
    r = http.post("/v1/studies", content=json.dumps(
        {"name": unique(), "space": {"c": {"type": "categorical", "choices": ["ok", bad]}}}), headers=headers)
    assert_error(r, 422, "invalid_request")
    assert r.json()["error"]["field"].startswith("space.c")
    s = create(http)
    r = http.post(f"/v1/studies/{s['id']}/ask", content=json.dumps({"worker_id": bad}), headers=headers)
    assert_error(r, 422, "invalid_request", "worker_id")


def test_unicode_names_are_fine(http: httpx.Client) -> None:
    s = create(http, {"λ-rate ✓": {"type": "categorical", "choices": ["グー", "", "emoji 🎲"]}}, name=unique("ünï"))
    t = ask(http, s["id"], worker_id="nœud-3 🚀")[0]
    assert t["params"]["λ-rate ✓"] in ("グー", "", "emoji 🎲")


# 6 ---------------------------------------------------------------- sizes
def test_a_body_over_the_limit_answers_413_before_it_is_read(http: httpx.Client, srv: LiveServer) -> None:
    big = json.dumps({"name": unique(), "space": BRANIN, "pad": "x" * (200 * 1024)})
    r = http.post("/v1/studies", content=big, headers={"content-type": "application/json"})
    assert_error(r, 413, "too_large", "body")
    assert r.headers["connection"] == "close"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        for _ in range(100):
            yield b" " * 4096
    r = http.post("/v1/studies", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, 413, "too_large", "body")


@pytest.mark.parametrize("space, field", [
    ({"c": {"type": "categorical", "choices": list(range(1001))}}, "space.c.choices"),
    ({"c": {"type": "categorical", "choices": ["x" * 257]}}, "space.c.choices"),
    ({"n" * 129: {"type": "float", "low": 0, "high": 1}}, "space"),
    ({f"c{i}": {"type": "categorical", "choices": list(range(100))} for i in range(21)}, "space"),  # 2100 features
])
def test_space_sizes_are_bounded(http: httpx.Client, space: dict, field: str) -> None:
    r = http.post("/v1/studies", json={"name": unique(), "space": space})
    assert_error(r, 422, "invalid_request")
    assert r.json()["error"]["field"].startswith(field), r.json()


def test_name_and_count_bounds(http: httpx.Client) -> None:
    assert_error(http.post("/v1/studies", json={"name": "n" * 256, "space": BRANIN}), 422, "invalid_request", "name")
    s = create(http)
    assert_error(http.post(f"/v1/studies/{s['id']}/ask", json={"count": 257}), 422, "invalid_request", "count")
    assert_error(http.post(f"/v1/studies/{s['id']}/ask", json={"worker_id": "w" * 256}), 422, "invalid_request",
                 "worker_id")


def test_study_listing_is_paginated_summaries(http: httpx.Client) -> None:
    prefix = unique("page")
    made = [create(http, name=f"{prefix}-{i}") for i in range(5)]
    page = http.get("/v1/studies", params={"limit": 2, "offset": 0}).json()
    assert len(page["studies"]) == 2 and page["limit"] == 2 and page["total"] >= 5
    assert "space" not in page["studies"][0] and "settings" not in page["studies"][0]
    ids, offset = [], 0
    while True:
        p = http.get("/v1/studies", params={"limit": 3, "offset": offset}).json()
        ids += [s["id"] for s in p["studies"]]
        offset += 3
        if offset >= p["total"]:
            break
    assert ids == sorted(ids) and {m["id"] for m in made} <= set(ids) and len(ids) == len(set(ids))
    one = http.get("/v1/studies", params={"name": made[3]["name"]}).json()
    assert one["total"] == 1 and one["studies"][0]["id"] == made[3]["id"]
    assert_error(http.get("/v1/studies", params={"limit": 1001}), 422, "invalid_request", "limit")


# 7 ------------------------------------------------------------ slow clients
def test_partial_headers_are_cut_off(srv: LiveServer) -> None:
    t0 = time.monotonic()
    out = raw(srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", read_timeout=10)
    assert out == b"" and time.monotonic() - t0 < 5  # closed after ~1 s, not held


def test_an_idle_connection_is_cut_off(srv: LiveServer) -> None:
    t0 = time.monotonic()
    assert raw(srv, b"", read_timeout=10) == b""
    assert time.monotonic() - t0 < 5


def test_a_partial_body_answers_408_and_closes(srv: LiveServer) -> None:
    t0 = time.monotonic()
    out = raw(srv, b"POST /v1/studies HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 100\r\n\r\n{\"name\": ", read_timeout=10)
    assert out.startswith(b"HTTP/1.1 408"), out[:200]
    assert b"connection: close" in out.lower()
    assert time.monotonic() - t0 < 5


# 8 ------------------------------------------------------------- orphaned trials
def test_silent_trials_are_reaped_and_their_late_results_recorded(http: httpx.Client) -> None:
    s = create(http, settings={**FAST, "heartbeat_timeout_seconds": 2.0})
    sid = s["id"]
    keep, orphan = ask(http, sid, count=2)
    t0 = time.monotonic()
    while True:  # one worker keeps beating; the reaper (every 0.2 s) fails the silent one, no ask needed
        assert http.post(f"/v1/studies/{sid}/trials/{keep['id']}/heartbeat").status_code == 204
        state = http.get(f"/v1/studies/{sid}/trials/{orphan['id']}").json()["state"]
        if state == "failed":
            break
        assert state == "running" and time.monotonic() - t0 < 10, state
        time.sleep(0.2)
    assert time.monotonic() - t0 >= 1.9  # not before its timeout
    assert http.get(f"/v1/studies/{sid}/trials/{keep['id']}").json()["state"] == "running"
    # a late heartbeat does not revive it
    assert_error(http.post(f"/v1/studies/{sid}/trials/{orphan['id']}/heartbeat"), 409, "trial_expired", "trial_id")
    # a late tell is recorded, once
    r = tell(http, sid, orphan["id"], value=1.5)
    assert r.status_code == 200 and r.json()["state"] == "complete" and r.json()["value"] == 1.5
    assert tell(http, sid, orphan["id"], value=1.5).status_code == 200
    assert_error(tell(http, sid, orphan["id"], value=2.5), 409, "trial_finished")
    view = http.get(f"/v1/studies/{sid}").json()
    assert view["trials"]["complete"] == 1 and view["best_trial"]["id"] == orphan["id"]


def test_a_late_heartbeat_expires_the_trial_even_before_the_reaper(http: httpx.Client, srv: LiveServer) -> None:
    s = create(http, settings={"heartbeat_timeout_seconds": 1.0})
    t = ask(http, s["id"])[0]
    reaper_was = srv._server.config.app.state.settings.reaper_interval_seconds
    assert reaper_was == 0.2  # the reaper may win the race; either way the answer is the same
    time.sleep(1.3)
    assert_error(http.post(f"/v1/studies/{s['id']}/trials/{t['id']}/heartbeat"), 409, "trial_expired")


def test_the_server_default_heartbeat_timeout_applies_to_studies_without_one(http: httpx.Client) -> None:
    s = create(http)
    assert s["settings"].get("heartbeat_timeout_seconds") is None  # the server's 600 s here
    t = ask(http, s["id"])[0]
    assert http.post(f"/v1/studies/{s['id']}/trials/{t['id']}/heartbeat").status_code == 204


# 9 ------------------------------------------------------------------- auth
@pytest.fixture(scope="module")
def auth_srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    url = f"sqlite:///{tmp_path_factory.mktemp('auth') / 'calibo.db'}"
    server = LiveServer(url, workers=0, api_tokens="w-token,r-token:read",
                        settings={**SHORT, "docs": False}).start()
    yield server
    server.stop()


def test_auth_comes_before_the_body(auth_srv: LiveServer) -> None:
    with auth_srv.client() as anon:
        # over the size limit and malformed: an unauthenticated caller learns neither
        r = anon.post("/v1/studies", content=b"{" * (200 * 1024), headers={"content-type": "application/json"})
        assert_error(r, 401, "unauthorized", "authorization")
        r = anon.post("/v1/studies", content=b"{not json", headers={"content-type": "application/json"})
        assert_error(r, 401, "unauthorized")
        assert_error(anon.get("/v1/nowhere"), 401)  # unknown /v1 paths too


def test_docs_can_be_turned_off(auth_srv: LiveServer) -> None:
    with auth_srv.client() as c:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert c.get(path).status_code == 404
        assert c.get("/healthz").status_code == 200  # health needs no token


# 10 ---------------------------------------------------- OpenAPI matches the server
def test_openapi_states_what_the_server_accepts(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    create_schema = schemas["StudyCreate"]["properties"]
    assert "minProperties" not in create_schema["space"] and create_schema["space"]["maxProperties"] == 128
    count = schemas["AskRequest"]["properties"]["count"]
    assert count["type"] == "integer" and count["minimum"] == 1 and count["maximum"] == 256
    settings = schemas["StudySettings"]
    assert settings["additionalProperties"] is False
    n_candidates = next(a for a in settings["properties"]["n_candidates"]["anyOf"] if a.get("type") == "integer")
    assert n_candidates["maximum"] == 10_000
    assert_error(http.post("/v1/studies", json={"name": unique(), "space": []}), 422, "invalid_request", "space")
    s = create(http)
    assert len(ask(http, s["id"], count=2.0)) == 2  # a JSON integer, as the schema says
    assert_error(http.post(f"/v1/studies/{s['id']}/ask", json={"count": 1.5}), 422, "invalid_request", "count")
    assert_error(http.post(f"/v1/studies/{s['id']}/ask", json={"count": "2"}), 422, "invalid_request", "count")


@pytest.mark.parametrize("method, path, allowed", [
    ("DELETE", "/v1/studies", {"GET", "HEAD", "POST"}),
    ("PUT", "/v1/studies/1", {"GET", "HEAD", "DELETE"}),
    ("GET", "/v1/studies/1/ask", {"POST"}),
])
def test_405_lists_every_allowed_method(http: httpx.Client, method: str, path: str, allowed: set) -> None:
    r = http.request(method, path)
    assert_error(r, 405, "method_not_allowed")
    assert set(m.strip() for m in r.headers["allow"].split(",")) == allowed


# asks are safe to retry -------------------------------------------------------
def test_an_ask_repeated_with_its_idempotency_key_answers_the_same_trials(http: httpx.Client) -> None:
    s = create(http)
    sid = s["id"]
    first = http.post(f"/v1/studies/{sid}/ask", json={"count": 2}, headers={"Idempotency-Key": "k-1"}).json()
    again = http.post(f"/v1/studies/{sid}/ask", json={"count": 2}, headers={"Idempotency-Key": "k-1"}).json()
    assert first == again and len(first["trials"]) == 2
    other = http.post(f"/v1/studies/{sid}/ask", headers={"Idempotency-Key": "k-2"}).json()["trials"]
    assert {t["id"] for t in other}.isdisjoint(t["id"] for t in first["trials"])
    # still the same answer once the trial has finished
    assert tell(http, sid, first["trials"][0]["id"], value=1.0).status_code == 200
    assert http.post(f"/v1/studies/{sid}/ask", json={"count": 2}, headers={"Idempotency-Key": "k-1"}).json() == first
    assert http.get(f"/v1/studies/{sid}").json()["trials"]["total"] == 3
    assert_error(http.post(f"/v1/studies/{sid}/ask", headers={"Idempotency-Key": "bad key!"}), 422,
                 "invalid_request", "Idempotency-Key")


def test_concurrent_asks_with_one_key_create_its_trials_once(srv: LiveServer) -> None:
    import concurrent.futures as cf

    with srv.client() as http:
        sid = create(http)["id"]

    def one(_: int) -> list[int]:
        with srv.client() as c:
            r = c.post(f"/v1/studies/{sid}/ask", json={"count": 3}, headers={"Idempotency-Key": "same"})
            return [t["id"] for t in r.json()["trials"]]

    with cf.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(8)))
    assert all(a == answers[0] for a in answers) and len(answers[0]) == 3
    with srv.client() as http:
        assert http.get(f"/v1/studies/{sid}").json()["trials"]["total"] == 3


def test_a_control_character_in_the_name_filter_is_422(http: httpx.Client) -> None:
    # found by schemathesis: PostgreSQL cannot compare text with NUL (it answered 500)
    assert_error(http.get("/v1/studies", params={"name": "a\x00b"}), 422, "invalid_request", "name")


def test_a_failed_transaction_does_not_leave_the_finished_keys_cache_ahead(tmp_path) -> None:
    """A batch's ask reads the keys its own tells finished; if the commit then fails, the cache
    must not keep them (their positions are reused by later tells, which it would never read)."""
    import asyncio
    from contextlib import contextmanager

    from calibo.server.config import Settings
    from calibo.server.errors import Unavailable
    from calibo.server.storage import Storage
    from calibo.server.studies import StudyService

    storage = Storage(f"sqlite:///{tmp_path / 'keys.db'}")
    svc = StudyService(Settings(database_url="sqlite://"), storage, None)
    space = {"c": {"type": "categorical", "choices": ["a", "b", "c"]}}
    sid = svc.create("keys", space, settings={"n_warmup": 2})[0].id

    async def scenario() -> list[dict]:
        a, b = await svc.ask(sid, 2)
        real = storage.locked

        @contextmanager
        def commit_fails(study_id: int):
            with real(study_id) as tx:
                yield tx
                raise Unavailable("connection lost at commit")  # rolls the transaction back

        storage.locked = commit_fails
        try:
            results = await asyncio.gather(svc.tell(sid, a["id"], 1.0), svc.ask(sid, 1), return_exceptions=True)
            assert all(isinstance(r, Unavailable) for r in results)
        finally:
            storage.locked = real
        await svc.tell(sid, b["id"], 2.0)  # takes the finishing position the rolled-back tell had
        return await svc.ask(sid, 2)  # a still running, b finished: only "c" is left

    left = asyncio.run(scenario())
    assert [t["params"]["c"] for t in left] == ["c"]
    storage.close()
