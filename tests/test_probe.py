"""Nothing a client sends can break a study: a probe over HTTP, on SQLite and on PostgreSQL.

Three parts, every response of which is recorded and must not be a 5xx:

* a property test (hypothesis) drives random JSON and strings (unpaired surrogates, NUL, deep
  nesting, NaN, +-1.8e308, huge integers) through create, ask, tell, enqueue, add, copy and the
  filters; whatever is accepted must read back, unchanged, from every read the dashboard makes
  (study, study list, trials, trial, calibration, curves, pareto), and whatever is refused must be
  a 4xx naming the field that commits nothing;
* extreme values in every numeric field (values, objectives, constraints, reports, reference
  point): fits keep landing, without an error, asks keep answering, every number read is finite;
* wrong shapes and NUL bytes in paths and filters: the same 4xx on both backends, and the trial
  told the wrong shape is still running, then told correctly.

Every trial the probe asks for is told: none is left running.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from conftest import LiveServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPACE = {"x": {"type": "float", "low": -1e300, "high": 1e300},
         "c": {"type": "categorical", "choices": ["a", "b", "é/%"]}}
LARGEST = 1.7976931348623157e308
EXTREMES = [1e308, -1e308, LARGEST, -LARGEST, 5e-324, -5e-324, 1e200, 0.0]


class Probe:
    """An HTTP client that sends any JSON (lone surrogates escaped, NaN as the bare token), records
    every status and fails at the first 5xx."""

    def __init__(self, server: LiveServer) -> None:
        self.http = server.client()
        self.statuses: list[int] = []

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        content = None if body is None else json.dumps(body, ensure_ascii=True, allow_nan=True)
        headers = {"content-type": "application/json"} if content is not None else {}
        r = self.http.request(method, path, content=content, headers=headers, **kw)
        self.statuses.append(r.status_code)
        assert r.status_code < 500, f"{method} {path} {content and content[:300]!r}: {r.status_code} {r.text[:500]}"
        return r

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        r = self.call(method, path, body, **kw)
        assert r.status_code in (200, 201), f"{method} {path}: {r.status_code} {r.text[:500]}"
        return r.json()

    def refused(self, r: httpx.Response, *fields: str) -> None:
        """A 4xx in the wire contract's shape, naming one of ``fields`` (or a part of one)."""
        assert 400 <= r.status_code < 500, r.text
        err = r.json()["error"]
        assert err["code"] and err["message"]
        if fields:
            assert any((err["field"] or "").startswith(f) for f in fields), (fields, err)

    def reads(self, sid: int) -> dict[str, Any]:
        """Every read of the study a client or the dashboard makes; each must answer 200."""
        study = self.ok("GET", f"/v1/studies/{sid}")
        assert self.ok("GET", f"/v1/studies/{quote(study['name'], safe='')}", params={"by": "name"})["id"] == sid
        listed = self.ok("GET", "/v1/studies", params={"limit": 1000})["studies"]
        assert any(s["id"] == sid for s in listed)
        trials = self.ok("GET", f"/v1/studies/{sid}/trials", params={"limit": 1000})["trials"]
        for t in trials:
            assert self.ok("GET", f"/v1/studies/{sid}/trials/{t['id']}") == t
        self.ok("GET", f"/v1/studies/{sid}/calibration")
        self.ok("GET", f"/v1/studies/{sid}/curves")
        r = self.call("GET", f"/v1/studies/{sid}/pareto")
        assert r.status_code == 200 or r.json()["error"]["code"] == "not_multi_objective"
        return {"study": study, "trials": {t["id"]: t for t in trials}}

    def study_count(self) -> int:
        return self.ok("GET", "/v1/studies", params={"limit": 1})["total"]

    def no_running(self, sid: int) -> None:
        assert self.ok("GET", f"/v1/studies/{sid}/trials", params={"state": "running"})["total"] == 0


@pytest.fixture
def probe(server: LiveServer) -> Iterator[Probe]:
    p = Probe(server)
    yield p
    p.http.close()
    assert not [s for s in p.statuses if s >= 500]


# ------------------------------------------------------------- random input
ODD = ["\x00", "\ud800", "\udfff", "\ud83d\ude00", "é", "/", "%2F", " ", "\n", "..", "\x7f"]
texts = st.lists(st.characters(exclude_categories=()) | st.sampled_from(ODD), max_size=8).map("".join)
numbers = (st.integers() | st.floats() | st.sampled_from([*EXTREMES, 2**70, -(2**64), 1e16, -0.0, 1.5e-300]))
scalars = st.none() | st.booleans() | numbers | texts


def _deep(depth: int) -> Any:
    v: Any = "leaf"
    for i in range(depth):
        v = [v] if i % 2 else {"k": v}
    return v


json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(texts, inner, max_size=3), max_leaves=10) \
    | st.integers(0, 60).map(_deep)
attrs = st.dictionaries(texts, json_values, max_size=4)


def _meant(v: Any) -> Any:
    """What ``v`` means as the JSON text the probe sends: two surrogates in a row are one character."""
    return json.loads(json.dumps(v, ensure_ascii=True, allow_nan=True))


def _url_text(s: str) -> str:
    """``s`` as a URL can carry it: without unpaired surrogates, which UTF-8 cannot encode."""
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace").replace("\ufffd", "")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value (a float and the integer of the same value are equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _merged(*parts: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in parts:
        out.update(p or {})
    return out


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(name=texts, study_attrs=attrs, ask_attrs=attrs, tell_attrs=attrs, value=numbers, enq_x=numbers,
       enq_attrs=attrs, add_attrs=attrs, copy_name=texts, key=texts, wanted=texts)
def test_what_the_api_accepts_it_reads_back_and_what_it_refuses_it_does_not_store(
        server: LiveServer, name: str, study_attrs: dict, ask_attrs: dict, tell_attrs: dict, value: Any,
        enq_x: Any, enq_attrs: dict, add_attrs: dict, copy_name: str, key: str, wanted: str) -> None:
    p = Probe(server)
    study_attrs, ask_attrs, tell_attrs, enq_attrs, add_attrs = (
        _meant(a) for a in (study_attrs, ask_attrs, tell_attrs, enq_attrs, add_attrs))
    try:
        _round_trip(p, _meant(name), study_attrs, ask_attrs, tell_attrs, value, enq_x, enq_attrs, add_attrs,
                    _meant(copy_name), _url_text(key), _url_text(wanted))
    finally:
        p.http.close()


def _round_trip(p: Probe, name: str, study_attrs: dict, ask_attrs: dict, tell_attrs: dict, value: Any, enq_x: Any,
                enq_attrs: dict, add_attrs: dict, copy_name: str, key: str, wanted: str) -> None:
    before = p.study_count()
    full = f"{name}-{uuid.uuid4().hex[:8]}"
    r = p.call("POST", "/v1/studies", {"name": full, "space": SPACE, "user_attrs": study_attrs,
                                       "settings": {"n_warmup": 4}})
    if r.status_code != 201:
        p.refused(r, "name", "user_attrs")
        assert p.study_count() == before  # nothing committed
        full = f"probe-{uuid.uuid4().hex[:8]}"
        study_attrs = {}
        r = p.call("POST", "/v1/studies", {"name": full, "space": SPACE, "settings": {"n_warmup": 4}})
    sid = r.json()["id"]
    assert _same(p.reads(sid)["study"]["user_attrs"], study_attrs)

    # ask: accepted attributes are on every trial handed out; refused ones leave no trial behind
    r = p.call("POST", f"/v1/studies/{sid}/ask", {"count": 2, "user_attrs": ask_attrs})
    if r.status_code != 200:
        p.refused(r, "user_attrs")
        assert p.reads(sid)["trials"] == {}
        ask_attrs = {}
        r = p.call("POST", f"/v1/studies/{sid}/ask", {"count": 2})
    first, second = r.json()["trials"]
    # tell: a value and attributes; a refused tell leaves the trial running, to be told again
    r = p.call("POST", f"/v1/studies/{sid}/trials/{first['id']}/tell", {"value": value, "user_attrs": tell_attrs})
    if r.status_code != 200:
        p.refused(r, "value", "user_attrs")
        assert p.reads(sid)["trials"][first["id"]]["state"] == "running"
        value, tell_attrs = 0.5, {}
        p.ok("POST", f"/v1/studies/{sid}/trials/{first['id']}/tell", {"value": value})
    p.ok("POST", f"/v1/studies/{sid}/trials/{second['id']}/tell", {"state": "failed"})
    # enqueue and add: parameters and attributes as given, or nothing
    n_trials = len(p.reads(sid)["trials"])
    r = p.call("POST", f"/v1/studies/{sid}/enqueue", {"params": {"x": enq_x}, "user_attrs": enq_attrs})
    enqueued = r.json()["id"] if r.status_code in (200, 201) else None
    if enqueued is None:
        p.refused(r, "params", "user_attrs")
    r = p.call("POST", f"/v1/studies/{sid}/trials",
               {"params": {"x": 1.0, "c": "é/%"}, "value": value, "user_attrs": add_attrs})
    added = r.json()["trials"][0]["id"] if r.status_code == 201 else None
    if added is None:
        p.refused(r, "user_attrs")
    seen = p.reads(sid)
    assert len(seen["trials"]) == n_trials + (enqueued is not None) + (added is not None)
    assert _same(seen["trials"][first["id"]]["user_attrs"], _merged(ask_attrs, tell_attrs))
    # a number field holds a double: the one nearest the JSON number sent (exactly it up to 2**53)
    assert seen["trials"][first["id"]]["value"] == float(value)
    assert _same(seen["trials"][second["id"]]["user_attrs"], ask_attrs)
    if enqueued is not None:
        assert _same(seen["trials"][enqueued]["user_attrs"], enq_attrs)
        assert seen["trials"][enqueued]["params"]["x"] == float(enq_x)  # a float parameter: a double
    if added is not None:
        assert _same(seen["trials"][added]["user_attrs"], add_attrs)
    # filters: any key and value answer, never a 5xx
    key = key.replace(":", "") or "k"
    r = p.call("GET", f"/v1/studies/{sid}/trials", params={"user_attr": f"{key}:{wanted}"})
    if r.status_code == 200:
        for t in r.json()["trials"]:
            assert t["user_attrs"].get(key) == wanted
    else:
        p.refused(r, "user_attr")
    r = p.call("GET", "/v1/studies", params={"name": _url_text(copy_name) or "x"})
    if r.status_code != 200:
        p.refused(r, "name")
    r = p.call("GET", f"/v1/studies/{quote(_url_text(copy_name) or 'x', safe='')}/trials")
    assert r.status_code in (200, 404, 422), r.text
    # copy: the new study reads back whole, with the attributes, or does not exist
    before = p.study_count()
    r = p.call("POST", f"/v1/studies/{sid}/copy", {"name": f"{copy_name}-{uuid.uuid4().hex[:8]}",
                                                   "user_attrs": study_attrs})
    if r.status_code == 201:
        copy = p.reads(r.json()["id"])
        assert _same(copy["study"]["user_attrs"], study_attrs)
        finished = [t for t in seen["trials"].values() if t["state"] in ("complete", "failed")]
        assert sorted(json.dumps(t["user_attrs"], sort_keys=True) for t in copy["trials"].values()) == \
            sorted(json.dumps(t["user_attrs"], sort_keys=True) for t in finished)
    else:
        p.refused(r, "name")
        assert p.study_count() == before
    if enqueued is not None:  # hand it out and tell it, so that nothing is left running
        for t in p.ok("POST", f"/v1/studies/{sid}/ask", {"count": 1})["trials"]:
            p.ok("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell", {"state": "failed"})
    p.no_running(sid)


# ----------------------------------------------------------- extreme values
def _wait_for_fit(p: Probe, sid: int, timeout: float = 120.0) -> dict[str, Any]:
    """The study view once its newest fit covers every completed trial."""
    deadline = time.monotonic() + timeout
    while True:
        view = p.ok("GET", f"/v1/studies/{sid}")
        status = view["surrogate_status"]
        assert status["last_error"] is None, status
        if status["lag"] == 0 and status["snapshot_version"] and not status["fitting"] and not status["queued"]:
            return view
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def _drive(p: Probe, sid: int, n: int, outcome) -> None:
    """``n`` sequential ask/tell rounds, ``outcome(i, params)`` giving each tell's body."""
    for i in range(n):
        (t,) = p.ok("POST", f"/v1/studies/{sid}/ask", {})["trials"]
        p.ok("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell", outcome(i, t["params"]))


SCHEDULE = {"n_warmup": 4, "conformalize_from": 8, "split_from": 14, "n_candidates": 200}


def _extreme(i: int) -> float | None:
    return EXTREMES[(i // 3) % len(EXTREMES)] if i % 3 == 0 else None


def test_extreme_values_in_every_numeric_field_never_break_a_study(probe: Probe) -> None:
    p = probe
    space = {"x": {"type": "float", "low": 0, "high": 1}, "y": {"type": "float", "low": 0, "high": 1}}
    # one objective with a constraint: raw, CV+ and split fits on values up to +-1.8e308
    sid = p.ok("POST", "/v1/studies", {"name": f"extreme-{uuid.uuid4().hex[:8]}", "space": space,
                                       "constraints": ["c"], "settings": {**SCHEDULE, "ask_wait_seconds": 30}})["id"]

    def one(i: int, params: dict) -> dict:
        big = _extreme(i)
        return {"value": params["x"] - params["y"] if big is None else big,
                "constraints": [params["y"] - 0.5 if big is None else -big]}

    _drive(p, sid, 24, one)
    p.ok("POST", f"/v1/studies/{sid}/trials", {"trials": [
        {"params": {"x": 0.5, "y": 0.5}, "value": v, "constraints": [v]} for v in EXTREMES[:4]]})
    view = _wait_for_fit(p, sid)
    assert view["surrogate_status"]["method"] == "split"
    assert view["best_trial"]["value"] == -LARGEST or view["best_trial"]["value"] <= 0
    asked = p.ok("POST", f"/v1/studies/{sid}/ask", {"count": 3})["trials"]
    assert all(t["prediction"] is not None for t in asked)
    for t in asked:
        p.ok("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell", {"value": LARGEST, "constraints": [LARGEST]})
    _wait_for_fit(p, sid)
    cal = p.reads(sid) and p.ok("GET", f"/v1/studies/{sid}/calibration")
    assert cal["n"] >= 3
    p.no_running(sid)

    # several objectives: the front and its hypervolume on values up to +-1.8e308
    mo = p.ok("POST", "/v1/studies", {"name": f"extreme-mo-{uuid.uuid4().hex[:8]}", "space": space,
                                      "directions": ["minimize", "maximize"], "settings": SCHEDULE})["id"]
    _drive(p, mo, 16, lambda i, q: {"values": [q["x"], q["y"]] if _extreme(i) is None
                                    else [_extreme(i), -(_extreme(i) or 0.0)]})
    _wait_for_fit(p, mo)
    front = p.ok("GET", f"/v1/studies/{mo}/pareto")
    assert front["trials"] and front["hypervolume"] >= 0 and all(abs(v) <= LARGEST for v in front["reference_point"])
    p.reads(mo)
    p.no_running(mo)
    ref = p.call("POST", "/v1/studies", {"name": f"extreme-ref-{uuid.uuid4().hex[:8]}", "space": space,
                                         "directions": ["minimize", "minimize"],
                                         "settings": {"reference_point": [LARGEST, LARGEST]}})
    assert ref.status_code == 201, ref.text
    rid = ref.json()["id"]
    p.ok("POST", f"/v1/studies/{rid}/trials",
         {"trials": [{"params": {"x": 0.1, "y": 0.2}, "values": [-LARGEST, -LARGEST]},
                     {"params": {"x": 0.3, "y": 0.2}, "values": [LARGEST, -1.0]}]})
    assert p.ok("GET", f"/v1/studies/{rid}/pareto")["hypervolume"] == LARGEST  # saturated, not infinite

    # learning curves: reports of extreme values, with every pruner deciding on them
    for pruner in ("median", "sh", "sh+", "hb+"):
        ps = p.ok("POST", "/v1/studies", {"name": f"extreme-{pruner}-{uuid.uuid4().hex[:8]}", "space": space,
                                          "pruner": {"name": pruner, "max_resource": 9, "n_startup_trials": 1}
                                          if pruner == "median" else {"name": pruner, "max_resource": 9}})["id"]
        for i in range(6):
            (t,) = p.ok("POST", f"/v1/studies/{ps}/ask", {})["trials"]
            for step in range(1, 9):
                p.ok("POST", f"/v1/studies/{ps}/trials/{t['id']}/report",
                     {"step": step, "value": EXTREMES[(i + step) % len(EXTREMES)]})
            p.ok("POST", f"/v1/studies/{ps}/trials/{t['id']}/tell", {"value": EXTREMES[i % len(EXTREMES)]})
        p.reads(ps)
        p.no_running(ps)


def test_values_beyond_the_floats_and_wrong_shapes_are_refused_and_the_trial_stays_told_able(probe: Probe) -> None:
    p = probe
    space = {"x": {"type": "float", "low": 0, "high": 1}}
    sid = p.ok("POST", "/v1/studies", {"name": f"shapes-{uuid.uuid4().hex[:8]}", "space": space,
                                       "constraints": ["c"]})["id"]
    (t,) = p.ok("POST", f"/v1/studies/{sid}/ask", {})["trials"]
    tell = f"/v1/studies/{sid}/trials/{t['id']}/tell"
    for body, field in (({"value": 1.8e308, "constraints": [0.0]}, "value"),  # 1.8e308 parses to infinity
                        ({"value": float("nan"), "constraints": [0.0]}, "value"),
                        ({"value": [1.0, 2.0], "constraints": [0.0]}, "value"),
                        ({"value": "1.0", "constraints": [0.0]}, "value"),
                        ({"value": {"v": 1}, "constraints": [0.0]}, "value"),
                        ({"values": [1.0, 2.0], "constraints": [0.0]}, "values"),
                        ({"value": 1.0, "constraints": [0.0, 1.0]}, "constraints"),
                        ({"value": 1.0, "constraints": [float("inf")]}, "constraints"),
                        ({"value": 1.0}, "constraints"),
                        ({"state": "complete"}, "value"),
                        ({"value": 1.0, "constraints": [0.0], "state": "running"}, "state")):
        r = p.call("POST", tell, body)
        assert r.status_code == 422, (body, r.text)
        p.refused(r, field)
        assert p.ok("GET", f"/v1/studies/{sid}/trials/{t['id']}")["state"] == "running"
    p.ok("POST", tell, {"value": -LARGEST, "constraints": [LARGEST]})
    assert p.ok("GET", f"/v1/studies/{sid}")["best_trial"] is None  # infeasible
    mo = p.ok("POST", "/v1/studies", {"name": f"shapes-mo-{uuid.uuid4().hex[:8]}", "space": space,
                                      "directions": ["minimize", "minimize"]})["id"]
    (t,) = p.ok("POST", f"/v1/studies/{mo}/ask", {})["trials"]
    for body, field in (({"value": 1.0}, "value"), ({"values": [1.0]}, "values"),
                        ({"values": [1.0, 2.0, 3.0]}, "values"), ({"values": [1.0, 1e309]}, "values")):
        p.refused(p.call("POST", f"/v1/studies/{mo}/trials/{t['id']}/tell", body), field)
    p.ok("POST", f"/v1/studies/{mo}/trials/{t['id']}/tell", {"values": [LARGEST, -LARGEST]})
    p.no_running(sid)
    p.no_running(mo)


def test_nul_and_unstorable_text_in_paths_queries_and_names_answer_alike_on_both_backends(probe: Probe) -> None:
    p = probe
    name = f"nul-{uuid.uuid4().hex[:8]}"
    sid = p.ok("POST", "/v1/studies", {"name": name, "space": {"x": {"type": "float", "low": 0, "high": 1}}})["id"]
    for ref in (f"{name}%00", "%00", f"{name}%01x", "a%00b"):
        r = p.call("GET", f"/v1/studies/{ref}")
        assert r.status_code == 404 and r.json()["error"]["field"] == "study", r.text
        assert p.call("POST", f"/v1/studies/{ref}/ask", {}).status_code == 404
    for attr in ("k:\x00", "\x00:v", "k:a\x00b"):
        r = p.call("GET", f"/v1/studies/{sid}/trials", params={"user_attr": attr})
        assert r.status_code == 422 and r.json()["error"]["field"].startswith("user_attr"), r.text
    for q in ("a\x00", "\x00"):
        p.refused(p.call("GET", "/v1/studies", params={"name": q}), "name")
    for body, field in (({"name": "a\x00b", "space": {"x": {"type": "float", "low": 0, "high": 1}}}, "name"),
                        ({"name": "ok-\ud800", "space": {"x": {"type": "float", "low": 0, "high": 1}}}, "name"),
                        ({"name": f"p-{uuid.uuid4().hex[:6]}", "space": {"x\x00": {"type": "float", "low": 0,
                                                                                   "high": 1}}}, "space"),
                        ({"name": f"p-{uuid.uuid4().hex[:6]}", "space": {"c": {"type": "categorical",
                                                                                "choices": ["a\x00"]}}}, "space"),
                        ({"name": f"p-{uuid.uuid4().hex[:6]}", "space": {"x": {"type": "float", "low": 0,
                                                                                "high": 1}},
                          "constraints": ["c\x00"]}, "constraints")):
        p.refused(p.call("POST", "/v1/studies", body), field)
    p.refused(p.call("POST", f"/v1/studies/{sid}/ask", {"worker_id": "w\x00"}), "worker_id")
    p.refused(p.call("POST", f"/v1/studies/{sid}/enqueue", {"params": {"x": "\x00"}}), "params")
    p.refused(p.call("POST", f"/v1/studies/{sid}/copy", {"name": "c\x00"}), "name")
    p.reads(sid)
    p.no_running(sid)


def test_a_name_conflict_says_what_differs(probe: Probe) -> None:
    p = probe
    name = f"conflict-{uuid.uuid4().hex[:8]}"
    space = {"x": {"type": "float", "low": 0, "high": 1}}
    p.ok("POST", "/v1/studies", {"name": name, "space": space, "seed": 0})
    r = p.call("POST", "/v1/studies", {"name": name, "space": {"x": {"type": "float", "low": 0, "high": 2}},
                                       "seed": 7, "settings": {"n_warmup": 9}})
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "name_conflict" and err["field"] == "name"
    assert {d["field"]: (d["existing"], d["requested"]) for d in err["differences"]} == {
        "space.x.high": (1.0, 2.0), "seed": (0, 7), "settings.n_warmup": (15, 9)}
    for part in ("seed: 0 (existing) vs 7 (requested)", "settings.n_warmup", "space.x.high"):
        assert part in err["message"]
