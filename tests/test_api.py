"""The wire contract through real HTTP, on SQLite and on PostgreSQL (``server`` is parametrized)."""

from __future__ import annotations

import math

import httpx
import pytest
from conftest import LiveServer, unique

from calibo.server.api.schemas import AskResponse, TrialView

BRANIN = {"x1": {"type": "float", "low": -5, "high": 10}, "x2": {"type": "float", "low": 0, "high": 15}}
MIXED = {"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
         "depth": {"type": "int", "low": 1, "high": 8},
         "kind": {"type": "categorical", "choices": ["a", "b", "c"]}}
# a fast schedule: warm start 5, conformalized from 8 (CV+), split from 14
FAST = {"n_warmup": 5, "conformalize_from": 8, "split_from": 14, "n_candidates": 300}


def branin(p: dict) -> float:
    x1, x2 = p["x1"], p["x2"]
    return ((x2 - 5.1 / (4 * math.pi**2) * x1**2 + 5 / math.pi * x1 - 6) ** 2
            + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x1) + 10)


def create(http: httpx.Client, space=BRANIN, **kw) -> dict:
    body = {"name": kw.pop("name", unique()), "space": space, **kw}
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def ask(http: httpx.Client, sid: int, count: int = 1, **kw) -> list[dict]:
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": count, **kw})
    assert r.status_code == 200, r.text
    AskResponse.model_validate(r.json())
    return r.json()["trials"]


def tell(http: httpx.Client, sid: int, tid: int, **body) -> httpx.Response:
    return http.post(f"/v1/studies/{sid}/trials/{tid}/tell", json=body)


def assert_error(r: httpx.Response, status: int, code: str | None = None, field: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    # the wire contract's three keys; a name conflict adds the fields that differ
    assert set(err) - {"differences"} == {"code", "message", "field"} and err["message"]
    assert "differences" not in err or err["code"] == "name_conflict", err
    if code is not None:
        assert err["code"] == code, err
    if field is not None:
        assert err["field"] == field, err
    return err


def wait_fitted(http: httpx.Client, sid: int, n: int, timeout: float = 60.0) -> dict:
    """Poll the study view until a snapshot fitted on at least ``n`` trials is stored."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        st = http.get(f"/v1/studies/{sid}").json()["surrogate_status"]
        if st["fitted_on"] >= n:
            return st
        assert time.monotonic() < deadline, st
        time.sleep(0.05)


# ------------------------------------------------------------------ studies
def test_health(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok", "database": "ok", "fit_pool": "ok"}
    assert http.get("/livez").json() == {"status": "ok"}


def test_create_is_idempotent_and_conflicts_on_a_different_definition(http: httpx.Client) -> None:
    name = unique()
    body = {"name": name, "space": BRANIN, "direction": "minimize", "seed": 3, "settings": {"n_warmup": 7}}
    r1 = http.post("/v1/studies", json=body)
    assert r1.status_code == 201
    s = r1.json()
    assert s["name"] == name and s["seed"] == 3 and s["settings"]["n_warmup"] == 7
    assert s["surrogate"] == "qgp" and s["acquisition"] == "logei"
    assert s["trials"] == {"waiting": 0, "running": 0, "complete": 0, "failed": 0, "pruned": 0, "total": 0}
    assert s["best_trial"] is None and s["surrogate_status"]["snapshot_version"] is None
    assert [p["coverage"] for p in s["adaptive"]["pairs"]] == [0.9, 0.7, 0.5, 0.3, 0.1]
    # the same definition (spelled differently: ints for floats, defaults written out) -> 200, same id
    same = {**body, "space": {"x1": {"type": "float", "low": -5.0, "high": 10.0, "log": False},
                              "x2": BRANIN["x2"]}}
    r2 = http.post("/v1/studies", json=same)
    assert r2.status_code == 200 and r2.json()["id"] == s["id"]
    for change in ({"direction": "maximize"}, {"seed": 4}, {"settings": {"n_warmup": 8}},
                   {"space": MIXED}, {"surrogate": "qgbm"}):
        assert_error(http.post("/v1/studies", json={**body, **change}), 409, "name_conflict", "name")
    assert http.get(f"/v1/studies/{s['id']}").json()["settings"]["n_warmup"] == 7  # unchanged


def test_every_engine_setting_is_a_study_setting(http: httpx.Client) -> None:
    """What the in-process Optimizer takes, a create request takes too, and the study shows it."""
    import dataclasses

    from calibo.engine import EngineConfig
    from calibo.server.api.schemas import StudySettings

    # surrogate and acquisition are the create request's own top-level fields
    assert {f.name for f in dataclasses.fields(EngineConfig)} - set(StudySettings.model_fields) == {
        "surrogate", "acquisition"}
    chosen = {"warp": "yeo-johnson-tail", "adapter": "dtaci", "dtaci_window": 30, "conformal": "split",
              "cal_fraction": 0.3}
    r = http.post("/v1/studies", json={"name": unique(), "space": BRANIN, "settings": chosen})
    assert r.status_code == 201, r.text
    assert {k: r.json()["settings"][k] for k in chosen} == chosen
    shown = http.get(f"/v1/studies/{r.json()['id']}").json()["settings"]
    assert {k: shown[k] for k in chosen} == chosen


def test_list_get_delete(http: httpx.Client) -> None:
    a, b = create(http), create(http, MIXED, direction="maximize")
    listed = {s["id"]: s for s in http.get("/v1/studies").json()["studies"]}
    assert {a["id"], b["id"]} <= set(listed)
    assert listed[b["id"]]["direction"] == "maximize"
    assert http.get(f"/v1/studies/{a['id']}").json()["name"] == a["name"]
    t = ask(http, a["id"])[0]
    assert tell(http, a["id"], t["id"], value=1.0).status_code == 200
    r = http.delete(f"/v1/studies/{a['id']}")
    assert r.status_code == 204 and r.content == b""
    assert_error(http.get(f"/v1/studies/{a['id']}"), 404, "not_found", "study")
    assert_error(http.delete(f"/v1/studies/{a['id']}"), 404, "not_found")
    assert_error(http.get(f"/v1/studies/{a['id']}/trials"), 404, "not_found")
    assert a["id"] not in {s["id"] for s in http.get("/v1/studies").json()["studies"]}
    assert http.get(f"/v1/studies/{b['id']}").status_code == 200  # others untouched
    # the name is free again
    assert http.post("/v1/studies", json={"name": a["name"], "space": MIXED}).status_code == 201


@pytest.mark.parametrize(("body", "field"), [
    ({"space": BRANIN}, "name"),
    ({"name": "", "space": BRANIN}, "name"),
    ({"name": "x"}, "space"),
    ({"name": "x", "space": []}, "space"),
    ({"name": "x", "space": {"a": {"type": "float", "low": 2, "high": 1}}}, "space.a.low"),
    ({"name": "x", "space": {"a": {"type": "float", "low": 0, "high": 1, "log": True}}}, "space.a.low"),
    ({"name": "x", "space": {"a": {"type": "categorical", "choices": []}}}, "space.a.choices"),
    ({"name": "x", "space": {"a": {"type": "tensor"}}}, "space.a.type"),
    ({"name": "x", "space": {"a": {"type": "int", "low": 0, "high": 10**400}}}, "space.a.high"),
    ({"name": "x", "space": BRANIN, "direction": "sideways"}, "direction"),
    ({"name": "x", "space": BRANIN, "surrogate": "xgb"}, "surrogate"),
    ({"name": "x", "space": BRANIN, "acquisition": "magic"}, "acquisition"),
    ({"name": "x", "space": BRANIN, "seed": -1}, "seed"),
    ({"name": "x", "space": BRANIN, "settings": {"n_warmup": 0}}, "settings.n_warmup"),
    ({"name": "x", "space": BRANIN, "settings": {"bogus": 1}}, "settings.bogus"),
    ({"name": "x", "space": BRANIN, "settings": {"ask_wait_seconds": -1}}, "settings.ask_wait_seconds"),
    ({"name": "x", "space": BRANIN, "pruner": "bogus"}, "pruner.name"),
])
def test_bad_study_definitions_name_the_field(http: httpx.Client, body: dict, field: str) -> None:
    assert_error(http.post("/v1/studies", json=body), 422, "invalid_request", field)


def test_malformed_and_wrongly_typed_bodies_are_4xx(http: httpx.Client) -> None:
    r = http.post("/v1/studies", content=b'{"name": "x", ', headers={"content-type": "application/json"})
    assert_error(r, 400, "malformed_json", "body")
    assert_error(http.post("/v1/studies", content=b"[1, 2]", headers={"content-type": "application/json"}),
                 422, "invalid_request")
    assert_error(http.get("/v1/studies/abc"), 404, "not_found", "study")  # names are study references too
    assert_error(http.get("/v1/studies/0"), 404, "not_found", "study")
    assert_error(http.get("/v1/studies/99999999999999"), 404, "not_found", "study")
    assert_error(http.get("/v1/studies/1?by=size"), 422, "invalid_request", "by")
    assert_error(http.put("/v1/studies"), 405)
    assert_error(http.get("/v1/nothing-here"), 404)


# -------------------------------------------------------------- ask / tell
def test_a_crowd_gets_model_based_trials_once_the_warm_up_has_finished(http: httpx.Client) -> None:
    """A crowd launches the 8 warm-up trials at once; with 4 of them finished and 4 running the study
    still answers quasi-random trials, and the model takes over once all 8 are in."""
    sid = create(http, settings=FAST | {"n_warmup": 8, "ask_wait_seconds": 0}, seed=2)["id"]
    trials = ask(http, sid, 8)
    assert all(t["prediction"] is None for t in trials)
    for t in trials[:4]:
        assert tell(http, sid, t["id"], value=branin(t["params"])).status_code == 200
    assert ask(http, sid)[0]["prediction"] is None  # 4 finished of the 8 it waits for
    for t in trials[4:]:
        assert tell(http, sid, t["id"], value=branin(t["params"])).status_code == 200
    assert wait_fitted(http, sid, 8)["fitted_on"] == 8
    nxt = ask(http, sid)[0]
    assert nxt["prediction"] is not None and nxt["prediction"]["fitted_on"] == 8


def test_sequential_loop_gets_calibrated_predictions_and_adapts(http: httpx.Client) -> None:
    s = create(http, settings=FAST, seed=1)
    sid = s["id"]
    seen, methods = set(), []
    for i in range(22):
        t = ask(http, sid)[0]
        assert t["number"] == i
        key = (t["params"]["x1"], t["params"]["x2"])
        assert key not in seen
        seen.add(key)
        p = t["prediction"]
        if i < 5:
            assert p is None  # warm start: quasi-random
        else:
            assert p is not None and len(p["quantiles"]) == 10 and p["fitted_on"] == i  # fresh fit
            assert [iv["coverage"] for iv in p["intervals"]] == [0.9, 0.7, 0.5, 0.3, 0.1]
            ends = [(-math.inf if iv["lower"] is None else iv["lower"],
                     math.inf if iv["upper"] is None else iv["upper"]) for iv in p["intervals"]]
            assert all(lo <= hi for lo, hi in ends)
            # CV+'s 90% interval needs 9 scores to be bounded: on 8 it is the whole line, sent as nulls;
            # the raw quantiles are always bounded
            if p["method"] == "raw" or (p["method"] == "cv+" and i < 9):
                assert (p["intervals"][0]["upper"] is None) == (p["method"] == "cv+"), (i, p)
            assert "points" not in p and "sign" not in p
            methods.append(p["method"])
        r = tell(http, sid, t["id"], value=branin(t["params"]))
        assert r.status_code == 200 and r.json()["state"] == "complete"
        # ask and tell bypass FastAPI's response validation: their bodies must still follow the schema,
        # and a told trial reads back exactly as the tell answered it
        TrialView.model_validate(r.json())
        assert http.get(f"/v1/studies/{sid}/trials/{t['id']}").json() == r.json()
    assert methods[0] == "raw" and "cv+" in methods and methods[-1] == "split"
    view = http.get(f"/v1/studies/{sid}").json()
    assert view["trials"]["complete"] == 22 and view["trials"]["running"] == 0
    best = view["best_trial"]
    values = [t["value"] for t in http.get(f"/v1/studies/{sid}/trials", params={"limit": 100}).json()["trials"]]
    assert best["value"] == min(values)
    pairs = view["adaptive"]["pairs"]
    assert all(p["steps"] == methods.count("cv+") + methods.count("split") for p in pairs)
    assert any(p["alpha"] != p["target_alpha"] for p in pairs)  # ACI/DtACI moved
    cal = http.get(f"/v1/studies/{sid}/calibration").json()
    assert cal["n"] == 17 and len(cal["trials"]) == 17 and cal["nominal"] == [0.9, 0.7, 0.5, 0.3, 0.1]
    for row in cal["trials"]:
        for iv in row["intervals"]:  # an unbounded end (null) covers every value on its side
            assert iv["covered"] == ((iv["lower"] is None or iv["lower"] <= row["value"])
                                     and (iv["upper"] is None or row["value"] <= iv["upper"]))
    unbounded = sum(row["intervals"][0]["upper"] is None for row in cal["trials"])
    assert unbounded >= 1 and cal["summary"]["unbounded_share"][0] == unbounded / 17
    assert all(w is not None and w > 0 for w in cal["summary"]["mean_width"])  # over the bounded ones
    assert len(cal["cumulative_coverage"]) == 17 and len(cal["alpha_trajectory"]) == 17
    assert cal["conformal"]["n"] == 17 - methods.count("raw")
    assert 0 <= cal["summary"]["coverage"][0] <= 1 and len(cal["summary"]["llr"]) == 5
    assert cal["current_alpha"] == [p["alpha"] for p in pairs]


def test_maximize_tracks_the_largest_value(http: httpx.Client) -> None:
    s = create(http, direction="maximize", settings=FAST)
    for t in ask(http, s["id"], 4):
        tell(http, s["id"], t["id"], value=-branin(t["params"]))
    trials = http.get(f"/v1/studies/{s['id']}/trials").json()["trials"]
    assert http.get(f"/v1/studies/{s['id']}").json()["best_trial"]["value"] == max(t["value"] for t in trials)


def test_batch_asks_are_distinct_and_never_repeat_running_ones(http: httpx.Client) -> None:
    s = create(http, MIXED, settings=FAST)
    sid = s["id"]
    first = ask(http, sid, 8, worker_id="w1")
    assert [t["number"] for t in first] == list(range(8))
    for t in first[:6]:
        tell(http, sid, t["id"], value=t["params"]["lr"] * t["params"]["depth"])
    wait_fitted(http, sid, 6)  # two still run, so the ask would not wait for the fit itself
    second = ask(http, sid, 10, worker_id="w2")
    assert all(t["prediction"] is not None for t in second)
    configs = [tuple(sorted(t["params"].items())) for t in first + second]
    assert len(set(configs)) == len(configs)
    assert [t["number"] for t in second] == list(range(8, 18))
    page = http.get(f"/v1/studies/{sid}/trials", params={"state": "running"}).json()
    assert page["total"] == 12 and {t["worker_id"] for t in page["trials"]} == {"w1", "w2"}


def test_tell_is_idempotent_and_conflicts(http: httpx.Client) -> None:
    s = create(http)
    sid = s["id"]
    a, b, c, d = ask(http, sid, 4)
    r1 = tell(http, sid, a["id"], value=1.5)
    assert r1.status_code == 200
    r2 = tell(http, sid, a["id"], value=1.5)
    assert r2.status_code == 200 and r2.json() == r1.json()  # same tell again: same answer, no change
    assert_error(tell(http, sid, a["id"], value=2.5), 409, "trial_finished", "value")
    assert_error(tell(http, sid, a["id"], state="failed"), 409, "trial_finished", "state")
    assert tell(http, sid, b["id"], state="failed").json()["state"] == "failed"
    assert tell(http, sid, b["id"], state="failed").status_code == 200
    assert_error(tell(http, sid, b["id"], value=1.0), 409, "trial_finished")
    assert tell(http, sid, c["id"], state="pruned", value=3.0).json()["value"] == 3.0
    assert tell(http, sid, c["id"], state="pruned", value=3.0).status_code == 200
    counts = http.get(f"/v1/studies/{sid}").json()["trials"]
    assert counts == {"waiting": 0, "running": 1, "complete": 1, "failed": 1, "pruned": 1, "total": 4}
    # bad tells change nothing
    for body, field in (({"value": "1.0x"}, "value"), ({}, "value"), ({"state": "done"}, "state"),
                        ({"state": "failed", "value": 1.0}, "value"), ({"value": 1, "extra": 2}, "extra"),
                        ({"value": True}, "value")):
        assert_error(tell(http, sid, d["id"], **body), 422, "invalid_request", field)
    for raw in (b'{"value": NaN}', b'{"value": Infinity}', b'{"value": -Infinity}', b'{"value": 1e999}'):
        r = http.post(f"/v1/studies/{sid}/trials/{d['id']}/tell", content=raw,
                      headers={"content-type": "application/json"})
        assert_error(r, 422, "invalid_request", "value")
    assert http.get(f"/v1/studies/{sid}/trials/{d['id']}").json()["state"] == "running"
    assert_error(tell(http, sid, 10**9, value=1.0), 404, "not_found", "trial_id")
    other = create(http)
    assert_error(tell(http, other["id"], d["id"], value=1.0), 404, "not_found", "trial_id")  # wrong study
    assert_error(tell(http, 10**9, d["id"], value=1.0), 404, "not_found", "study")
    assert tell(http, sid, d["id"], value=0.5).status_code == 200


def test_ask_errors(http: httpx.Client) -> None:
    s = create(http)
    for body, field in (({"count": 0}, "count"), ({"count": 10**6}, "count"), ({"count": "two"}, "count"),
                        ({"worker_id": "x" * 300}, "worker_id"), ({"nope": 1}, "nope")):
        assert_error(http.post(f"/v1/studies/{s['id']}/ask", json=body), 422, "invalid_request", field)
    assert_error(http.post("/v1/studies/999999/ask", json={}), 404, "not_found", "study")
    assert len(http.post(f"/v1/studies/{s['id']}/ask").json()["trials"]) == 1  # no body: count 1


def test_a_finite_space_is_exhausted_cleanly(http: httpx.Client) -> None:
    s = create(http, {"c": {"type": "categorical", "choices": ["a", "b", "c"]}})
    trials = ask(http, s["id"], 5)
    assert sorted(t["params"]["c"] for t in trials) == ["a", "b", "c"]
    assert_error(http.post(f"/v1/studies/{s['id']}/ask", json={}), 409, "space_exhausted")


def test_heartbeat_and_stale_trials(http: httpx.Client) -> None:
    s = create(http, settings={"heartbeat_timeout_seconds": 1})
    sid = s["id"]
    a, b = ask(http, sid, 2)
    assert http.post(f"/v1/studies/{sid}/trials/{a['id']}/heartbeat").status_code == 204
    tell(http, sid, b["id"], value=1.0)
    assert_error(http.post(f"/v1/studies/{sid}/trials/{b['id']}/heartbeat"), 409, "trial_finished")
    assert_error(http.post(f"/v1/studies/{sid}/trials/999999/heartbeat"), 404, "not_found")
    import time

    time.sleep(1.3)
    ask(http, sid)  # the ask fails the silent trial
    assert http.get(f"/v1/studies/{sid}/trials/{a['id']}").json()["state"] == "failed"


def test_trial_pages(http: httpx.Client) -> None:
    s = create(http)
    sid = s["id"]
    trials = ask(http, sid, 7)
    for t in trials[:3]:
        tell(http, sid, t["id"], value=float(t["number"]))
    page = http.get(f"/v1/studies/{sid}/trials", params={"limit": 4, "offset": 2}).json()
    assert page["total"] == 7 and page["limit"] == 4 and page["offset"] == 2
    assert [t["number"] for t in page["trials"]] == [2, 3, 4, 5]
    done = http.get(f"/v1/studies/{sid}/trials", params={"state": "complete"}).json()
    assert [t["value"] for t in done["trials"]] == [0.0, 1.0, 2.0]
    assert_error(http.get(f"/v1/studies/{sid}/trials", params={"state": "zombie"}), 422, field="state")
    assert_error(http.get(f"/v1/studies/{sid}/trials", params={"limit": 0}), 422, field="limit")
    assert_error(http.get(f"/v1/studies/{sid}/trials", params={"offset": -1}), 422, field="offset")


def test_openapi_documents_the_contract(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    paths = spec["paths"]
    for p in ("/v1/studies", "/v1/studies/{study}", "/v1/studies/{study}/ask",
              "/v1/studies/{study}/trials/{trial_id}/tell", "/v1/studies/{study}/trials/{trial_id}/heartbeat",
              "/v1/studies/{study}/trials", "/v1/studies/{study}/calibration", "/v1/studies/{study}/enqueue",
              "/v1/studies/{study}/copy", "/healthz"):
        assert p in paths
    assert http.get("/docs").status_code == 200


# --------------------------------------------------------------------- auth
@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory):
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('auth') / 'a.db'}", workers=0,
                     api_tokens="w-token, r-token:read").start()
    yield srv
    srv.stop()


def test_tokens_guard_every_v1_call(auth_server: LiveServer) -> None:
    with auth_server.client() as anon:
        assert anon.get("/healthz").status_code == 200  # liveness stays open
        assert_error(anon.get("/v1/studies"), 401, "unauthorized", "authorization")
        assert_error(anon.get("/v1/studies", headers={"Authorization": "Bearer nope"}), 401, "unauthorized")
        assert_error(anon.get("/v1/studies", headers={"Authorization": "Basic w-token"}), 401)
    with auth_server.client(headers={"Authorization": "Bearer w-token"}) as w:
        s = create(w)
        assert len(ask(w, s["id"])) == 1
    with auth_server.client(headers={"Authorization": "Bearer r-token"}) as r:
        assert r.get(f"/v1/studies/{s['id']}").status_code == 200
        assert r.get(f"/v1/studies/{s['id']}/trials").status_code == 200
        assert_error(r.post(f"/v1/studies/{s['id']}/ask", json={}), 403, "forbidden")
        assert_error(r.delete(f"/v1/studies/{s['id']}"), 403, "forbidden")
        assert_error(r.post("/v1/studies", json={"name": unique(), "space": BRANIN}), 403)
