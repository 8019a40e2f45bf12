"""HTTP at the edge, over real sockets against live servers: security headers on every answer, HEAD
on every GET route, and the bound on a request's head (request line and headers) whatever its chunking.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Iterator

import httpx
import pytest
from conftest import LiveServer
from starlette.routing import Mount

from calibo.server.api.headers import API_CSP, DASHBOARD_CSP, HeadAsGet, SecurityHeaders
from calibo.server.app import create_app
from calibo.server.config import Settings
from calibo.server.server import MAX_HEADER_BYTES

WRITE, READ = "edge-write", "edge-read"
SPACE = {"x": {"type": "float", "low": 0, "high": 1}}


def seed(c: httpx.Client) -> dict[str, str]:
    """A study of two objectives (every GET route answers 200 on it) with a told trial that reported:
    the values for the GET routes' path parameters."""
    r = c.post("/v1/studies", json={"name": "edge", "space": SPACE, "directions": ["minimize", "maximize"]})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    trial = c.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
    assert c.post(f"/v1/studies/{sid}/trials/{trial['id']}/report", json={"step": 1, "value": 0.5}).status_code == 200
    r = c.post(f"/v1/studies/{sid}/trials/{trial['id']}/tell", json={"values": [0.5, 1.0]})
    assert r.status_code == 200, r.text
    return {"study": str(sid), "trial_id": str(trial["id"])}


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('edge') / 'calibo.db'}", workers=0).start()
    with srv.client() as c:
        params = seed(c)
    yield srv, params
    srv.stop()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('edge-auth') / 'calibo.db'}", workers=0,
                     api_tokens=f"{WRITE},{READ}:read").start()
    with srv.client(headers={"Authorization": f"Bearer {WRITE}"}) as c:
        params = seed(c)
    yield srv, params
    srv.stop()


# ------------------------------------------------------------------ every GET route
def get_paths(routes: list, prefix: str = "") -> Iterator[str]:
    """The path template of every GET route (a mount: one of its files), included routers too."""
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI resolves included routers lazily
        if included is not None:
            yield from get_paths(included.routes, prefix + route.include_context.prefix)
        elif isinstance(route, Mount):
            yield prefix + route.path + "/app.js"
        elif "GET" in (getattr(route, "methods", None) or ()):
            yield prefix + route.path


def every_get_path(params: dict[str, str], **settings: str) -> list[str]:
    app = create_app(Settings(database_url="sqlite:///:memory:", workers=0, **settings))
    templates = sorted(set(get_paths(app.routes)))
    documented = {p for p, ops in app.openapi()["paths"].items() if "get" in ops}
    assert documented <= set(templates), documented - set(templates)  # no router missed
    assert {"/healthz", "/livez", "/metrics", "/dashboard", "/dashboard/static/app.js", "/openapi.json",
            "/docs", "/redoc", "/v1/studies", "/v1/studies/{study}/calibration"} <= set(templates)
    paths = []
    for t in templates:
        path = t.format(**params)
        assert "{" not in path, f"no value for the parameters of {t}"
        paths.append(path)
    return paths


VARYING = {"date", "x-request-id"}


def assert_head_like_get(c: httpx.Client, path: str) -> int:
    first, head, again = c.get(path), c.head(path), c.get(path)
    assert head.status_code == first.status_code, (path, first.status_code, head.status_code)
    assert head.content == b"", path
    assert set(head.headers) - {"transfer-encoding"} == set(first.headers) - {"transfer-encoding"}, path
    for name, value in first.headers.items():
        if name not in VARYING and again.headers.get(name) == value:  # what two GETs agree on
            assert head.headers.get(name) == value, (path, name)
    return first.status_code


def test_head_answers_like_get_on_every_get_route(open_server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, params = open_server
    paths = every_get_path(params)
    with srv.client() as c:
        statuses = {path: assert_head_like_get(c, path) for path in paths}
        # the rest of the answers too: 404s, the redirect, a 405
        for path in ("/v1/studies/999999", f"/v1/studies/{params['study']}/trials/999999", "/nowhere",
                     "/dashboard/static/nothing.js", f"/v1/studies/{params['study']}/ask"):
            statuses[path] = assert_head_like_get(c, path)
    assert statuses.pop("/dashboard/") == 307  # to /dashboard
    assert statuses.pop(f"/v1/studies/{params['study']}/ask") == 405
    assert [p for p, s in statuses.items() if s == 404] == [
        "/v1/studies/999999", f"/v1/studies/{params['study']}/trials/999999", "/nowhere",
        "/dashboard/static/nothing.js"]
    assert all(s == 200 for s in statuses.values() if s != 404), statuses
    # observed as HEAD, under the route's template
    with srv.client() as c:
        metrics = c.get("/metrics").text
    assert re.search(r'calibo_http_request_duration_seconds_count\{method="HEAD",'
                     r'route="/v1/studies/\{study\}/calibration",status="200"\} 1\.0', metrics), metrics[:2000]


def test_head_with_auth_answers_as_get(auth_server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, params = auth_server
    paths = every_get_path(params, api_tokens=f"{WRITE},{READ}:read")
    guarded = [p for p in paths if p.startswith(("/v1/", "/metrics"))]
    assert len(guarded) >= 8
    with srv.client() as anonymous:
        for path in paths:
            status = assert_head_like_get(anonymous, path)
            assert status == (401 if path in guarded else 307 if path == "/dashboard/" else 200), path
        assert anonymous.head("/v1/studies").headers["www-authenticate"] == "Bearer"
    with srv.client(headers={"Authorization": f"Bearer {READ}"}) as reader:
        for path in guarded:
            assert assert_head_like_get(reader, path) == 200, path


def test_a_405_lists_head_where_get_is_allowed(open_server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, params = open_server
    with srv.client() as c:
        for method, path, allowed in (("DELETE", "/v1/studies", {"GET", "HEAD", "POST"}),
                                      ("PUT", f"/v1/studies/{params['study']}", {"GET", "HEAD", "DELETE"}),
                                      ("POST", "/healthz", {"GET", "HEAD"}),
                                      ("HEAD", f"/v1/studies/{params['study']}/ask", {"POST"})):
            r = c.request(method, path)
            assert r.status_code == 405, (method, path)
            assert {m.strip() for m in r.headers["allow"].split(",")} == allowed, (method, path)


def test_head_keeps_the_get_headers_and_drops_the_body_in_process() -> None:
    """Without a server that drops a HEAD's body itself: the middleware does."""

    async def app(scope: dict, receive: object, send: object) -> None:
        assert scope["method"] == "GET"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"10")]})
        await send({"type": "http.response.body", "body": b"hello", "more_body": True})
        await send({"type": "http.response.body", "body": b"world"})

    async def run() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=HeadAsGet(app))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as c:
            return await c.get("/"), await c.head("/")

    get, head = asyncio.run(run())
    assert get.content == b"helloworld" and head.content == b""
    assert head.status_code == 200 and head.headers["content-length"] == "10"


# ------------------------------------------------------------------ security headers
def csp(r: httpx.Response) -> dict[str, set[str]]:
    policy = r.headers.get("content-security-policy", "")
    return {d.split()[0]: set(d.split()[1:]) for d in policy.split(";") if d.strip()}


def assert_guarded(r: httpx.Response) -> None:
    where = f"{r.request.method} {r.request.url.path} -> {r.status_code}"
    assert r.headers.get("x-content-type-options") == "nosniff", where
    assert r.headers.get("referrer-policy") == "no-referrer", where
    assert r.headers.get("x-frame-options") == "DENY", where
    assert csp(r).get("frame-ancestors") == {"'none'"}, where


def test_every_answer_carries_the_security_headers(open_server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, params = open_server
    sid = params["study"]
    json_body = {"content-type": "application/json"}
    with srv.client() as c:
        answers = [
            c.get("/healthz"), c.get("/livez"), c.get("/metrics"), c.get("/openapi.json"), c.get("/v1/studies"),
            c.get(f"/v1/studies/{sid}/calibration"), c.head("/v1/studies"),
            c.get("/nowhere"), c.get("/v1/studies/999999"),  # 404
            c.put("/v1/studies"),  # 405
            c.post("/v1/studies", content=b"{not json", headers=json_body),  # 400
            c.post("/v1/studies", json={"name": "x", "space": {"a": {"type": "tensor"}}}),  # 422
            c.post("/v1/studies", content=b"{" * (1_048_576 + 1), headers=json_body),  # 413
        ]
        assert [r.status_code for r in answers] == [200] * 7 + [404, 404, 405, 400, 422, 413]
        for r in answers:
            assert_guarded(r)
            assert r.headers["content-security-policy"] == API_CSP

        # an unexpected error: the 500 of the last-resort handler
        studies = srv._server.config.app.state.studies  # the in-process app
        real = studies.calibration
        studies.calibration = lambda *a, **k: 1 / 0
        try:
            broken = c.get(f"/v1/studies/{sid}/calibration")
        finally:
            studies.calibration = real
        assert broken.status_code == 500
        assert_guarded(broken)

        # the docs pages load Swagger UI / ReDoc from their CDN with an inline start script: not framed,
        # nothing else restricted
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            r = c.get(path)
            assert r.status_code == 200, path
            assert_guarded(r)
            assert not {"default-src", "script-src", "style-src"} & set(csp(r)), path


def test_the_dashboard_is_served_under_a_strict_policy_and_cannot_be_framed(
        open_server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, _ = open_server
    with srv.client() as c:
        for path in ("/dashboard", "/dashboard/static/app.js", "/dashboard/static/style.css",
                     "/dashboard/static/vendor/uPlot.iife.min.js", "/dashboard/static/missing.js"):
            r = c.get(path)
            assert_guarded(r)
            assert r.headers["content-security-policy"] == DASHBOARD_CSP, path
    policy = {k: v for k, v in (d.split(None, 1) for d in DASHBOARD_CSP.split("; "))}
    assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["connect-src"] == "'self'" and policy["base-uri"] == "'none'"
    assert policy["form-action"] == "'self'"
    assert "unsafe" not in DASHBOARD_CSP


def test_a_header_the_route_sets_is_kept() -> None:
    async def app(scope: dict, receive: object, send: object) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-security-policy", b"sandbox"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=SecurityHeaders(app))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as c:
            return await c.get("/v1/studies")

    r = asyncio.run(run())
    assert r.headers.get_list("content-security-policy") == ["sandbox"]
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"


# ------------------------------------------------------------------ the bound on a request's head
def head_of(size: int, method: str = "GET", path: str = "/livez", extra: str = "") -> bytes:
    """A request head of exactly ``size`` bytes (request line, headers, blank line), padded by X-Pad."""
    start = f"{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}X-Pad: "
    pad = size - len(start) - len("\r\n\r\n")
    assert pad > 0
    return (start + "a" * pad + "\r\n\r\n").encode()


def exchange(srv: LiveServer, *sends: bytes) -> bytes:
    """Send each piece on one fresh connection (no coalescing on this side), then read until the server
    closes (every request here either says Connection: close or is refused)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in sends:
            s.sendall(piece)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def in_pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def statuses(answer: bytes) -> list[int]:
    """The status of each response in ``answer`` (a body here never holds a status line)."""
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


CLOSE = "Connection: close\r\n"


@pytest.mark.parametrize("pieces", [None, 997, 7], ids=["one-send", "997-byte-sends", "7-byte-sends"])
def test_the_head_bound_is_exact_whatever_the_chunking(open_server: tuple[LiveServer, dict[str, str]],
                                                       pieces: int | None) -> None:
    srv, _ = open_server
    for size, status in ((MAX_HEADER_BYTES, 200), (MAX_HEADER_BYTES + 1, 431)):
        data = head_of(size, extra=CLOSE)
        answer = exchange(srv, *(in_pieces(data, pieces) if pieces else [data]))
        assert statuses(answer) == [status], (size, answer[:200])


def test_a_128_kib_head_in_one_send_is_refused(open_server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, _ = open_server
    answer = exchange(srv, head_of(128 * 1024, extra=CLOSE))
    assert statuses(answer) == [431]
    head = answer.split(b"\r\n\r\n")[0].lower()
    assert b"connection: close" in head and b"x-content-type-options: nosniff" in head
    assert b"referrer-policy: no-referrer" in head


def test_a_70_kib_head_in_small_sends_is_refused_and_60_kib_served(
        open_server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, _ = open_server
    assert statuses(exchange(srv, *in_pieces(head_of(70 * 1024, extra=CLOSE), 1024))) == [431]
    assert statuses(exchange(srv, *in_pieces(head_of(60 * 1024, extra=CLOSE), 1024))) == [200]
    assert statuses(exchange(srv, head_of(60 * 1024, extra=CLOSE))) == [200]
    # many headers rather than one long one
    many = "".join(f"X-Header-{i}: {'b' * 600}\r\n" for i in range(100))  # about 62 KiB
    assert statuses(exchange(srv, head_of(len(many) + 1024, extra=many + CLOSE))) == [200]
    assert statuses(exchange(srv, *in_pieces(head_of(len(many) + 4096, extra=many + CLOSE), 1500))) == [431]


@pytest.mark.parametrize("split", ["one-send", "head-in-two", "blank-line-split"])
def test_a_body_in_the_same_read_as_the_head_is_not_counted(open_server: tuple[LiveServer, dict[str, str]],
                                                            split: str) -> None:
    srv, _ = open_server
    body = json.dumps({"name": f"edge-body-{split}", "space": SPACE}).encode() + b" " * (40 * 1024)
    head = head_of(60 * 1024, "POST", "/v1/studies",
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{CLOSE}")
    assert len(head) + len(body) > 2 * MAX_HEADER_BYTES - 32 * 1024  # together well over the bound
    sends = {"one-send": [head + body],
             "head-in-two": [head[:30 * 1024], head[30 * 1024:] + body],  # counted 30 KiB, then the rest
             "blank-line-split": [head[:-2], head[-2:] + body]}[split]
    assert statuses(exchange(srv, *sends)) == [201]


def test_each_request_on_a_connection_is_bounded_on_its_own(open_server: tuple[LiveServer, dict[str, str]]
                                                            ) -> None:
    srv, _ = open_server
    small = head_of(1024)
    # pipelined in one send: two heads of 40 KiB pass, one of 70 KiB after a small one is refused after
    # the small one is answered
    assert statuses(exchange(srv, head_of(40 * 1024) + head_of(40 * 1024, extra=CLOSE))) == [200, 200]
    assert statuses(exchange(srv, small + head_of(70 * 1024, extra=CLOSE))) == [200, 431]
    # one after the other on a kept-alive connection
    assert statuses(exchange(srv, head_of(60 * 1024), head_of(60 * 1024, extra=CLOSE))) == [200, 200]

