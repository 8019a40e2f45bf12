"""The holes a probe found after hardening, each shut, through real HTTP on SQLite and PostgreSQL.

Each test here failed before its fix: extreme outcomes in studies of two or more parameters made every
ask answer 500; a tell after the trial expired stored a JSON ``null`` record that broke the study's
calibration and the server's metrics; a conditional child enqueued without its parent blocked every
ask; the ``user_attr`` filter refused or missed keys on SQLite; a long non-ASCII name was created
and then unreachable; PostgreSQL gave keys back in another order and ``-0.0`` with another sign; a
repeated tell with other attributes answered 200 and dropped them; an enqueued trial could not be
taken back. (Races of copy and create are in tests/test_stateful.py.)
"""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import httpx
import pytest
from conftest import LiveServer, unique
from test_api import assert_error, create

from calibo import Client
from calibo import errors as client_errors

XY = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "y": {"type": "float", "low": 0.0, "high": 1.0}}
COND = {"kind": {"type": "categorical", "choices": ["a", "b"]},
        "z": {"type": "float", "low": 0.0, "high": 1.0, "condition": {"parent": "kind", "values": ["b"]}}}
SCHEDULE = {"n_warmup": 4, "conformalize_from": 8, "split_from": 14, "n_candidates": 200}
LARGEST = 1.7976931348623157e308


def _finite_everywhere(obj: object) -> None:
    json.dumps(obj, allow_nan=False)  # raises on NaN or infinity


def _reads(http: httpx.Client, sid: int) -> None:
    """Every read of a study a client or the dashboard makes answers 200."""
    for path in ("", "/trials?limit=1000", "/calibration", "/importance", "/curves"):
        r = http.get(f"/v1/studies/{sid}{path}")
        assert r.status_code == 200, (path, r.text[:500])
        _finite_everywhere(r.json())
    assert http.get("/metrics").status_code == 200
    assert http.get("/v1/studies", params={"limit": 1000}).status_code == 200


@pytest.mark.parametrize("shape", ["two_parameters", "two_objectives", "constraint"])
def test_alternating_extreme_outcomes_keep_every_ask_answering(http: httpx.Client, shape: str) -> None:
    """Outcomes of both signs near +-1.8e308, every one of them: the output warp's scale overflowed
    to infinity and every prediction from then on held one, so storing the ask failed."""
    body: dict = {"settings": {**SCHEDULE, "ask_wait_seconds": 30}}
    if shape == "two_objectives":
        body["directions"] = ["minimize", "maximize"]
    if shape == "constraint":
        body["constraints"] = ["c"]
    sid = create(http, XY, **body)["id"]
    for i in range(20):
        r = http.post(f"/v1/studies/{sid}/ask", json={})
        assert r.status_code == 200, (i, r.text[:500])
        (t,) = r.json()["trials"]
        _finite_everywhere(t)
        big = LARGEST if i % 2 else -1e308
        tell: dict = {"values": [big, -big]} if shape == "two_objectives" else {"value": big}
        if shape == "constraint":
            tell = {"value": t["params"]["x"], "constraints": [big]}
        r = http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json=tell)
        assert r.status_code == 200, r.text
    asked = http.post(f"/v1/studies/{sid}/ask", json={"count": 3})
    assert asked.status_code == 200, asked.text
    assert any(t["prediction"] is not None for t in asked.json()["trials"])  # the model chose, on finite numbers
    _reads(http, sid)


def test_a_tell_after_expiry_is_recorded_and_every_read_still_answers(http: httpx.Client) -> None:
    sid = create(http, XY, settings={"heartbeat_timeout_seconds": 1})["id"]
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    time.sleep(1.5)
    assert_error(http.post(f"/v1/studies/{sid}/trials/{t['id']}/heartbeat"), 409, "trial_expired")
    r = http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 0.5})
    assert r.status_code == 200 and r.json()["state"] == "complete", r.text
    _reads(http, sid)
    assert http.get(f"/v1/studies/{sid}").json()["trials"]["complete"] == 1


def test_a_conditional_child_is_enqueued_only_with_its_parent(http: httpx.Client) -> None:
    sid = create(http, COND)["id"]
    assert_error(http.post(f"/v1/studies/{sid}/enqueue", json={"params": {"z": 0.5}}), 422, field="params.z")
    assert_error(http.post(f"/v1/studies/{sid}/enqueue", json={"params": {"kind": "a", "z": 0.5}}), 422,
                 field="params.z")
    r = http.post(f"/v1/studies/{sid}/enqueue", json={"params": {"kind": "b", "z": 0.5}})
    assert r.status_code == 201, r.text
    for _ in range(3):  # nothing left behind that an ask cannot hand out
        assert http.post(f"/v1/studies/{sid}/ask", json={}).status_code == 200
    assert http.get(f"/v1/studies/{sid}").json()["trials"]["waiting"] == 0


def test_an_enqueued_trial_can_be_taken_back_before_an_ask_hands_it_out(http: httpx.Client) -> None:
    sid = create(http, XY)["id"]
    first = http.post(f"/v1/studies/{sid}/enqueue", json={"params": {"x": 0.1, "y": 0.2}}).json()
    second = http.post(f"/v1/studies/{sid}/enqueue", json={"params": {"x": 0.3}}).json()
    assert http.delete(f"/v1/studies/{sid}/trials/{first['id']}").status_code == 204
    assert_error(http.delete(f"/v1/studies/{sid}/trials/{first['id']}"), 404, field="trial_id")
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    assert t["id"] == second["id"] and t["params"]["x"] == 0.3  # the next in the queue
    assert_error(http.delete(f"/v1/studies/{sid}/trials/{t['id']}"), 409, "trial_not_waiting", "trial_id")
    listed = http.get(f"/v1/studies/{sid}/trials").json()
    assert [x["id"] for x in listed["trials"]] == [second["id"]] and listed["total"] == 1


def test_a_skipped_enqueue_answers_the_earliest_matching_trial(http: httpx.Client) -> None:
    """Several trials hold the values (queued twice, then one handed out and told): the skipped
    enqueue answers the earliest on both backends. PostgreSQL reads an updated row after the others,
    and the answer was the later trial there."""
    sid = create(http, XY)["id"]
    params = {"x": 0.25, "y": 0.75}
    first = http.post(f"/v1/studies/{sid}/enqueue", json={"params": params}).json()
    second = http.post(f"/v1/studies/{sid}/enqueue", json={"params": params, "skip_if_exists": False}).json()
    assert second["number"] == first["number"] + 1
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    assert t["id"] == first["id"]
    assert http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 1.0}).status_code == 200
    for partial in (params, {"x": 0.25}):
        again = http.post(f"/v1/studies/{sid}/enqueue", json={"params": partial, "skip_if_exists": True})
        assert again.status_code == 200 and again.json()["id"] == first["id"], again.text


def test_the_client_dequeues_and_a_retry_finds_it_done(server: LiveServer) -> None:
    with Client(server.url) as client:
        study = client.create_study(unique(), XY)
        rec = study.enqueue({"x": 0.5, "y": 0.5})
        study.dequeue(rec)
        assert study.trials(state="waiting") == []
        with pytest.raises(client_errors.NotFound):
            study.dequeue(rec)  # a first call that finds nothing says so


KEYS = ['a"b', "a\\b", "é", "\U0001F600", "a.b", "a[0]", "a'b", "$", "k\u2028"]


def test_the_user_attr_filter_finds_any_key_on_both_backends(http: httpx.Client) -> None:
    sid = create(http, XY)["id"]
    for i, k in enumerate(KEYS):
        r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.1, "y": 0.2}, "value": float(i),
                                                          "user_attrs": {k: "v", "n": 5}})
        assert r.status_code == 201, r.text
    for i, k in enumerate(KEYS):
        r = http.get(f"/v1/studies/{sid}/trials", params={"user_attr": f"{k}:v"})
        assert r.status_code == 200, (k, r.text)
        assert [t["value"] for t in r.json()["trials"]] == [float(i)], k
    # a string attribute matches, a number whose text is the same does not (on either backend)
    assert http.get(f"/v1/studies/{sid}/trials", params={"user_attr": "n:5"}).json()["total"] == 0


def test_a_name_create_accepts_is_reachable_by_name(http: httpx.Client) -> None:
    for name in ["漢" * 255, "\U0001F600" * 255, "é/" * 127]:
        s = http.post("/v1/studies", json={"name": name, "space": XY})
        assert s.status_code in (200, 201), s.text
        got = http.get(f"/v1/studies/{quote(name, safe='')}")
        assert got.status_code == 200 and got.json()["id"] == s.json()["id"], got.text[:300]
        assert http.delete(f"/v1/studies/{quote(name, safe='')}").status_code == 204
    assert_error(http.post("/v1/studies", json={"name": "漢" * 256, "space": XY}), 422, field="name")


def test_keys_come_back_in_the_order_written(http: httpx.Client) -> None:
    space = {"zz": {"type": "float", "low": 0, "high": 1}, "a": {"type": "int", "low": 0, "high": 3},
             "mmm": {"type": "categorical", "choices": ["p", "q"]}}
    attrs = {"zzz": 1, "b": 2, "aa": {"y": 1, "x": 2}}
    s = create(http, space, user_attrs=attrs)
    sid = s["id"]
    assert list(s["space"]) == ["zz", "a", "mmm"]
    got = http.get(f"/v1/studies/{sid}").json()
    assert list(got["space"]) == ["zz", "a", "mmm"] and json.dumps(got["user_attrs"]) == json.dumps(attrs)
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    assert list(t["params"]) == ["zz", "a", "mmm"]
    http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 1.0, "user_attrs": attrs})
    read = http.get(f"/v1/studies/{sid}/trials/{t['id']}").json()
    assert list(read["params"]) == ["zz", "a", "mmm"] and json.dumps(read["user_attrs"]) == json.dumps(attrs)


def test_negative_zero_reads_back_as_it_was_answered(http: httpx.Client) -> None:
    sid = create(http, {"x": {"type": "float", "low": -1, "high": 1}})["id"]
    added = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": -0.0}, "value": -0.0,
                                                          "user_attrs": {"u": -0.0, "l": [-0.0]}})
    assert added.status_code == 201, added.text
    (view,) = added.json()["trials"]
    read = http.get(f"/v1/studies/{sid}/trials/{view['id']}").json()
    for got in (view, read):  # answered and read back the same, with the sign SQLite can keep
        assert json.dumps([got["params"], got["value"], got["user_attrs"]]) == \
            json.dumps([{"x": 0.0}, 0.0, {"u": 0.0, "l": [0.0]}])


def test_a_repeated_tell_with_other_attributes_is_a_conflict_naming_them(http: httpx.Client) -> None:
    sid = create(http, XY)["id"]
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    tell = f"/v1/studies/{sid}/trials/{t['id']}/tell"
    assert http.post(tell, json={"value": 1.0, "user_attrs": {"a": 1, "b": [1, 2]}}).status_code == 200
    assert http.post(tell, json={"value": 1.0, "user_attrs": {"a": 1}}).status_code == 200  # a retry, a subset
    assert http.post(tell, json={"value": 1.0, "user_attrs": {"a": 1.0, "b": [1, 2]}}).status_code == 200
    err = assert_error(http.post(tell, json={"value": 1.0, "user_attrs": {"a": 2, "c": 3}}), 409,
                       "trial_finished", "user_attrs")
    assert "'a'" in err["message"] and "'c'" in err["message"]
    assert_error(http.post(tell, json={"value": 1.0, "user_attrs": {"a": True}}), 409, field="user_attrs")
    assert http.get(f"/v1/studies/{sid}/trials/{t['id']}").json()["user_attrs"] == {"a": 1, "b": [1, 2]}


def test_add_trials_names_a_bad_row_by_its_index_in_the_call_and_says_where_to_resume(server: LiveServer) -> None:
    rows = [{"params": {"x": 0.5, "y": i / 2000}, "value": float(i)} for i in range(1500)]
    rows[1200] = {"params": {"x": 7.0, "y": 0.5}, "value": 1.0}
    with Client(server.url) as client:
        study = client.create_study(unique(), XY)
        with pytest.raises(client_errors.InvalidRequest) as e:
            study.add_trials(rows)
        assert e.value.field == "trials.1200.params.x", e.value
        assert e.value.stored == 1000 and len(e.value.added) == 1000
        assert "rows[1000:]" in str(e.value)
        assert client.get_study(study.id)["trials"]["complete"] == 1000
        rows[1200]["params"]["x"] = 0.7
        study.add_trials(rows[e.value.stored:])
        assert client.get_study(study.id)["trials"]["complete"] == 1500
        assert [t.number for t in study.trials()][-1] == 1499
        # a chunk over the server's bound is sent in bounded requests: no row twice, none skipped
        other = client.create_study(unique(), XY)
        client.add_trials(other.id, rows, chunk=5000)
        assert client.get_study(other.id)["trials"]["complete"] == 1500
