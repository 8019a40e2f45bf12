"""The failed-auth throttle limits the failures, not the address, and X-Forwarded-For is believed
only from CALIBO_TRUSTED_PROXIES.

Past ``CALIBO_AUTH_FAILURE_LIMIT`` from one address, a request from it with a valid token is still
served (under its own ``CALIBO_RATE_LIMIT``), while a wrong or missing token is answered 429 with
``Retry-After``, from memory: a missing token without a token check, a wrong one without a storage
round trip. Through HTTP against live servers; the Redis test needs the server at
``CALIBO_TEST_REDIS`` (default ``redis://127.0.0.1:6379``) and skips without one, unless
``CALIBO_REQUIRE_REDIS=1`` or ``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import LiveServer, free_port
from pydantic import ValidationError
from test_rate_limit import _address, _assert_429

from calibo.server.api.middleware import BearerAuth
from calibo.server.api.ratelimit import Limiter
from calibo.server.app import create_app
from calibo.server.config import Settings


def _start(tmp_path: Path, **settings: object) -> LiveServer:
    tokens = str(settings.pop("api_tokens", ""))
    return LiveServer(f"sqlite:///{tmp_path / f'{uuid.uuid4().hex[:8]}.db'}", workers=0, api_tokens=tokens,
                      settings=settings).start()


def _bearer(token: str | None, forwarded: str | None = None) -> dict[str, str]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    return headers


def test_past_the_limit_valid_tokens_from_the_address_are_served_and_guesses_get_429(
        tmp_path: Path, servers: list[LiveServer], monkeypatch: pytest.MonkeyPatch) -> None:
    # every client of this server is 127.0.0.1 (no proxy is trusted): one shared address
    srv = _start(tmp_path, api_tokens="right-token,reader:read", auth_failure_limit="5/minute")
    servers.append(srv)
    with srv.client() as c:
        for i in range(5):  # a worker with a rotated token, retrying
            assert c.get("/v1/studies", headers=_bearer(f"rotated-{i}")).status_code == 401
        _assert_429(c.get("/v1/studies", headers=_bearer("rotated-5")), "authorization", 60)
        # the workers with valid tokens behind the same address go on: reads, writes, the read-only
        # token's 403, /metrics
        assert c.get("/v1/studies", headers=_bearer("right-token")).status_code == 200
        space = {"x": {"type": "float", "low": 0, "high": 1}}
        made = c.post("/v1/studies", json={"name": f"t-{uuid.uuid4().hex[:8]}", "space": space},
                      headers=_bearer("right-token"))
        assert made.status_code in (200, 201), made.text
        assert c.get(f"/v1/studies/{made.json()['id']}", headers=_bearer("reader")).status_code == 200
        assert c.post("/v1/studies", json={"name": "no", "space": space},
                      headers=_bearer("reader")).status_code == 403
        assert c.get("/metrics", headers=_bearer("reader")).status_code == 200
        # every guess is answered 429 with Retry-After (never a 401), whatever it looks like
        for headers in (_bearer("rotated-6"), _bearer("right-toke"), _bearer("Right-token"), _bearer(None),
                        {"Authorization": "Basic cmlnaHQtdG9rZW4="}, {"Authorization": "Bearer"}):
            _assert_429(c.get("/v1/studies", headers=headers), "authorization", 60)
        _assert_429(c.get("/metrics", headers=_bearer("wrong")), "authorization", 60)

        # no token at all: answered without checking one
        def checked(*_: object) -> None:
            raise AssertionError("a request without a token had a token checked")

        monkeypatch.setattr(BearerAuth, "lookup", checked)
        _assert_429(c.get("/v1/studies"), "authorization", 60)
        _assert_429(c.get("/v1/studies", headers={"Authorization": "Basic eDp5"}), "authorization", 60)
        monkeypatch.undo()

        # a wrong token: checked (a valid one would be served) but answered from memory, with no
        # storage round trip (a count now would be a 500)
        async def counted(*_: object) -> float:
            raise AssertionError("a guess from a throttled address went to the rate-limit storage")

        monkeypatch.setattr(Limiter, "hit", counted)
        _assert_429(c.get("/v1/studies", headers=_bearer("guess")), "authorization", 60)
        assert c.get("/v1/studies", headers=_bearer("right-token")).status_code == 200
        monkeypatch.undo()


def test_a_valid_token_from_a_throttled_address_keeps_its_own_rate_limit(tmp_path: Path,
                                                                        servers: list[LiveServer]) -> None:
    srv = _start(tmp_path, api_tokens="token-a,token-b", auth_failure_limit="2/minute", rate_limit="3/minute")
    servers.append(srv)
    with srv.client() as c:
        assert [c.get("/v1/studies", headers=_bearer(f"w{i}")).status_code for i in range(3)] == [401, 401, 429]
        assert [c.get("/v1/studies", headers=_bearer("token-a")).status_code for _ in range(3)] == [200] * 3
        r = c.get("/v1/studies", headers=_bearer("token-a"))
        _assert_429(r, None, 60)  # the token's own limit, not the address's
        assert "for this token" in r.json()["error"]["message"], r.text
        assert c.get("/v1/studies", headers=_bearer("token-b")).status_code == 200
        _assert_429(c.get("/v1/studies", headers=_bearer("w3")), "authorization", 60)


# ------------------------------------------------------------------ shared storage (Redis)
def test_two_replicas_share_the_throttle_and_both_serve_valid_tokens(tmp_path: Path, servers: list[LiveServer],
                                                                    redis_url: str) -> None:
    token = f"valid-{uuid.uuid4().hex}"
    # the test process is the trusted proxy: each test's address of its own, in a Redis others use
    common = {"api_tokens": token, "auth_failure_limit": "4/30second", "rate_limit_storage": redis_url,
              "trusted_proxies": "127.0.0.1"}
    a = _start(tmp_path, **common)
    servers.append(a)
    b = _start(tmp_path, **common)
    servers.append(b)
    here = _address()
    with a.client() as ca, b.client() as cb:
        for c in (ca, cb, ca, cb):  # 2 + 2 wrong tokens on two replicas spend one address's limit
            assert c.get("/v1/studies", headers=_bearer("wrong", here)).status_code == 401
        _assert_429(cb.get("/v1/studies", headers=_bearer("wrong", here)), "authorization", 31)
        _assert_429(ca.get("/v1/studies", headers=_bearer("wrong", here)), "authorization", 31)
        for c in (ca, cb):
            assert c.get("/v1/studies", headers=_bearer(token, here)).status_code == 200
            _assert_429(c.get("/v1/studies", headers=_bearer("still-wrong", here)), "authorization", 31)
            _assert_429(c.get("/v1/studies", headers=_bearer(None, here)), "authorization", 31)
            assert c.get("/v1/studies", headers=_bearer(token, here)).status_code == 200
        # another address has its own count
        assert ca.get("/v1/studies", headers=_bearer("wrong", _address())).status_code == 401


# ------------------------------------------------------------------ X-Forwarded-For
def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(tmp_path: Path, servers: list[LiveServer],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # uvicorn's own setting names no one here: CALIBO_TRUSTED_PROXIES (empty) alone decides
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")
    srv = _start(tmp_path, api_tokens="right-token", auth_failure_limit="5/minute")
    servers.append(srv)
    with srv.client() as c:
        # a guesser writing a new X-Forwarded-For each time is still one address: 127.0.0.1
        statuses = [c.get("/v1/studies", headers=_bearer(f"guess-{i}", _address())).status_code for i in range(8)]
        assert statuses == [401] * 5 + [429] * 3, statuses
        _assert_429(c.get("/v1/studies", headers=_bearer("guess", f"{_address()}, {_address()}")),
                    "authorization", 60)
        assert c.get("/v1/studies", headers=_bearer("right-token", _address())).status_code == 200
    # without auth, the per-address limit is the socket's address too
    open_srv = _start(tmp_path, rate_limit="3/minute")
    servers.append(open_srv)
    with open_srv.client() as c:
        statuses = [c.get("/v1/studies", headers=_bearer(None, _address())).status_code for _ in range(5)]
        assert statuses == [200] * 3 + [429] * 2, statuses


def test_x_forwarded_for_from_a_trusted_proxy_separates_clients(tmp_path: Path, servers: list[LiveServer]) -> None:
    # clients reach an ingress (10.0.0.0/8) that forwards through a sidecar on 127.0.0.1; the
    # client is the first address from the right that is not a trusted proxy
    trusted = "127.0.0.1, 10.0.0.0/8"
    srv = _start(tmp_path, api_tokens="right-token", auth_failure_limit="5/minute", trusted_proxies=trusted)
    servers.append(srv)
    one, two = "198.51.100.7, 10.1.2.3", "198.51.100.8, 10.1.2.3"
    with srv.client() as c:
        statuses = [c.get("/v1/studies", headers=_bearer(f"guess-{i}", one)).status_code for i in range(6)]
        assert statuses == [401] * 5 + [429], statuses
        # an address the client writes itself, left of what the proxies added, changes nothing
        _assert_429(c.get("/v1/studies", headers=_bearer("guess", f"{_address()}, {one}")), "authorization", 60)
        _assert_429(c.get("/v1/studies", headers=_bearer("guess", f"[2001:db8::1]:443, {one}")),
                    "authorization", 60)
        # another client behind the same ingress has its own count, and the valid token is served
        assert c.get("/v1/studies", headers=_bearer("guess", two)).status_code == 401
        assert c.get("/v1/studies", headers=_bearer("right-token", one)).status_code == 200
        # a request straight from the trusted sidecar, without the header, is its own client
        assert c.get("/v1/studies", headers=_bearer("guess")).status_code == 401
    # without auth, the per-address limit counts each client behind the proxies
    open_srv = _start(tmp_path, rate_limit="3/minute", trusted_proxies=trusted)
    servers.append(open_srv)
    with open_srv.client() as c:
        assert [c.get("/v1/studies", headers=_bearer(None, one)).status_code for _ in range(4)] == [200] * 3 + [429]
        assert c.get("/v1/studies", headers=_bearer(None, two)).status_code == 200
        assert c.get("/v1/studies", headers=_bearer(None, f"{_address()}, {one}")).status_code == 429


# ------------------------------------------------------------------ the setting
@pytest.mark.parametrize("value", ["10.0.0.300", "10.0.0.1/8", "*", "proxy.internal", "10.0.0.0/33",
                                   "127.0.0.1;10.0.0.0/8"])
def test_a_bad_trusted_proxies_value_fails_at_start_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CALIBO_TRUSTED_PROXIES", value)
    with pytest.raises(ValidationError) as e:
        create_app(Settings(database_url="sqlite:///unused.db"))
    assert "CALIBO_TRUSTED_PROXIES" in str(e.value) and value.split(";")[0] in str(e.value), str(e.value)


def test_trusted_proxies_are_ips_or_networks_and_empty_by_default() -> None:
    assert Settings(database_url="sqlite:///unused.db").trusted_proxies == ""
    s = Settings(database_url="sqlite:///unused.db", trusted_proxies=" 10.0.0.5 , 10.0.0.0/8,,fd00::/8, ::1 ")
    assert s.trusted_proxies == "10.0.0.5,10.0.0.0/8,fd00::/8,::1"


def test_calibo_serve_refuses_a_bad_trusted_proxy(tmp_path: Path) -> None:
    env = {**os.environ, "CALIBO_TRUSTED_PROXIES": "10.0.0.0/33", "CALIBO_DATABASE_URL": f"sqlite:///{tmp_path}/x.db"}
    run = subprocess.run([sys.executable, "-m", "calibo.server.cli", "serve", "--port", str(free_port())],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "CALIBO_TRUSTED_PROXIES" in run.stderr and "10.0.0.0/33" in run.stderr, run.stderr[-2000:]
