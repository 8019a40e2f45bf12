"""Rate limits over HTTP: the failed-auth throttle, per-token limits, limits shared through Redis,
fail-open storage, health probes never throttled, bad settings refused at start.

Client addresses are told apart by ``X-Forwarded-For``: these servers trust it from the test process
(``CALIBO_TRUSTED_PROXIES=127.0.0.1``); tests/test_auth_throttle.py has what a throttled address may
still do and whose ``X-Forwarded-For`` is believed.
The Redis tests need the server at ``CALIBO_TEST_REDIS`` (default ``redis://127.0.0.1:6379``):
they skip without one, unless ``CALIBO_REQUIRE_REDIS=1`` or ``CI=true``, where they fail.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import LiveServer, free_port
from pydantic import ValidationError

from calibo.server.api.middleware import BearerAuth
from calibo.server.app import create_app
from calibo.server.config import Settings


def _start(tmp_path: Path, **settings: object) -> LiveServer:
    tokens = str(settings.pop("api_tokens", ""))
    settings.setdefault("trusted_proxies", "127.0.0.1")  # the test process, a proxy for many addresses
    return LiveServer(f"sqlite:///{tmp_path / f'{uuid.uuid4().hex[:8]}.db'}", workers=0, api_tokens=tokens,
                      settings=settings).start()


def _address() -> str:
    """A client address of its own (a test's counts never meet another's, in Redis neither)."""
    n = uuid.uuid4().int
    return f"10.{n % 250}.{(n >> 8) % 250}.{(n >> 16) % 250 + 1}"


def _as(address: str, token: str | None = None) -> dict[str, str]:
    headers = {"X-Forwarded-For": address}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _assert_429(r: httpx.Response, field: str | None, most: int) -> int:
    assert r.status_code == 429, (r.status_code, r.text)
    assert r.json()["error"]["code"] == "too_many_requests", r.text
    assert r.json()["error"]["field"] == field, r.text
    wait = r.headers.get("retry-after", "")
    assert wait.isdigit() and 1 <= int(wait) <= most, f"Retry-After {wait!r}"
    return int(wait)


# ------------------------------------------------------------------ failed authentication
def test_a_burst_of_wrong_tokens_meets_429_and_the_right_token_is_still_served(
        tmp_path: Path, servers: list[LiveServer], monkeypatch: pytest.MonkeyPatch) -> None:
    srv = _start(tmp_path, api_tokens="right-token")  # the default CALIBO_AUTH_FAILURE_LIMIT
    servers.append(srv)
    attacker, typo, other = _address(), _address(), _address()
    with srv.client() as c:
        statuses = [c.get("/v1/studies", headers=_as(attacker, f"guess-{i}")).status_code for i in range(300)]
        first = statuses.index(429) if 429 in statuses else None
        assert first is not None, "300 wrong tokens in a burst never met a 429"
        assert 3 <= first <= 200, f"the 429 came after {first} wrong tokens"
        assert set(statuses[:first]) == {401} and set(statuses[first:]) == {429}, statuses
        _assert_429(c.get("/v1/studies", headers=_as(attacker, "guess-x")), "authorization", 3600)
        # over the limit the right token is served, on /v1 and /metrics (it limits the failures)
        assert c.get("/v1/studies", headers=_as(attacker, "right-token")).status_code == 200
        assert c.get("/metrics", headers=_as(attacker, "right-token")).status_code == 200
        # without a token no token is checked (a check now would be a 500)
        def checked(*_: object) -> None:
            raise AssertionError("a request without a token had a token checked")

        monkeypatch.setattr(BearerAuth, "lookup", checked)
        _assert_429(c.get("/v1/studies", headers=_as(attacker)), "authorization", 3600)
        _assert_429(c.get("/metrics", headers=_as(attacker)), "authorization", 3600)
        # health probes and the pages without auth are never throttled
        for path in ("/healthz", "/livez", "/docs", "/openapi.json"):
            assert c.get(path, headers=_as(attacker)).status_code == 200, path
        monkeypatch.undo()
        # another address is served; a user mistyping the token a few times is not locked out
        assert c.get("/v1/studies", headers=_as(other, "right-token")).status_code == 200
        for i in range(3):
            assert c.get("/v1/studies", headers=_as(typo, f"rigth-token{i}")).status_code == 401
        assert c.get("/v1/studies", headers=_as(typo, "right-token")).status_code == 200


def test_after_the_window_a_wrong_token_is_counted_afresh(tmp_path: Path, servers: list[LiveServer]) -> None:
    srv = _start(tmp_path, api_tokens="right-token", auth_failure_limit="4/2second")
    servers.append(srv)
    me = _address()
    with srv.client() as c:
        for i in range(4):
            assert c.get("/v1/studies", headers=_as(me, f"wrong-{i}")).status_code == 401
        wait = _assert_429(c.get("/v1/studies", headers=_as(me, "wrong-4")), "authorization", 2)
        assert c.get("/v1/studies", headers=_as(me, "right-token")).status_code == 200  # served meanwhile
        time.sleep(wait + 0.05)
        assert c.get("/v1/studies", headers=_as(me, "right-token")).status_code == 200
        assert c.get("/v1/studies", headers=_as(me, "wrong-5")).status_code == 401  # a fresh window


def test_the_throttle_can_be_turned_off(tmp_path: Path, servers: list[LiveServer]) -> None:
    srv = _start(tmp_path, api_tokens="right-token", auth_failure_limit="")
    servers.append(srv)
    me = _address()
    with srv.client() as c:
        assert {c.get("/v1/studies", headers=_as(me, f"w{i}")).status_code for i in range(150)} == {401}


# ------------------------------------------------------------------ per-token limits
def test_a_token_over_its_limit_gets_429_and_another_token_is_unaffected(tmp_path: Path,
                                                                       servers: list[LiveServer]) -> None:
    srv = _start(tmp_path, api_tokens="token-a,token-b:read", rate_limit="5/20second")
    servers.append(srv)
    here = _address()
    with srv.client() as c:
        statuses = [c.get("/v1/studies", headers=_as(here, "token-a")).status_code for _ in range(8)]
        assert statuses == [200] * 5 + [429] * 3, statuses
        r = c.get("/v1/studies", headers=_as(here, "token-a"))
        _assert_429(r, None, 20)
        assert "5 per 20 second" in r.json()["error"]["message"], r.text
        # a write is refused before its body is read, just the same
        _assert_429(c.post("/v1/studies", json={"name": "x"}, headers=_as(here, "token-a")), None, 20)
        # the same address with another token, and the other token from anywhere, are served
        assert c.get("/v1/studies", headers=_as(here, "token-b")).status_code == 200
        assert c.get("/v1/studies", headers=_as(_address(), "token-b")).status_code == 200
        # neither the probes nor /metrics count against a token
        for path in ("/healthz", "/livez", "/metrics"):
            assert c.get(path, headers=_as(here, "token-a")).status_code == 200, path


def test_without_auth_the_limit_is_per_client_address(tmp_path: Path, servers: list[LiveServer]) -> None:
    srv = _start(tmp_path, rate_limit="3/20second")
    servers.append(srv)
    one, two = _address(), _address()
    with srv.client() as c:
        assert [c.get("/v1/studies", headers=_as(one)).status_code for _ in range(5)] == [200] * 3 + [429] * 2
        r = c.get("/v1/studies", headers=_as(one))
        _assert_429(r, None, 20)
        assert "address" in r.json()["error"]["message"], r.text
        assert c.get("/v1/studies", headers=_as(two)).status_code == 200
        for _ in range(20):  # probes of a limited address are answered every time
            assert c.get("/healthz", headers=_as(one)).status_code == 200
            assert c.get("/livez", headers=_as(one)).status_code == 200


# ------------------------------------------------------------------ shared storage (Redis)
def test_two_replicas_share_one_limit_through_redis(tmp_path: Path, servers: list[LiveServer],
                                                   redis_url: str) -> None:
    token = f"shared-{uuid.uuid4().hex}"  # its counts are this test's own, in a Redis others use
    common = {"api_tokens": token, "rate_limit": "6/30second", "auth_failure_limit": "4/30second",
              "rate_limit_storage": redis_url}
    a = _start(tmp_path, **common)
    servers.append(a)
    b = _start(tmp_path, **common)
    servers.append(b)
    here = _address()
    with a.client() as ca, b.client() as cb:
        for _ in range(3):
            assert ca.get("/v1/studies", headers=_as(here, token)).status_code == 200
            assert cb.get("/v1/studies", headers=_as(here, token)).status_code == 200
        # Redis tells a window's end to the nearest second: Retry-After may be one more, never less
        _assert_429(ca.get("/v1/studies", headers=_as(here, token)), None, 31)
        _assert_429(cb.get("/v1/studies", headers=_as(here, token)), None, 31)
        # failed authentication too: 2 + 2 wrong tokens on two replicas spend one address's limit
        guesser = _address()
        for c in (ca, cb, ca, cb):
            assert c.get("/v1/studies", headers=_as(guesser, "wrong")).status_code == 401
        _assert_429(cb.get("/v1/studies", headers=_as(guesser, "wrong")), "authorization", 31)
        _assert_429(ca.get("/v1/studies", headers=_as(guesser, "wrong")), "authorization", 31)


def test_unreachable_storage_lets_requests_through_and_says_so(tmp_path: Path, servers: list[LiveServer],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    srv = _start(tmp_path, api_tokens="right-token", rate_limit="2/minute", auth_failure_limit="2/minute",
                 rate_limit_storage=nowhere)
    servers.append(srv)
    here = _address()
    with caplog.at_level(logging.WARNING, logger="calibo.api"), srv.client() as c:
        for _ in range(10):
            assert c.get("/v1/studies", headers=_as(here, "right-token")).status_code == 200
            assert c.get("/v1/studies", headers=_as(here, "wrong")).status_code == 401
        assert c.get("/healthz").status_code == 200
    lines = [r.getMessage() for r in caplog.records if "rate-limit storage" in r.getMessage()]
    assert lines and nowhere in lines[0], caplog.text
    assert len(lines) == 1, lines  # one line a minute, not one per request


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize(("env", "value"), [
    ("CALIBO_RATE_LIMIT", "lots"),
    ("CALIBO_RATE_LIMIT", "10/fortnight"),
    ("CALIBO_AUTH_FAILURE_LIMIT", "0/minute"),
    ("CALIBO_RATE_LIMIT_STORAGE", "carrier-pigeon://loft"),
])
def test_a_bad_setting_fails_at_start_naming_it(monkeypatch: pytest.MonkeyPatch, env: str, value: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ValidationError) as e:
        create_app(Settings(database_url="sqlite:///unused.db"))
    assert env in str(e.value) and value in str(e.value), str(e.value)


def test_calibo_serve_refuses_a_bad_limit(tmp_path: Path) -> None:
    env = {**os.environ, "CALIBO_RATE_LIMIT": "100 a second", "CALIBO_DATABASE_URL": f"sqlite:///{tmp_path}/x.db"}
    run = subprocess.run([sys.executable, "-m", "calibo.server.cli", "serve", "--port", str(free_port())],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "CALIBO_RATE_LIMIT='100 a second' is not a rate limit" in run.stderr, run.stderr[-2000:]


def test_good_settings_are_accepted() -> None:
    s = Settings(database_url="sqlite:///unused.db", rate_limit=" 20/second; 1000/minute ",
                 rate_limit_storage="redis://127.0.0.1:6379/0")
    assert s.rate_limit == "20/second; 1000/minute"
    assert Settings(database_url="sqlite:///unused.db").auth_failure_limit  # the throttle is on by default
    create_app(s)  # builds its limiter without connecting anywhere
