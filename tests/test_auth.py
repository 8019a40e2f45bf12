"""The auth matrix: every route the server documents x {no token, wrong token, read token, write token}.

Routes come from the live OpenAPI document (opened to make the matrix), so
a route added later is in the matrix without editing this file. Each call is
well formed, on a real study and trial, so the answer shows what auth did.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import BACKENDS, LiveServer, backend_server
from test_api import BRANIN

TOKENS = "w-token,r-token:read,w2-token:write"
WHO = {"none": None, "wrong": "nope", "wrong-scheme": None, "read": "r-token", "write": "w-token",
       "write2": "w2-token"}


@pytest.fixture(scope="module", params=BACKENDS)
def auth_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with backend_server(request, tmp_path_factory, "auth", workers=0, api_tokens=TOKENS) as srv:
        yield srv


def _headers(who: str) -> dict[str, str]:
    if who == "wrong-scheme":
        return {"Authorization": "Basic dy10b2tlbg=="}
    token = WHO[who]
    return {"Authorization": f"Bearer {token}"} if token else {}


def _operations(srv: LiveServer) -> list[tuple[str, str]]:
    spec = httpx.get(f"{srv.url}/openapi.json").json()
    ops = [(m.upper(), p) for p, item in spec["paths"].items() for m in item
           if m in ("get", "post", "put", "patch", "delete")]
    assert len(ops) >= 12, ops
    return ops


def _call(c: httpx.Client, method: str, path: str, who: str) -> httpx.Response:
    w = {"Authorization": "Bearer w-token"}
    study = {"name": f"auth-{method}-{path}-{who}", "space": BRANIN}
    if path.endswith("/pareto"):  # a front exists only in a study with several objectives
        study["directions"] = ["minimize", "minimize"]
    sid = c.post("/v1/studies", json=study, headers=w).json()["id"]
    if f"{method} {path}" == "DELETE /v1/studies/{study}/trials/{trial_id}":  # only a waiting trial goes
        tid = c.post(f"/v1/studies/{sid}/enqueue", json={"params": {"x1": 1.0}}, headers=w).json()["id"]
    else:
        tid = c.post(f"/v1/studies/{sid}/ask", json={}, headers=w).json()["trials"][0]["id"]
    url = path.replace("{study}", str(sid)).replace("{trial_id}", str(tid))
    body = {"POST /v1/studies": {"name": f"new-{who}-{sid}", "space": BRANIN},
            "POST /v1/studies/{study}/ask": {},
            "POST /v1/studies/{study}/trials/{trial_id}/tell": {"value": 1.0},
            "POST /v1/studies/{study}/trials/{trial_id}/report": {"step": 1, "value": 1.0},
            "POST /v1/studies/{study}/enqueue": {"params": {"x1": 1.0}},
            "POST /v1/studies/{study}/trials": {"params": {"x1": 1.0, "x2": 2.0}, "value": 3.0},
            "POST /v1/studies/{study}/copy": {"name": f"copy-{who}-{sid}"},
            "PATCH /v1/studies/{study}/user_attrs": {"set": {"team": who}},
            "PATCH /v1/studies/{study}/system_attrs": {"set": {"sampler": who}},
            "PATCH /v1/studies/{study}/trials/{trial_id}": {"user_attrs": {"by": who}},
            "PATCH /v1/studies/{study}/space": {"space": {"x3": {"type": "float", "low": 0, "high": 1}}},
            }.get(f"{method} {path}")
    return c.request(method, url, json=body, headers=_headers(who))


def test_every_route_under_every_kind_of_caller(auth_server: LiveServer) -> None:
    problems = []
    with auth_server.client() as c:
        for method, path in _operations(auth_server):
            for who in WHO:
                r = _call(c, method, path, who)
                if not (path.startswith("/v1") or path == "/metrics"):
                    expected = "open"
                    ok = r.status_code < 400
                elif who in ("none", "wrong", "wrong-scheme"):
                    expected = "401"
                    ok = (r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
                          and r.headers.get("www-authenticate") == "Bearer")
                elif who == "read" and method != "GET":
                    expected = "403"
                    ok = r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
                else:
                    expected = "allowed"
                    ok = r.status_code < 400
                if not ok:
                    problems.append(f"{method} {path} as {who}: expected {expected}, "
                                    f"got {r.status_code} {r.text[:200]}")
    assert not problems, "\n".join(problems)


def test_the_document_declares_bearer_auth_when_it_is_on(auth_server: LiveServer) -> None:
    spec = httpx.get(f"{auth_server.url}/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert {"HTTPBearer": []} in spec["paths"]["/v1/studies"]["post"]["security"]
    assert "security" not in spec["paths"]["/healthz"]["get"]
