"""A study's user attributes after creation: PATCH /v1/studies/{study}/user_attrs over HTTP on SQLite
and PostgreSQL (set, delete, bounds, auth, concurrent sets of different keys), the OpenAPI document's
description of it, and the client's ``set_study_user_attr`` / ``Study.set_user_attr``, sync and async."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
import pytest
from conftest import BACKENDS, LiveServer, backend_server, unique
from test_api import BRANIN

from calibo import AsyncClient, Client, InvalidRequest, NotFound
from calibo.server.studies.attrs import MAX_USER_ATTRS_BYTES, MAX_USER_ATTRS_KEYS

WRITE = {"Authorization": "Bearer w-token"}
READ = {"Authorization": "Bearer r-token"}


@pytest.fixture(scope="module", params=BACKENDS)
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with backend_server(request, tmp_path_factory, "attrs", workers=0, api_tokens="w-token,r-token:read") as s:
        yield s


@pytest.fixture
def http(srv: LiveServer) -> Iterator[httpx.Client]:
    with srv.client(headers=WRITE) as c:
        yield c


def _study(http: httpx.Client, **extra) -> tuple[int, str]:
    name = unique("attrs")
    r = http.post("/v1/studies", json={"name": name, "space": BRANIN, **extra})
    assert r.status_code == 201, r.text
    return r.json()["id"], name


def _patch(http: httpx.Client, study: int | str, body: dict) -> httpx.Response:
    return http.patch(f"/v1/studies/{study}/user_attrs", json=body)


def test_set_replace_and_delete_keys(http: httpx.Client) -> None:
    sid, name = _study(http, user_attrs={"git": "4f2a9c1", "draft": True})
    r = _patch(http, sid, {"set": {"owner": "ml-team", "git": "5e0b", "nested": {"a": [1, 2.5, None]}}})
    assert r.status_code == 200, r.text
    expected = {"git": "5e0b", "draft": True, "owner": "ml-team", "nested": {"a": [1, 2.5, None]}}
    assert r.json() == {"user_attrs": expected}
    assert http.get(f"/v1/studies/{sid}").json()["user_attrs"] == expected  # the study view shows them
    listed = http.get("/v1/studies", params={"name": name}).json()["studies"]
    assert listed[0]["user_attrs"] == expected
    again = _patch(http, sid, {"set": {"owner": "ml-team"}})  # the same change again changes nothing
    assert again.status_code == 200 and again.json()["user_attrs"] == expected
    r = _patch(http, name, {"delete": ["draft", "no-such-key"]})  # by name; an absent key is ignored
    assert r.status_code == 200 and r.json()["user_attrs"] == {k: v for k, v in expected.items() if k != "draft"}
    r = _patch(http, sid, {"set": {"draft": False}, "delete": ["owner", "nested"]})  # both in one change
    assert r.json()["user_attrs"] == {"git": "5e0b", "draft": False}
    assert _patch(http, sid, {}).json()["user_attrs"] == {"git": "5e0b", "draft": False}  # no change: read
    r = _patch(http, sid, {"delete": ["git", "draft"]})
    assert r.status_code == 200 and r.json()["user_attrs"] == {}
    assert http.get(f"/v1/studies/{sid}").json()["user_attrs"] == {}


def test_a_study_named_with_a_slash_and_digits(http: httpx.Client) -> None:
    name = f"team/{unique()}"
    sid = http.post("/v1/studies", json={"name": name, "space": BRANIN}).json()["id"]
    r = http.patch(f"/v1/studies/{name.replace('/', '%2F')}/user_attrs", json={"set": {"k": 1}})
    assert r.status_code == 200 and r.json()["user_attrs"] == {"k": 1}
    digits = str(900_000_000 + sid)
    d = http.post("/v1/studies", json={"name": digits, "space": BRANIN}).json()["id"]
    r = http.patch(f"/v1/studies/{digits}/user_attrs", params={"by": "name"}, json={"set": {"k": 2}})
    assert r.status_code == 200 and http.get(f"/v1/studies/{d}").json()["user_attrs"] == {"k": 2}


def _error(r: httpx.Response, status: int, field: str | None) -> str:
    """The error's message, after checking its status and field (``set.*``: any field below ``set``)."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    if field is not None and field.endswith(".*"):
        assert err["field"].startswith(field[:-1]), err
    else:
        assert err["field"] == field, err
    return err["message"]


def test_out_of_bounds_changes_are_422_naming_the_field_and_store_nothing(http: httpx.Client) -> None:
    sid, _ = _study(http, user_attrs={f"k{i}": i for i in range(MAX_USER_ATTRS_KEYS)})
    before = http.get(f"/v1/studies/{sid}").json()["user_attrs"]
    # one key more than creation allows, in all: refused as a whole
    assert "at most 64 keys" in _error(_patch(http, sid, {"set": {"one-more": 1}}), 422, "set")
    # but replacing a key, or deleting one and adding another in the same change, fits
    assert _patch(http, sid, {"set": {"k0": "x"}}).status_code == 200
    assert _patch(http, sid, {"set": {"new": 1}, "delete": ["k1"]}).status_code == 200
    before = {k: v for k, v in before.items() if k != "k1"} | {"k0": "x", "new": 1}
    big = "x" * (MAX_USER_ATTRS_BYTES // 2)
    sid2, _ = _study(http, user_attrs={"a": big})
    assert "bytes as JSON" in _error(_patch(http, sid2, {"set": {"b": big}}), 422, "set")  # each fits, both do not
    assert "bytes as JSON" in _error(_patch(http, sid2, {"set": {"b": "x" * (MAX_USER_ATTRS_BYTES + 1)}}), 422,
                                     "set")
    _error(_patch(http, sid2, {"set": {"k": 1}, "delete": ["k"]}), 422, "delete")
    _error(_patch(http, sid2, {"set": {"k" * 200: 1}}), 422, "set.*")  # a key longer than creation allows
    _error(_patch(http, sid2, {"set": {"k": "nul\u0000"}}), 422, "set.k")
    _error(_patch(http, sid2, {"set": {"k": _deep(40)}}), 422, "set.k.*")
    _error(_patch(http, sid2, {"set": ["k"]}), 422, "set")
    _error(_patch(http, sid2, {"delete": "k"}), 422, "delete")
    _error(_patch(http, sid2, {"delete": ["nul\u0000"]}), 422, "delete.0")
    _error(_patch(http, sid2, {"delete": [f"k{i}" for i in range(MAX_USER_ATTRS_KEYS + 1)]}), 422, "delete")
    _error(_patch(http, sid2, {"sets": {"k": 1}}), 422, "sets")
    r = http.patch(f"/v1/studies/{sid2}/user_attrs", content=b'{"set": {"k": NaN}}',
                   headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 422) and r.status_code < 500
    _error(_patch(http, 2**31 - 5, {"set": {"k": 1}}), 404, "study")
    _error(_patch(http, unique("missing"), {"set": {"k": 1}}), 404, "study")
    assert http.get(f"/v1/studies/{sid}").json()["user_attrs"] == before
    assert http.get(f"/v1/studies/{sid2}").json()["user_attrs"] == {"a": big}


def _deep(n: int) -> list:
    out: list = []
    for _ in range(n):
        out = [out]
    return out


def test_a_read_token_may_not_change_attributes(srv: LiveServer, http: httpx.Client) -> None:
    sid, _ = _study(http, user_attrs={"k": 1})
    with srv.client(headers=READ) as ro:
        _error(ro.patch(f"/v1/studies/{sid}/user_attrs", json={"set": {"k": 2}}), 403, "authorization")
        assert ro.get(f"/v1/studies/{sid}").json()["user_attrs"] == {"k": 1}
    with srv.client() as anonymous:
        assert anonymous.patch(f"/v1/studies/{sid}/user_attrs", json={"set": {"k": 2}}).status_code == 401


def test_concurrent_sets_of_different_keys_all_land(srv: LiveServer, http: httpx.Client) -> None:
    """Sixteen clients, each in its own thread and connection, set four keys each at once: none of
    the 64 keys is lost (the merge runs under the study's lock), and deletes racing with sets of
    other keys remove exactly their keys."""
    sid, _ = _study(http, user_attrs={f"old{i}": i for i in range(8)})
    n_clients, per_client = 16, 3
    start = threading.Barrier(n_clients)
    errors: list[str] = []

    def work(c: int) -> None:
        with srv.client(headers=WRITE) as mine:
            start.wait()
            for j in range(per_client):
                r = mine.patch(f"/v1/studies/{sid}/user_attrs", json={"set": {f"c{c}-{j}": [c, j]}})
                if r.status_code != 200:
                    errors.append(r.text)
            if c < 8:
                r = mine.patch(f"/v1/studies/{sid}/user_attrs", json={"delete": [f"old{c}"]})
                if r.status_code != 200:
                    errors.append(r.text)

    threads = [threading.Thread(target=work, args=(c,)) for c in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    attrs = http.get(f"/v1/studies/{sid}").json()["user_attrs"]
    assert attrs == {f"c{c}-{j}": [c, j] for c in range(n_clients) for j in range(per_client)}


def test_the_openapi_document_describes_the_route(srv: LiveServer) -> None:
    doc = httpx.get(f"{srv.url}/openapi.json").json()
    op = doc["paths"]["/v1/studies/{study}/user_attrs"]["patch"]
    body = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    schema = doc["components"]["schemas"][body]
    assert set(schema["properties"]) == {"set", "delete"} and schema["additionalProperties"] is False
    assert {"200", "403", "404", "422"} <= set(op["responses"])
    answer = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert doc["components"]["schemas"][answer]["required"] == ["user_attrs"]


def test_client_and_study_handles_sync_and_async(srv: LiveServer) -> None:
    with Client(srv.url, token="w-token") as c:
        study = c.create_study(unique("attrs-client"), BRANIN, user_attrs={"git": "abc"})
        study.set_user_attr("owner", {"team": "ml", "on_call": ["ana"]})
        assert study.user_attrs == {"git": "abc", "owner": {"team": "ml", "on_call": ["ana"]}}
        assert study.view["user_attrs"] == study.user_attrs
        assert c.load_study(study.name).user_attrs == study.user_attrs  # stored on the server
        assert c.set_study_user_attr(study.name, "git", "def") == {"git": "def", "owner": study.user_attrs["owner"]}
        study.delete_user_attr("owner")
        assert study.user_attrs == {"git": "def"} and c.get_study(study.id)["user_attrs"] == {"git": "def"}
        assert c.delete_study_user_attr(study.id, "absent") == {"git": "def"}
        with pytest.raises(InvalidRequest) as e:
            study.set_user_attr("k", "nul\u0000")  # refused by the server, naming the field
        assert e.value.field == "set.k"
        with pytest.raises(ValueError):
            study.set_user_attr("k", float("inf"))  # not JSON: refused before sending
        with pytest.raises(NotFound):
            c.set_study_user_attr(unique("missing"), "k", 1)
        with pytest.raises(TypeError):
            study.set_user_attr(1, "v")  # type: ignore[arg-type]
        assert study.refresh().user_attrs == {"git": "def"}

    async def run() -> None:
        async with AsyncClient(srv.url, token="w-token") as ac:
            s = await ac.create_study(unique("attrs-async"), BRANIN)
            await asyncio.gather(*(s.client.set_study_user_attr(s.id, f"k{i}", i) for i in range(10)))
            await s.set_user_attr("last", None)
            assert s.user_attrs == {**{f"k{i}": i for i in range(10)}, "last": None}
            await s.delete_user_attr("k0")
            assert "k0" not in s.user_attrs and (await ac.get_study(s.id))["user_attrs"] == s.user_attrs

    asyncio.run(run())
