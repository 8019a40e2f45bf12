"""Studies as users expect them, through real HTTP on SQLite and PostgreSQL: names in every route,
enqueued and added trials, copies, conditional spaces, outcome constraints and user attributes."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import httpx
import pytest
from conftest import unique
from test_api import BRANIN, FAST, assert_error, branin, create, wait_fitted

from calibo.server.api.schemas import AskResponse, TrialView

SVM = {
    "kernel": {"type": "categorical", "choices": ["linear", "rbf", "poly"]},
    "C": {"type": "float", "low": 1e-3, "high": 1e3, "log": True},
    "gamma": {"type": "float", "low": 1e-4, "high": 10.0, "log": True,
              "condition": {"parent": "kernel", "values": ["rbf", "poly"]}},
    "degree": {"type": "int", "low": 2, "high": 5, "condition": {"parent": "kernel", "values": ["poly"]}},
}


def path(name: str) -> str:
    return f"/v1/studies/{quote(name, safe='')}"


def test_every_route_takes_the_study_name(http: httpx.Client) -> None:
    name = f"tuning/svc é {unique()}"  # a slash, a space, non-ASCII
    s = create(http, name=name, settings=FAST)
    base = path(name)
    assert "%2F" in base
    assert http.get(base).json()["id"] == s["id"]
    (t,) = http.post(f"{base}/ask", json={}).json()["trials"]
    assert t["study_id"] == s["id"]
    assert http.post(f"{base}/trials/{t['id']}/heartbeat").status_code == 204
    assert http.post(f"{base}/trials/{t['id']}/report", json={"step": 1, "value": 2.0}).status_code == 200
    assert http.post(f"{base}/trials/{t['id']}/tell", json={"value": 1.5}).json()["value"] == 1.5
    assert http.get(f"{base}/trials/{t['id']}").json()["state"] == "complete"
    assert http.get(f"{base}/trials").json()["total"] == 1
    assert http.get(f"{base}/calibration").status_code == 200
    assert http.get(f"{base}/curves").json()["total"] == 1
    # a study whose name is made of digits: the id wins, by=name reaches it
    digits = str(10**9 + 7)
    d = create(http, name=digits)
    assert http.get(f"/v1/studies/{digits}?by=name").json()["id"] == d["id"]
    assert_error(http.get(f"/v1/studies/{digits}"), 404, "not_found", "study")
    assert_error(http.get(path("no such study")), 404, "not_found", "study")
    for bad in (".", ".."):
        assert_error(http.post("/v1/studies", json={"name": bad, "space": BRANIN}), 422, field="name")
    assert http.delete(base).status_code == 204
    assert_error(http.get(base), 404, "not_found", "study")


def test_enqueued_trials_go_first_in_order_once_each(http: httpx.Client) -> None:
    s = create(http, settings=FAST)
    base = f"/v1/studies/{s['id']}"
    r1 = http.post(f"{base}/enqueue", json={"params": {"x1": 1.0, "x2": 2.0}, "user_attrs": {"why": "default"}})
    assert r1.status_code == 201 and r1.json()["state"] == "waiting"
    again = http.post(f"{base}/enqueue", json={"params": {"x1": 1.0, "x2": 2.0}})
    assert again.status_code == 200 and again.json()["id"] == r1.json()["id"]  # skip_if_exists
    dup = http.post(f"{base}/enqueue", json={"params": {"x1": 1.0, "x2": 2.0}, "skip_if_exists": False})
    assert dup.status_code == 201 and dup.json()["id"] != r1.json()["id"]
    part = http.post(f"{base}/enqueue", json={"params": {"x1": -4.5}})
    assert part.status_code == 201 and part.json()["params"] == {"x1": -4.5}
    assert http.get(f"/v1/studies/{s['id']}").json()["trials"]["waiting"] == 3
    assert_error(http.post(f"{base}/enqueue", json={"params": {"x9": 1}}), 422, field="params.x9")
    assert_error(http.post(f"{base}/enqueue", json={"params": {"x1": 99.0}}), 422, field="params.x1")
    r = http.post(f"{base}/ask", json={"count": 4}).json()
    AskResponse.model_validate(r)
    a, b, c, d = r["trials"]
    assert [t["id"] for t in (a, b, c)] == [r1.json()["id"], dup.json()["id"], part.json()["id"]]
    assert a["params"] == {"x1": 1.0, "x2": 2.0} and a["origin"] == "enqueued" and a["prediction"] is None
    assert a["user_attrs"] == {"why": "default"}
    assert c["params"]["x1"] == -4.5 and 0 <= c["params"]["x2"] <= 15  # the rest was chosen
    assert "origin" not in d
    assert_error(http.post(f"{base}/trials/{a['id']}/tell", json={"value": "x"}), 422, field="value")
    view = http.post(f"{base}/trials/{a['id']}/tell", json={"value": branin(a["params"])}).json()
    TrialView.model_validate(view)
    assert view["origin"] == "enqueued" and view["state"] == "complete"
    listed = http.get(f"{base}/trials", params={"origin": "enqueued"}).json()
    assert listed["total"] == 3


def test_ask_sets_user_attrs_on_the_trials_it_hands_out(http: httpx.Client) -> None:
    s = create(http, settings=FAST)
    base = f"/v1/studies/{s['id']}"
    q = http.post(f"{base}/enqueue", json={"params": {"x1": 1.0, "x2": 2.0}, "user_attrs": {"why": "default"}}).json()
    r = http.post(f"{base}/ask", json={"count": 2, "user_attrs": {"run": "r7"}}).json()
    queued, fresh = r["trials"]
    assert queued["id"] == q["id"] and queued["user_attrs"] == {"why": "default", "run": "r7"}
    assert fresh["user_attrs"] == {"run": "r7"}
    for t in (queued, fresh):
        assert http.get(f"{base}/trials/{t['id']}").json()["user_attrs"] == t["user_attrs"]
    assert http.get(f"{base}/trials", params={"user_attr": "run:r7"}).json()["total"] == 2
    big = {f"k{i}": i for i in range(65)}
    assert_error(http.post(f"{base}/ask", json={"user_attrs": big}), 422, field="user_attrs")
    assert_error(http.post(f"{base}/ask", json={"user_attrs": [1]}), 422, field="user_attrs")
    assert http.get(f"{base}/trials").json()["total"] == 2  # nothing asked by the refused asks


@pytest.mark.parametrize("workers", [32])
def test_concurrent_workers_each_get_distinct_enqueued_trials(http: httpx.Client, server, workers: int) -> None:
    s = create(http, settings=FAST)
    base = f"/v1/studies/{s['id']}"
    ids = [http.post(f"{base}/enqueue", json={"params": {"x1": -5 + 0.4 * i, "x2": 0.3 * i}}).json()["id"]
           for i in range(workers)]
    barrier = threading.Barrier(workers)

    def worker(_: int) -> list[int]:
        with server.client() as c:
            barrier.wait()
            return [t["id"] for t in c.post(f"{base}/ask", json={}).json()["trials"]]

    with ThreadPoolExecutor(workers) as pool:
        got = [i for r in pool.map(worker, range(workers)) for i in r]
    assert sorted(got) == sorted(ids)  # every enqueued trial handed out exactly once, none lost
    assert http.get(base).json()["trials"]["waiting"] == 0


def test_added_trials_feed_the_fit_and_the_best_but_not_the_calibration(http: httpx.Client) -> None:
    s = create(http, settings=FAST, user_attrs={"owner": "me"})
    assert s["user_attrs"] == {"owner": "me"}
    base = f"/v1/studies/{s['id']}"
    one = {"params": {"x1": 3.0, "x2": 2.0}, "value": branin({"x1": 3.0, "x2": 2.0}), "user_attrs": {"run": "a"}}
    r = http.post(f"{base}/trials", json=one)
    assert r.status_code == 201 and r.json()["trials"][0]["origin"] == "added"
    rows = [{"params": {"x1": -5 + i, "x2": 1.0 + i}, "value": branin({"x1": -5 + i, "x2": 1.0 + i}),
             "user_attrs": {"run": "b"}} for i in range(8)] + [{"params": {"x1": 9.0, "x2": 9.0}, "state": "failed"}]
    assert len(http.post(f"{base}/trials", json={"trials": rows}).json()["trials"]) == 9
    # all or none: one bad row stores nothing and names itself
    bad = [rows[0], {"params": {"x1": 1.0}, "value": 2.0}]
    assert_error(http.post(f"{base}/trials", json={"trials": bad}), 422, field="trials.1.params.x2")
    assert_error(http.post(f"{base}/trials", json={"trials": [{"params": {"x1": 1.0, "x2": 1.0}}]}),
                 422, field="trials.0.value")
    view = http.get(base).json()
    assert view["trials"]["complete"] == 9 and view["trials"]["failed"] == 1
    assert view["best_trial"]["value"] == min(t["value"] for t in [one, *rows[:8]])
    assert http.get(f"{base}/trials", params={"user_attr": "run:b"}).json()["total"] == 8
    assert http.get(f"{base}/trials", params={"user_attr": ["run:b", "nope:x"]}).json()["total"] == 0
    wait_fitted(http, s["id"], 9)  # the added trials reach the surrogate
    (t,) = http.post(f"{base}/ask", json={}).json()["trials"]
    assert t["prediction"] is not None
    cal = http.get(f"{base}/calibration").json()
    assert cal["n"] == 0  # nothing added had a prediction: no calibration record, no adapted alpha
    assert all(p["steps"] == 0 for p in view["adaptive"]["pairs"])
    # copy: the same definition and every finished trial, under a new name
    name = unique("copy")
    c = http.post(f"{base}/copy", json={"name": name})
    assert c.status_code == 201
    copied = c.json()
    assert copied["space"] == view["space"] and copied["trials"]["complete"] == 9
    assert copied["best_trial"]["value"] == view["best_trial"]["value"]
    assert http.get(f"{path(name)}/trials", params={"origin": "copied"}).json()["total"] == 10
    assert_error(http.post(f"{base}/copy", json={"name": name}), 409, "name_conflict", "name")


def test_conditional_spaces_ask_and_take_only_active_parameters(http: httpx.Client) -> None:
    s = create(http, space=SVM, settings=FAST)
    assert s["space"]["gamma"]["condition"] == {"parent": "kernel", "values": ["rbf", "poly"]}
    base = f"/v1/studies/{s['id']}"
    trials = http.post(f"{base}/ask", json={"count": 12}).json()["trials"]
    for t in trials:
        p = t["params"]
        assert ("gamma" in p) == (p["kernel"] != "linear") and ("degree" in p) == (p["kernel"] == "poly")
    bad = http.post(f"{base}/trials", json={"params": {"kernel": "linear", "C": 1.0, "gamma": 0.1}, "value": 1.0})
    assert_error(bad, 422, field="trials.0.params.gamma")
    assert_error(http.post("/v1/studies", json={"name": unique(), "space": {
        "a": {"type": "categorical", "choices": ["x"], "condition": {"parent": "b", "values": [1]}},
        "b": {"type": "int", "low": 0, "high": 2, "condition": {"parent": "a", "values": ["x"]}}}}),
        422, field="space.a.condition")


def test_constraints_need_values_and_the_best_is_feasible(http: httpx.Client) -> None:
    s = create(http, settings=FAST, constraints=["budget"])
    assert s["constraints"] == ["budget"]
    base = f"/v1/studies/{s['id']}"
    trials = http.post(f"{base}/ask", json={"count": 10}).json()["trials"]
    assert_error(http.post(f"{base}/trials/{trials[0]['id']}/tell", json={"value": 1.0}), 422, field="constraints")
    assert_error(http.post(f"{base}/trials/{trials[0]['id']}/tell", json={"value": 1.0, "constraints": [1, 2]}),
                 422, field="constraints")
    best_feasible = None
    for t in trials:
        v = branin(t["params"])
        c = t["params"]["x1"] + t["params"]["x2"] - 8.0  # feasible below x1 + x2 = 8
        r = http.post(f"{base}/trials/{t['id']}/tell", json={"value": v, "constraints": [c]}).json()
        assert r["feasible"] == (c <= 0) and r["constraints"] == [c]
        if c <= 0 and (best_feasible is None or v < best_feasible):
            best_feasible = v
    view = http.get(base).json()
    assert view["best_trial"]["value"] == best_feasible and view["best_trial"]["constraints"][0] <= 0
    wait_fitted(http, s["id"], 10)
    t = http.post(f"{base}/ask", json={}).json()["trials"][0]
    pred = t["prediction"]
    assert 0 <= pred["feasibility"] <= 1 and len(pred["constraints"]) == 1
    assert "points" not in pred["constraints"][0]
    c = t["params"]["x1"] + t["params"]["x2"] - 8.0
    http.post(f"{base}/trials/{t['id']}/tell", json={"value": branin(t["params"]), "constraints": [c]})
    cal = http.get(f"{base}/calibration").json()
    assert cal["constraints"][0]["name"] == "budget" and cal["constraints"][0]["n"] == cal["n"] >= 1
    view = http.get(base).json()
    assert len(view["adaptive"]["constraints"]) == 1
