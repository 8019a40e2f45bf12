"""Multi-objective studies through real HTTP on SQLite and PostgreSQL: create with directions, tell
and add values, the Pareto front and hypervolume, per-objective predictions and calibration."""

from __future__ import annotations

import math

import httpx
import moocore
import numpy as np
import pytest
from test_api import FAST, assert_error, create, wait_fitted

from calibo.server.api.schemas import AskResponse, ParetoView, StudyView, TrialView

SPACE = {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(3)}


def zdt1(p: dict) -> list[float]:
    x = np.array([p[f"x{i}"] for i in range(3)])
    g = 1.0 + 9.0 * x[1:].mean()
    return [float(x[0]), float(g * (1.0 - math.sqrt(x[0] / g)))]


def mo(http: httpx.Client, **kw) -> dict:
    return create(http, space=SPACE, directions=["minimize", "maximize"], settings=FAST, **kw)


def tell(http: httpx.Client, sid: int, t: dict, values: list[float], **kw) -> httpx.Response:
    return http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"values": values, **kw})


def flip(v: list[float]) -> list[float]:  # the second objective maximised: its negation
    return [v[0], -v[1]]


def test_a_two_objective_study_asks_tells_and_keeps_its_front(http: httpx.Client) -> None:
    s = mo(http)
    sid = s["id"]
    assert s["directions"] == ["minimize", "maximize"] and s["direction"] == "minimize"
    assert s["best_trial"] is None and s["pareto"] == {"size": 0, "hypervolume": 0.0, "reference_point": None}
    told = []
    for i in range(16):
        (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
        v = flip(zdt1(t["params"]))
        r = tell(http, sid, t, v)
        assert r.status_code == 200, r.text
        view = TrialView.model_validate(r.json()).model_dump()
        assert view["values"] == v and view["value"] is None
        told.append(v)
        if i == 3:  # the same tell again changes nothing; a different one is a conflict
            assert tell(http, sid, t, v).status_code == 200
            assert_error(tell(http, sid, t, [0.0, 0.0]), 409, "trial_finished")
    wait_fitted(http, sid, 16)
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": 2}).json()
    AskResponse.model_validate(r)
    pred = r["trials"][0]["prediction"]
    assert pred["acquisition"] == "ehvi" and len(pred["objectives"]) == 2
    for o in pred["objectives"]:
        assert set(o) >= {"quantiles", "mean", "intervals"} and "points" not in o and "warp" not in o
    for t in r["trials"]:
        assert tell(http, sid, t, flip(zdt1(t["params"]))).status_code == 200
        told.append(flip(zdt1(t["params"])))
    # the front and its hypervolume, against moocore on the minimised values
    p = http.get(f"/v1/studies/{sid}/pareto").json()
    ParetoView.model_validate(p)
    Y = np.array(told) * [1, -1]
    ref = np.array(p["reference_point"]) * [1, -1]
    np.testing.assert_allclose(ref, Y.max(0) + 0.1 * np.ptp(Y, 0))
    assert p["hypervolume"] == pytest.approx(float(moocore.hypervolume(Y, ref=ref)))
    front = moocore.is_nondominated(Y)
    assert sorted(tuple(t["values"]) for t in p["trials"]) == sorted(map(tuple, np.array(told)[front].tolist()))
    h = [pt["hypervolume"] for pt in p["history"]]
    assert p["history"][-1]["trials"] == len(told) and h == sorted(h) and h[-1] == pytest.approx(p["hypervolume"])
    view = StudyView.model_validate(http.get(f"/v1/studies/{sid}").json()).model_dump()
    assert view["pareto"]["size"] == len(p["trials"])
    assert view["pareto"]["hypervolume"] == pytest.approx(p["hypervolume"])
    assert len(view["adaptive"]["objectives"]) == 1
    # per-objective calibration: the predicted trials' records, for each objective
    cal = http.get(f"/v1/studies/{sid}/calibration").json()
    predicted = sum(t["prediction"] is not None for t in http.get(f"/v1/studies/{sid}/trials").json()["trials"])
    assert cal["n"] == predicted >= 2 and [o["direction"] for o in cal["objectives"]] == ["minimize", "maximize"]
    assert all(o["n"] == predicted == len(o["cumulative_coverage"]) for o in cal["objectives"])
    assert cal["cumulative_coverage"] == cal["objectives"][0]["cumulative_coverage"]


def test_a_three_objective_study_can_ask_for_ehvi(http: httpx.Client) -> None:
    """``multi_acquisition: ehvi`` with three objectives over HTTP: asked trials are scored by EHVI,
    and the front the study keeps is the non-dominated set of what was told."""
    s = create(http, space=SPACE, directions=["minimize"] * 3, settings=FAST | {"multi_acquisition": "ehvi"})
    sid = s["id"]

    def f(p: dict) -> list[float]:
        x = np.array([p[f"x{i}"] for i in range(3)])
        g = float((x[2] - 0.5) ** 2)
        a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
        return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b), (1 + g) * math.sin(a)]

    told = []
    for _ in range(FAST["n_warmup"] + 2):
        (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
        assert tell(http, sid, t, f(t["params"])).status_code == 200
        told.append(f(t["params"]))
    wait_fitted(http, sid, len(told))
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": 2}).json()
    assert [t["prediction"]["acquisition"] for t in r["trials"]] == ["ehvi", "ehvi"]
    assert all(len(t["prediction"]["objectives"]) == 3 for t in r["trials"])
    p = http.get(f"/v1/studies/{sid}/pareto").json()
    front = moocore.is_nondominated(np.array(told))
    assert sorted(tuple(t["values"]) for t in p["trials"]) == sorted(map(tuple, np.array(told)[front].tolist()))


@pytest.mark.parametrize("options", [{}, {"scores": "normalized"}])
def test_qgp_normalized_scores_run_a_multi_objective_study(http: httpx.Client, options) -> None:
    """Normalised conformal scores over HTTP, as a multi-objective study's default and when asked
    for: the fit stores each head's spread, asks are conformalized per objective from it, and tells
    update every objective's adaptive state (ACI by default)."""
    s = create(http, space=SPACE, directions=["minimize", "maximize"],
               settings=FAST | {"surrogate_options": options})
    assert s["adaptive"]["adapter"] == "aci"
    assert s["settings"]["surrogate_options"] == {"scores": "normalized"}  # resolved and stored at create
    sid = s["id"]
    n = 0
    for _ in range(3):
        for t in http.post(f"/v1/studies/{sid}/ask", json={"count": 8}).json()["trials"]:
            assert tell(http, sid, t, flip(zdt1(t["params"]))).status_code == 200
            n += 1
        wait_fitted(http, sid, n)
    trials = http.post(f"/v1/studies/{sid}/ask", json={"count": 3}).json()["trials"]
    for t in trials:
        objs = t["prediction"]["objectives"]
        assert len(objs) == 2 and all(o["method"] != "raw" for o in objs)
        for o in objs:
            lo, hi = o["intervals"][0]["lower"], o["intervals"][0]["upper"]
            assert lo is None or hi is None or lo < hi  # None: an unbounded end (alpha below 1/(n+1))
    assert all(tell(http, sid, t, flip(zdt1(t["params"]))).status_code == 200 for t in trials)


def test_values_are_validated_naming_the_field(http: httpx.Client) -> None:
    s = mo(http)
    sid = s["id"]
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    base = f"/v1/studies/{sid}/trials/{t['id']}/tell"
    assert_error(http.post(base, json={"value": 1.0}), 422, field="value")
    assert_error(http.post(base, json={"values": [1.0]}), 422, field="values")
    assert_error(http.post(base, json={"values": [1.0, 2.0, 3.0]}), 422, field="values")
    assert_error(http.post(base, json={"values": [1.0, "x"]}), 422, field="values.1")
    assert_error(http.post(base, json={"values": [1.0, None]}), 422, field="values.1")
    assert_error(http.post(base, json={"state": "failed", "values": [1.0, 2.0]}), 422, field="values")
    assert_error(http.post(base, json={}), 422, field="values")
    assert http.get(f"/v1/studies/{sid}/trials/{t['id']}").json()["state"] == "running"  # nothing lost
    assert http.post(base, json={"state": "failed"}).json()["state"] == "failed"
    # a single-objective study takes no values and has no front
    one = create(http, space=SPACE, settings=FAST)
    (u,) = http.post(f"/v1/studies/{one['id']}/ask", json={}).json()["trials"]
    assert_error(http.post(f"/v1/studies/{one['id']}/trials/{u['id']}/tell", json={"values": [1.0, 2.0]}),
                 422, field="values")
    assert_error(http.get(f"/v1/studies/{one['id']}/pareto"), 409, "not_multi_objective", "study")
    # create: directions are bounded, and multi-objective settings need several objectives
    for body, field in (({"directions": ["minimize"]}, "directions"),
                        ({"directions": ["minimize"] * 5}, "directions"),
                        ({"directions": ["minimize", "up"]}, "directions.1"),
                        ({"directions": ["minimize"] * 4, "settings": {"multi_acquisition": "ehvi"}},
                         "settings.multi_acquisition"),
                        ({"directions": ["minimize"] * 2, "settings": {"reference_point": [1.0, 2.0, 3.0]}},
                         "settings.reference_point"),
                        ({"settings": {"reference_point": [1.0, 2.0]}}, "settings.reference_point"),
                        ({"directions": ["minimize"] * 2, "pruner": "sh"}, "pruner")):
        r = http.post("/v1/studies", json={"name": f"bad-{field}-{len(str(body))}", "space": SPACE, **body})
        assert_error(r, 422, field=field)


def test_added_trials_with_values_feed_the_front_and_the_fit(http: httpx.Client) -> None:
    s = create(http, space=SPACE, directions=["minimize", "minimize", "minimize"], constraints=["c"],
               settings={**FAST, "reference_point": [2.0, 2.0, 2.0]})
    sid = s["id"]
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(12):
        p = {f"x{i}": float(rng.random()) for i in range(3)}
        rows.append({"params": p, "values": [p["x0"], p["x1"], 1.0 - p["x0"] - p["x1"] + p["x2"]],
                     "constraints": [p["x2"] - 0.8]})
    bad = [*rows[:2], {"params": rows[2]["params"], "values": [1.0, 2.0]}]
    assert_error(http.post(f"/v1/studies/{sid}/trials", json={"trials": bad}), 422, field="trials.2.values")
    assert http.get(f"/v1/studies/{sid}").json()["trials"]["total"] == 0  # all or none
    r = http.post(f"/v1/studies/{sid}/trials", json={"trials": rows})
    assert r.status_code == 201, r.text
    wait_fitted(http, sid, 12)
    p = http.get(f"/v1/studies/{sid}/pareto").json()
    assert p["reference_point"] == [2.0, 2.0, 2.0]
    assert all(t["feasible"] for t in p["trials"])  # the infeasible ones are never on the front
    ok = [r for r in rows if r["constraints"][0] <= 0]
    Y = np.array([r["values"] for r in ok])
    assert p["hypervolume"] == pytest.approx(float(moocore.hypervolume(Y, ref=[2.0, 2.0, 2.0])))
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    pred = t["prediction"]
    assert pred["acquisition"] == "parego" and len(pred["objectives"]) == 3 and "feasibility" in pred
    r = tell(http, sid, t, [0.1, 0.2, 0.3], constraints=[-1.0])
    assert r.status_code == 200 and r.json()["feasible"] is True
    cal = http.get(f"/v1/studies/{sid}/calibration").json()
    assert len(cal["objectives"]) == 3 and len(cal["constraints"]) == 1 and cal["objectives"][2]["n"] == 1
    # a copy keeps the values
    c = http.post(f"/v1/studies/{sid}/copy", json={"name": s["name"] + "-copy"}).json()
    assert c["directions"] == ["minimize"] * 3
    assert http.get(f"/v1/studies/{c['id']}/pareto").json()["hypervolume"] == pytest.approx(
        http.get(f"/v1/studies/{sid}/pareto").json()["hypervolume"])
