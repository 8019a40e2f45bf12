"""A study's space grows: new parameters (conditional or not), new choices, wider ranges.

The engine (``SearchSpace.grow``) decides what growth is and encodes a trial told before a parameter
existed with that parameter inactive; the service stores a grown space under the study's lock
(``PATCH /v1/studies/{study}/space``), refits on it and never serves a snapshot of the old space;
the client has ``grow_space``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import LiveServer, unique
from test_api import assert_error

from calibo import AsyncClient, Client
from calibo.engine import EngineConfig, ParamError, SearchSpace, SpaceError, fit, select
from calibo.engine.space import INACTIVE
from calibo.engine.state import StudyState

BASE = {"x": {"type": "float", "low": 0.0, "high": 1.0},
        "kind": {"type": "categorical", "choices": ["a", "b"]}}
# a new numeric parameter, a new choice of "kind", and a new int active only under that new choice
GROWTH = {"y": {"type": "float", "low": -1.0, "high": 1.0},
          "kind": {"type": "categorical", "choices": ["a", "b", "c"]},
          "depth": {"type": "int", "low": 1, "high": 4, "condition": {"parent": "kind", "values": ["c"]}}}


def objective(p: dict[str, Any]) -> float:
    return (p["x"] - 0.3) ** 2 + 0.5 * p.get("y", 0.0) ** 2 + {"a": 0.0, "b": 0.4, "c": 0.1}[p["kind"]] \
        + 0.05 * p.get("depth", 0)


# ------------------------------------------------------------------ engine
def test_growth_keeps_the_existing_parameters_and_marks_the_new_ones_grown() -> None:
    grown = SearchSpace.from_dict(BASE).grow({**GROWTH, "x": {"type": "float", "low": -1.0, "high": 1.0}})
    d = grown.to_dict()
    assert list(d) == ["x", "kind", "y", "depth"]  # existing columns first, in place; new ones appended
    assert d["x"] == {"type": "float", "low": -1.0, "high": 1.0, "log": False}  # widened, not grown
    assert d["kind"]["choices"] == ["a", "b", "c"] and "grown" not in d["kind"]
    assert d["y"]["grown"] is True and d["depth"]["grown"] is True
    assert d["depth"]["condition"] == {"parent": "kind", "values": ["c"]}
    # a categorical's new choices go after the existing ones, whatever order they are given in
    again = SearchSpace.from_dict(BASE).grow({"kind": {"type": "categorical", "choices": ["c", "b", "a"]}})
    assert again.to_dict()["kind"]["choices"] == ["a", "b", "c"]
    # an ordinal's new choices go where they are given, the existing ones keeping their order
    ordinal = SearchSpace.from_dict({"w": {"type": "ordinal", "choices": [16, 64]}})
    assert ordinal.grow({"w": {"type": "ordinal", "choices": [16, 32, 64]}}).to_dict()["w"]["choices"] == [16, 32, 64]
    # a condition met under more parent values: the parameter is grown (trials under them lack it)
    cond = SearchSpace.from_dict({**BASE, "z": {"type": "float", "low": 0, "high": 1,
                                                "condition": {"parent": "kind", "values": ["a"]}}})
    wider = cond.grow({"z": {"type": "float", "low": 0, "high": 1,
                             "condition": {"parent": "kind", "values": ["a", "b"]}}})
    assert wider.to_dict()["z"]["condition"]["values"] == ["a", "b"] and wider.to_dict()["z"]["grown"] is True
    # the same definition again changes nothing
    assert grown.grow(GROWTH) == grown and SearchSpace.from_dict(BASE).grow(BASE) == SearchSpace.from_dict(BASE)


COND = {**BASE, "z": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "kind", "values": ["a"]}},
        "w": {"type": "ordinal", "choices": [16, 32, 64]},
        "lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True}}


@pytest.mark.parametrize(("change", "field"), [
    ({"x": None}, "space.x"),  # removing a parameter
    ({"x": {"type": "int", "low": 0, "high": 1}}, "space.x.type"),
    ({"x": {"type": "float", "low": 0.1, "high": 1.0}}, "space.x.low"),  # narrowing
    ({"x": {"type": "float", "low": 0.0, "high": 0.9}}, "space.x.high"),
    ({"lr": {"type": "float", "low": 1e-3, "high": 1.0}}, "space.lr.log"),
    ({"kind": {"type": "categorical", "choices": ["a", "c"]}}, "space.kind.choices"),  # removing a choice
    ({"kind": {"type": "ordinal", "choices": ["a", "b"]}}, "space.kind.type"),
    ({"w": {"type": "ordinal", "choices": [32, 16, 64]}}, "space.w.choices"),  # reordering an ordinal
    ({"x": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "kind", "values": ["a"]}}},
     "space.x.condition"),  # making a parameter conditional
    ({"z": {"type": "float", "low": 0, "high": 1}}, "space.z.condition"),  # dropping a condition
    ({"z": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "w", "values": [16]}}},
     "space.z.condition.parent"),
    ({"z": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "kind", "values": ["b"]}}},
     "space.z.condition.values"),
    ({"new": {"type": "float", "low": 1, "high": 0}}, "space.new.low"),  # a new parameter is checked as at create
    ({"new": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "nope", "values": [1]}}},
     "space.new.condition.parent"),
    ({"nope": None}, "space.nope"),
    ({}, "space"),
])
def test_anything_but_growth_is_refused_naming_the_field(change: dict, field: str) -> None:
    with pytest.raises(SpaceError) as info:
        SearchSpace.from_dict(COND).grow(change)
    assert info.value.field == field, (info.value.field, info.value.message)


def test_the_bounds_hold_after_growth() -> None:
    space = SearchSpace.from_dict({f"p{i}": {"type": "float", "low": 0, "high": 1} for i in range(128)})
    with pytest.raises(SpaceError, match="at most 128 parameters"):
        space.grow({"one_more": {"type": "float", "low": 0, "high": 1}})


def test_a_configuration_may_lack_a_grown_parameter_and_not_an_original_one() -> None:
    space = SearchSpace.from_dict(BASE).grow(GROWTH)
    assert space.validate({"x": 0.5, "kind": "a"}) == {"x": 0.5, "kind": "a"}  # told before the growth
    assert space.validate({"x": 0.5, "kind": "c", "y": 0.0, "depth": 2})["depth"] == 2
    with pytest.raises(ParamError) as info:
        space.validate({"kind": "a", "y": 0.0})
    assert info.value.field == "x"
    with pytest.raises(ParamError, match="inactive") as info:
        space.validate({"x": 0.5, "kind": "a", "y": 0.0, "depth": 2})  # depth is active only under "c"
    assert info.value.field == "depth"
    # a grown parameter absent is inactive, as are the parameters conditional on it
    tree = SearchSpace.from_dict(BASE).grow({
        "model": {"type": "categorical", "choices": ["lin", "tree"]},
        "leaves": {"type": "int", "low": 2, "high": 64, "condition": {"parent": "model", "values": ["tree"]}}})
    assert tree.validate({"x": 0.1, "kind": "b"}) == {"x": 0.1, "kind": "b"}
    with pytest.raises(ParamError, match="inactive"):
        tree.validate({"x": 0.1, "kind": "b", "leaves": 8})


def test_a_trial_told_before_the_growth_is_encoded_with_the_new_parameter_inactive() -> None:
    space = SearchSpace.from_dict(BASE).grow(GROWTH)
    old, new = {"x": 0.5, "kind": "a"}, {"x": 0.5, "kind": "a", "y": 0.0}
    u = space.to_unit([old, new])
    j = space.names.index("y")
    assert u[0, j] == INACTIVE and u[1, j] == 0.5
    assert space.key(old) != space.key(new)  # not the same configuration
    f = space.features(u)
    sl = space._feature_slices[j]
    assert f[0, sl].tolist() == [0.5, 0.0] and f[1, sl].tolist() == [0.5, 1.0]  # coordinate, activity indicator
    assert space.from_unit(u) == [old, new]
    # what the engine makes from an old trial (a mutation) holds the new parameter: asks always do
    kids = space.mutate(u[:1], 40, np.random.default_rng(0))
    assert (kids[:, j] >= 0).all()
    for config in space.from_unit(kids):
        assert "y" in config and ("depth" in config) == (config["kind"] == "c")


def test_a_grown_space_fits_and_selects_with_the_old_trials_holding_the_new_parameter_inactive() -> None:
    rng = np.random.default_rng(3)
    old_space = SearchSpace.from_dict(BASE)
    before = [dict(p) for p in old_space.from_unit(old_space.sample(14, 3))]
    space = old_space.grow(GROWTH)
    after = [dict(p) for p in space.from_unit(space.sample_uniform(8, rng))]
    assert all("y" in p for p in after)
    obs = [(p, objective(p)) for p in before + after]
    config = EngineConfig.from_dict({"n_warmup": 5, "n_candidates": 400})
    snap = fit(obs, space, config, seed=3)
    j = space.names.index("y")
    assert (snap.observed[:14, j] == INACTIVE).all() and (snap.observed[14:, j] >= 0).all()
    assert snap.candidates.shape[1] == space.dim and (snap.candidates[:, j] >= 0).all()
    picks = select(snap, StudyState.initial(config, 3), space, config, count=4, asked=len(obs))
    assert len(picks) == 4
    for s in picks:
        assert s.prediction is not None
        assert space.validate(s.params) == s.params and "y" in s.params
        assert ("depth" in s.params) == (s.params["kind"] == "c")


# ------------------------------------------------------------------ REST (SQLite and PostgreSQL)
SETTINGS = {"n_warmup": 4, "conformalize_from": 50, "n_candidates": 300}


def _create(http: httpx.Client, space: dict = BASE, **kw: Any) -> dict:
    r = http.post("/v1/studies", json={"name": unique("grow"), "space": space, "seed": 5, "settings": SETTINGS, **kw})
    assert r.status_code == 201, r.text
    return r.json()


def _run(http: httpx.Client, sid: int, n: int) -> list[dict]:
    """``n`` sequential asks, each told the objective's value."""
    out = []
    for _ in range(n):
        r = http.post(f"/v1/studies/{sid}/ask")
        assert r.status_code == 200, r.text
        t = r.json()["trials"][0]
        r = http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": objective(t["params"])})
        assert r.status_code == 200, r.text
        out.append(t)
    return out


def _trials(http: httpx.Client, sid: int) -> list[dict]:
    r = http.get(f"/v1/studies/{sid}/trials", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return r.json()["trials"]


def test_growth_through_rest_keeps_the_told_trials_and_asks_hold_the_new_parameters(http: httpx.Client) -> None:
    sid = _create(http)["id"]
    _run(http, sid, 6)
    before = _trials(http, sid)
    r = http.patch(f"/v1/studies/{sid}/space", json={"space": GROWTH})
    assert r.status_code == 200, r.text
    view = r.json()
    assert list(view["space"]) == ["x", "kind", "y", "depth"]
    assert view["space"]["kind"]["choices"] == ["a", "b", "c"] and view["space"]["y"]["grown"] is True
    # no fit of the new space yet: the old space's snapshots are gone (asks never get their candidates)
    assert view["surrogate_status"]["snapshot_version"] is None and view["surrogate_status"]["fitted_on"] == 0
    # the same growth again: 200, nothing changes
    again = http.patch(f"/v1/studies/{sid}/space", json={"space": GROWTH})
    assert again.status_code == 200 and again.json()["space"] == view["space"]
    # the trials already told read back unchanged (values and parameters: no new parameter invented)
    assert _trials(http, sid) == before
    # every ask after the growth holds the new parameter, and the conditional one exactly under its value;
    # a sequential ask waits for the refit on the new space, so these come with predictions
    asked = _run(http, sid, 10)
    # the new choice comes when the model tries it: up to 30 asks, whatever path the fits take on this machine
    while not any(t["params"]["kind"] == "c" for t in asked) and len(asked) < 30:
        asked += _run(http, sid, 1)
    for t in asked:
        assert "y" in t["params"] and ("depth" in t["params"]) == (t["params"]["kind"] == "c"), t
    assert any(t["params"]["kind"] == "c" for t in asked)
    assert all(t["prediction"] is not None for t in asked[1:])
    status = http.get(f"/v1/studies/{sid}").json()["surrogate_status"]
    assert status["snapshot_version"] is not None and status["fitted_on"] >= 6
    # a trial evaluated elsewhere may lack the new parameter (as the trials told before it), not an original one
    r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.2, "kind": "a"}, "value": 1.0})
    assert r.status_code == 201, r.text
    assert_error(http.post(f"/v1/studies/{sid}/trials", json={"params": {"kind": "a", "y": 0.1}, "value": 1.0}),
                 422, field="trials.0.params.x")
    # a study whose calibration and importance read old and new trials together
    assert http.get(f"/v1/studies/{sid}/calibration").status_code == 200
    names = {p["param"] for p in http.get(f"/v1/studies/{sid}/importance").json()["importances"]}
    assert {"x", "kind", "y"} <= names


def test_an_enqueued_configuration_evaluated_after_a_growth_is_taken_off_the_queue(http: httpx.Client) -> None:
    """The keys of the waiting trials are recomputed with the others: an enqueued configuration (with
    skip_if_exists) that a trial finishes with after the growth is dropped, not handed out."""
    sid = _create(http)["id"]
    r = http.post(f"/v1/studies/{sid}/enqueue", json={"params": {"x": 0.7, "kind": "b"}})
    assert r.status_code == 201, r.text
    queued = r.json()["id"]
    assert http.patch(f"/v1/studies/{sid}/space", json={"space": GROWTH}).status_code == 200
    r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.7, "kind": "b"}, "value": 1.0})
    assert r.status_code == 201, r.text
    asked = http.post(f"/v1/studies/{sid}/ask").json()["trials"][0]
    assert asked["id"] != queued and "y" in asked["params"]
    assert http.get(f"/v1/studies/{sid}/trials", params={"state": "waiting"}).json()["trials"] == []


@pytest.mark.parametrize(("change", "field"), [
    ({"x": None}, "space.x"),
    ({"x": {"type": "int", "low": 0, "high": 1}}, "space.x.type"),
    ({"x": {"type": "float", "low": 0.25, "high": 1.0}}, "space.x.low"),
    ({"x": {"type": "float", "low": 0.0, "high": 0.5}}, "space.x.high"),
    ({"kind": {"type": "categorical", "choices": ["a"]}}, "space.kind.choices"),
    ({"x": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "kind", "values": ["a"]}}},
     "space.x.condition"),
    ({"y": {"type": "float", "low": 2.0, "high": 1.0}}, "space.y.low"),
    ({"y": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.1}}, "space.y.step"),  # unknown key
    ({"y": {"type": "vector", "low": 0.0, "high": 1.0}}, "space.y.type"),
])
def test_anything_but_growth_is_a_422_naming_the_field_and_changes_nothing(http: httpx.Client, change: dict,
                                                                           field: str) -> None:
    study = _create(http)
    r = http.patch(f"/v1/studies/{study['id']}/space", json={"space": change})
    err = assert_error(r, 422, field=field)
    assert err["code"] in ("invalid_request", "validation_error"), err
    assert http.get(f"/v1/studies/{study['id']}").json()["space"] == study["space"]


def test_the_body_is_checked_and_the_route_takes_the_name(http: httpx.Client) -> None:
    study = _create(http)
    assert_error(http.patch(f"/v1/studies/{study['id']}/space", json={"space": {}}), 422, field="space")
    assert_error(http.patch(f"/v1/studies/{study['id']}/space", json={"add": GROWTH}), 422)
    assert_error(http.patch("/v1/studies/2147483000/space", json={"space": GROWTH}), 404)
    r = http.patch(f"/v1/studies/{study['name']}/space", json={"space": {"y": GROWTH["y"]}})
    assert r.status_code == 200 and "y" in r.json()["space"], r.text


def test_a_growth_racing_asks_and_tells_is_one_or_the_other(http: httpx.Client) -> None:
    """Asks and tells in four threads while the space grows twice: every answer is 2xx, every trial is a
    configuration of the final space, and each trial asked after the growths holds the new parameters."""
    sid = _create(http)["id"]
    errors: list[str] = []
    stop = threading.Event()

    def work() -> None:
        with httpx.Client(base_url=str(http.base_url), timeout=60) as c:
            while not stop.is_set():
                r = c.post(f"/v1/studies/{sid}/ask")
                if r.status_code != 200:
                    errors.append(r.text)
                    return
                t = r.json()["trials"][0]
                r = c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": objective(t["params"])})
                if r.status_code != 200:
                    errors.append(r.text)
                    return

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        _wait_for_trials(http, sid, 8)
        assert http.patch(f"/v1/studies/{sid}/space", json={"space": {"y": GROWTH["y"]}}).status_code == 200
        _wait_for_trials(http, sid, 16)
        r = http.patch(f"/v1/studies/{sid}/space", json={"space": {"kind": GROWTH["kind"], "depth": GROWTH["depth"]}})
        assert r.status_code == 200, r.text
        _wait_for_trials(http, sid, 24)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not errors, errors[:3]
    space = SearchSpace.from_dict(http.get(f"/v1/studies/{sid}").json()["space"])
    for t in _trials(http, sid):
        assert space.validate(t["params"]) == t["params"]
    after = _run(http, sid, 3)
    assert all("y" in t["params"] and ("depth" in t["params"]) == (t["params"]["kind"] == "c") for t in after)


def _wait_for_trials(http: httpx.Client, sid: int, n: int) -> None:
    """Until the study has ``n`` finished trials (the workers run meanwhile); fails after a minute."""
    import time

    deadline = time.monotonic() + 120
    while http.get(f"/v1/studies/{sid}").json()["trials"]["complete"] < n:
        assert time.monotonic() < deadline, f"fewer than {n} trials after 120 s"
        time.sleep(0.05)


def test_another_server_process_serves_the_grown_space(database_url: str, servers: list[LiveServer]) -> None:
    """Two servers on one database, each with its own cache of the study's definition and snapshots:
    a growth through one is what the other's next ask, add and calibration read."""
    a = LiveServer(database_url, workers=0).start()
    servers.append(a)
    b = LiveServer(database_url, workers=0).start()
    servers.append(b)
    with a.client() as ca, b.client() as cb:
        sid = _create(ca)["id"]
        _run(ca, sid, 5)
        _run(cb, sid, 3)  # b caches the definition and the snapshot of the old space
        r = ca.patch(f"/v1/studies/{sid}/space", json={"space": GROWTH})
        assert r.status_code == 200, r.text
        asked = _run(cb, sid, 4)
        assert all("y" in t["params"] for t in asked), asked
        r = cb.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.1, "kind": "c", "y": 0.0, "depth": 2},
                                                       "value": 0.5})
        assert r.status_code == 201, r.text
        assert cb.get(f"/v1/studies/{sid}/calibration").status_code == 200


# ------------------------------------------------------------------ the client
def test_the_client_grows_a_space(live_server: LiveServer) -> None:
    with Client(live_server.url) as client:
        study = client.create_study(unique("grow"), BASE, seed=1, settings=SETTINGS)
        grown = client.grow_space(study.id, {"y": GROWTH["y"]})
        assert "y" in grown.space and grown.space["y"]["grown"] is True
        assert study.grow_space({"kind": GROWTH["kind"]}) is study and study.space["kind"]["choices"][-1] == "c"
        from calibo.errors import InvalidRequest

        with pytest.raises(InvalidRequest) as err:
            study.grow_space({"x": None})
        assert err.value.field == "space.x"
        assert "y" in study.ask().params

    async def run() -> None:
        async with AsyncClient(live_server.url) as client:
            study = await client.create_study(unique("grow"), BASE, seed=1, settings=SETTINGS)
            grown = await client.grow_space(study.name, {"y": GROWTH["y"]})
            assert grown.id == study.id and "y" in grown.space
            await study.grow_space({"depth": {**GROWTH["depth"], "condition": {"parent": "kind", "values": ["b"]}}})
            assert study.space["depth"]["condition"]["values"] == ["b"]

    asyncio.run(run())
