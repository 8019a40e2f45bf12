"""Multi-fidelity over HTTP, on SQLite and PostgreSQL: report, pruners, pruned tells and their errors."""

from __future__ import annotations

import time

import httpx
from conftest import unique
from test_api import BRANIN, assert_error


def _study(http: httpx.Client, pruner: object, **settings) -> int:
    r = http.post("/v1/studies", json={"name": unique("mf"), "space": BRANIN, "pruner": pruner,
                                       "settings": {"ask_wait_seconds": 0, **settings}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(http: httpx.Client, sid: int) -> int:
    return http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]["id"]


def _report(http: httpx.Client, sid: int, tid: int, step: int, value: float) -> httpx.Response:
    return http.post(f"/v1/studies/{sid}/trials/{tid}/report", json={"step": step, "value": value})


def test_pruner_in_the_study_definition(http: httpx.Client) -> None:
    sid = _study(http, "sh+")
    view = http.get(f"/v1/studies/{sid}").json()
    assert view["pruner"]["name"] == "sh+" and view["pruner"]["reduction_factor"] == 3
    sid = _study(http, {"name": "hb", "max_resource": 81, "reduction_factor": 4, "window": 5})
    p = http.get(f"/v1/studies/{sid}").json()["pruner"]
    assert (p["name"], p["max_resource"], p["reduction_factor"], p["window"]) == ("hb", 81, 4, 5)
    plain = http.post("/v1/studies", json={"name": unique("mf"), "space": BRANIN}).json()
    assert plain["pruner"]["name"] == "none"


def test_bad_pruners_answer_422_naming_the_field(http: httpx.Client) -> None:
    for pruner, field in [("nope", "pruner.name"), ({"name": "sh", "window": 0}, "pruner.window"),
                          ({"name": "sh", "bogus": 1}, "pruner.bogus"), (3, "pruner"),
                          ({"name": "sh", "min_resource": 9, "max_resource": 3}, "pruner.max_resource"),
                          ({"name": "median", "feed_pruned": "yes"}, "pruner.feed_pruned")]:
        r = http.post("/v1/studies", json={"name": unique("mf"), "space": BRANIN, "pruner": pruner})
        assert_error(r, 422, field=field)


def test_sh_prunes_a_bad_curve_and_the_pruned_tell_finishes_it(http: httpx.Client) -> None:
    sid = _study(http, {"name": "sh", "max_resource": 9})
    good = []
    for i in range(6):  # six trials reach rung 3 with good values
        tid = _ask(http, sid)
        for step in range(1, 4):
            assert _report(http, sid, tid, step, 0.1 * i + 1.0 / step).status_code == 200
        good.append(tid)
    bad = _ask(http, sid)
    assert _report(http, sid, bad, 1, 50.0).json() == {"should_prune": True}  # rung 1: last of 7
    r = http.post(f"/v1/studies/{sid}/trials/{bad}/tell", json={"state": "pruned", "value": 50.0})
    assert r.status_code == 200 and r.json()["state"] == "pruned" and r.json()["value"] == 50.0
    # the best trial goes on; a pruned trial takes no more reports
    assert _report(http, sid, good[0], 4, 0.2).json() == {"should_prune": False}
    assert_error(_report(http, sid, bad, 2, 49.0), 409, "trial_finished", "trial_id")
    counts = http.get(f"/v1/studies/{sid}").json()["trials"]
    assert counts["pruned"] == 1 and counts["complete"] == 0


def test_reports_are_idempotent_per_step(http: httpx.Client) -> None:
    sid = _study(http, {"name": "sh", "max_resource": 9})
    first = _ask(http, sid)
    answer = _report(http, sid, first, 1, 3.0).json()
    for _ in range(5):  # others change the picture at rung 1 ...
        tid = _ask(http, sid)
        _report(http, sid, tid, 1, 1.0)
    # ... but the same report again answers what it answered (stored), and changes nothing
    assert _report(http, sid, first, 1, 3.0).json() == answer
    assert_error(_report(http, sid, first, 1, 2.0), 409, "step_reported", "value")
    # a finished trial still answers a repeated report the same, and refuses a new step
    http.post(f"/v1/studies/{sid}/trials/{first}/tell", json={"value": 3.0})
    assert _report(http, sid, first, 1, 3.0).json() == answer
    assert_error(_report(http, sid, first, 2, 3.0), 409, "trial_finished")


def test_report_errors(http: httpx.Client) -> None:
    sid = _study(http, "median")
    tid = _ask(http, sid)
    url = f"/v1/studies/{sid}/trials/{tid}/report"
    assert_error(http.post(url, content=b'{"step": 1, "value": NaN}', headers={"content-type": "application/json"}),
                 422, field="value")
    assert_error(http.post(url, json={"step": -1, "value": 1.0}), 422, field="step")
    assert_error(http.post(url, json={"step": 1.5, "value": 1.0}), 422, field="step")
    assert_error(http.post(url, json={"step": 1}), 422, field="value")
    assert_error(http.post(url, json={"step": 1, "value": "x"}), 422, field="value")
    assert_error(http.post(f"/v1/studies/{sid}/trials/999999/report", json={"step": 1, "value": 1.0}),
                 404, field="trial_id")
    assert_error(http.post(f"/v1/studies/999999/trials/{tid}/report", json={"step": 1, "value": 1.0}), 404)
    # nothing stored by the refused ones: the first valid report at step 1 is accepted
    assert _report(http, sid, tid, 1, 1.0).status_code == 200


def test_no_pruner_never_prunes_and_reports_are_heartbeats(http: httpx.Client) -> None:
    sid = _study(http, None)
    tid = _ask(http, sid)
    before = http.get(f"/v1/studies/{sid}/trials/{tid}").json()["heartbeat_at"]
    time.sleep(0.05)
    assert all(_report(http, sid, tid, s, 100.0 * s).json() == {"should_prune": False} for s in range(1, 6))
    assert http.get(f"/v1/studies/{sid}/trials/{tid}").json()["heartbeat_at"] > before


def _fitted_on(http: httpx.Client, sid: int, want: int, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        got = http.get(f"/v1/studies/{sid}").json()["surrogate_status"]["fitted_on"]
        if got >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_pruned_values_feed_the_surrogate_only_when_asked(http: httpx.Client) -> None:
    """By default a pruned trial's last value does not reach the fit (it is a low-fidelity value,
    not the outcome); with ``feed_pruned`` it does."""
    fitted = {}
    for feed in (False, True):
        sid = _study(http, {"name": "median", "feed_pruned": feed}, n_warmup=4)
        for i in range(6):
            tid = _ask(http, sid)
            state = "pruned" if i in (1, 3) else "complete"
            assert http.post(f"/v1/studies/{sid}/trials/{tid}/tell",
                             json={"state": state, "value": float(i)}).status_code == 200
        fitted[feed] = _fitted_on(http, sid, 6 if feed else 4)
    assert fitted == {False: 4, True: 6}


def test_client_optimize_prunes_through_the_server(http: httpx.Client) -> None:
    """The client's optimize hands a two-parameter objective a reporter; the server's hyperband
    stops the poor curves, which end pruned with their last value, and the rest complete."""
    from calibo import Client, TrialPruned

    def objective(params: dict, reporter) -> float:
        final = (params["x1"] - 3) ** 2 / 50 + (params["x2"] - 2) ** 2 / 100
        value = final
        for epoch in range(1, 10):
            value = final + 1.0 / epoch
            if reporter.report(epoch, value):
                raise TrialPruned()
        return value

    with Client(str(http.base_url)) as c:
        study = c.create_study(unique("mf"), BRANIN, pruner={"name": "sh", "max_resource": 9}, seed=1)
        done = c.optimize(study, objective, n_trials=24, n_workers=3)
    states = [t["state"] for t in done]
    assert len(done) == 24 and states.count("pruned") >= 8 and states.count("complete") >= 3
    for t in done:
        if t["state"] == "pruned":  # told with its last reported value
            assert t["value"] is not None
    view = http.get(f"/v1/studies/{study.id}").json()
    assert view["trials"]["pruned"] == states.count("pruned")


def test_fed_pruned_values_end_the_warm_up(http: httpx.Client) -> None:
    """With feed_pruned, pruned values count towards the warm-up: past it the asks come from the
    model even though no trial completed (most trials of a pruned study never do)."""
    sid = _study(http, {"name": "sh", "max_resource": 9, "feed_pruned": True}, n_warmup=4)
    for i in range(5):
        tid = _ask(http, sid)
        assert http.post(f"/v1/studies/{sid}/trials/{tid}/tell",
                         json={"state": "pruned", "value": float(i)}).status_code == 200
    assert _fitted_on(http, sid, 5) == 5
    trial = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
    assert trial["prediction"] is not None
    assert http.get(f"/v1/studies/{sid}").json()["surrogate_status"]["lag"] == 0


def test_curves_endpoint_pages_the_reported_trials(http: httpx.Client) -> None:
    sid = _study(http, None)
    tids = []
    for i in range(3):
        tid = _ask(http, sid)
        for step in range(1, 4 + i):
            _report(http, sid, tid, step, float(i * 10 + step))
        tids.append(tid)
    _ask(http, sid)  # a trial with no report is not listed
    page = http.get(f"/v1/studies/{sid}/curves").json()
    assert page["total"] == 3 and [c["trial_id"] for c in page["curves"]] == tids
    assert page["curves"][2]["steps"] == [1, 2, 3, 4, 5] and page["curves"][2]["values"][0] == 21.0
    page = http.get(f"/v1/studies/{sid}/curves", params={"limit": 1, "offset": 1}).json()
    assert [c["trial_id"] for c in page["curves"]] == [tids[1]] and page["total"] == 3
    assert_error(http.get("/v1/studies/999999/curves"), 404)
    assert_error(http.get(f"/v1/studies/{sid}/curves", params={"limit": 0}), 422, field="limit")
