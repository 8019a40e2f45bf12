"""The thin client against a live uvicorn server, sync and async; and against real sockets
where no server listens: a wrong port, and a server that stops after answering."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import threading
import time

import pytest
from conftest import LiveServer, free_port, unique
from test_api import BRANIN, FAST, branin

from calibo import AsyncClient, Client, Conflict, ConnectionFailed, InvalidRequest, NotFound


def test_sync_client_round_trip(live_server: LiveServer) -> None:
    with Client(live_server.url) as c:
        assert c.health() == {"status": "ok", "database": "ok", "fit_pool": "ok"}
        name = unique()
        study = c.create_study(name, BRANIN, seed=5, settings=FAST)
        assert c.create_study(name, BRANIN, seed=5, settings=FAST).id == study.id  # idempotent
        with pytest.raises(Conflict) as e:
            c.create_study(name, BRANIN, seed=6, settings=FAST)
        assert e.value.code == "name_conflict" and e.value.field == "name"
        with pytest.raises(InvalidRequest) as e:
            c.create_study(unique(), {"x": {"type": "float", "low": 1, "high": 0}})
        assert e.value.field == "space.x.low"
        trials = c.ask(study.id, count=3, worker_id="t")
        assert len({tuple(t.params.items()) for t in trials}) == 3
        for t in trials:
            c.tell(study.id, t.id, branin(t.params))
        c.tell(study.id, trials[0].id, branin(trials[0].params))  # idempotent retry
        with pytest.raises(Conflict):
            c.tell(study.id, trials[0].id, 123.0)
        # one worker: each ask waits for the fit on the trials before it, so these are predicted
        done = c.optimize(study, branin, n_trials=6, n_workers=1)
        assert all(t["prediction"] is not None for t in done[2:])  # from the 5th told trial on
        done += c.optimize(study, branin, n_trials=6, n_workers=3)
        assert len(done) == 12 and all(t["state"] == "complete" for t in done)
        view = c.get_study(study.id)
        assert view["trials"]["complete"] == 15
        assert len(list(c.iter_trials(study.id, page_size=4))) == 15
        assert c.calibration(study.id)["n"] > 0
        c.delete_study(study.id)
        with pytest.raises(NotFound):
            c.get_study(study.id)


def test_async_client_round_trip(live_server: LiveServer) -> None:
    async def main() -> None:
        async with AsyncClient(live_server.url) as c:
            study = await c.create_study(unique(), BRANIN, settings=FAST)
            trials = await c.ask(study.id, count=2)
            await asyncio.gather(*(c.tell(study.id, t.id, branin(t.params)) for t in trials))

            async def objective(p: dict) -> float:
                await asyncio.sleep(0)
                return branin(p)

            done = await c.optimize(study, objective, n_trials=8, n_workers=4)
            assert len(done) == 8
            view = await c.get_study(study.id)
            assert view["trials"]["complete"] == 10 and view["best_trial"] is not None
            assert [s["id"] for s in await c.list_studies() if s["id"] == study.id] == [study.id]

    asyncio.run(main())


def test_study_handle_names_enqueue_add_and_copy(live_server: LiveServer, tmp_path) -> None:
    with Client(live_server.url) as c:
        name = f"handle/{unique()}"
        study = c.create_study(name, BRANIN, seed=2, settings=FAST, constraints=["budget"],
                               user_attrs={"git": "abc"})
        assert study.constraints == ["budget"] and study.user_attrs == {"git": "abc"}
        same = c.load_study(name)  # by name, with a slash in it
        assert same.id == study.id and c.load_study(study.id).name == name
        with pytest.raises(NotFound):
            c.load_study("no such study")
        queued = study.enqueue({"x1": 2.0, "x2": 3.0}, user_attrs={"why": "baseline"})
        assert queued.state == "waiting" and queued.origin == "enqueued"
        assert study.enqueue({"x1": 2.0, "x2": 3.0}).id == queued.id  # skip_if_exists
        first = study.ask(user_attrs={"host": "h1"})
        assert first.id == queued.id and first.params == {"x1": 2.0, "x2": 3.0}
        assert first.origin == "enqueued" and first.user_attrs == {"why": "baseline", "host": "h1"}
        done = study.tell(first, branin(first.params), constraints=[first.params["x1"] - 5.0],
                          user_attrs={"run": "r1"})
        assert done.feasible and done.user_attrs == {"why": "baseline", "host": "h1", "run": "r1"}
        with pytest.raises(InvalidRequest) as e:
            study.tell(study.ask(), 1.0)  # a constrained study's tell needs its constraints
        assert e.value.field == "constraints"
        # trials made elsewhere: a CSV (text cells read by the study's space) and a JSON-lines file
        csv_file = tmp_path / "old.csv"
        csv_file.write_text("x1,x2,value,constraint.budget,user_attrs.source\n1.5,2.5,4.2,-1,csv\n-3,12,20.5,3,csv\n")
        added = study.add_trials(csv_file)
        assert [t.value for t in added] == [4.2, 20.5] and added[0].origin == "added"
        assert added[0].constraints == [-1.0] and added[0].user_attrs == {"source": "csv"}
        jl = tmp_path / "old.jsonl"
        jl.write_text('{"params": {"x1": 9.0, "x2": 1.0}, "value": 5.0, "constraints": [4.0]}\n'
                      '{"params": {"x1": 8.0, "x2": 1.0}, "state": "failed"}\n')
        assert [t.state for t in study.add_trials(jl)] == ["complete", "failed"]
        flat = study.add_trials([{"x1": 3.1, "x2": 2.2, "value": 1.0, "constraint.budget": -2.0}])
        assert flat[0].value == 1.0
        with pytest.raises(InvalidRequest) as e:
            study.add_trials([{"params": {"x1": 1.0}, "value": 1.0, "constraints": [0.0]}])
        assert e.value.field == "trials.0.params.x2"
        best = study.best_trial
        assert best.value == 1.0 and best.feasible  # the best feasible: 4.2 and 1.0 are, 5.0 is not
        assert {t.origin for t in study.trials()} == {"enqueued", "asked", "added"}
        assert len(study.trials(origin="added")) == 5
        copy = study.copy(f"{name}-copy")
        assert copy.name == f"{name}-copy" and len(copy.trials()) == 6  # every finished trial
        assert copy.best_value == 1.0


def test_async_handle_enqueue_and_names(live_server: LiveServer) -> None:
    async def main() -> None:
        async with AsyncClient(live_server.url) as c:
            name = unique("async-handle")
            study = await c.create_study(name, BRANIN, settings=FAST)
            again = await c.load_study(name)
            assert again.id == study.id
            await study.enqueue({"x1": 1.0})
            t = await study.ask()
            assert t.params["x1"] == 1.0
            rec = await study.tell(t, branin(t.params))
            assert rec.origin == "enqueued"
            added = await study.add_trials([{"params": {"x1": 0.5, "x2": 0.5}, "value": 30.0}])
            assert added[0].origin == "added"
            assert (await study.best_value()) == min(rec.value, 30.0)

    asyncio.run(main())


def test_multi_objective_study_through_the_client(live_server: LiveServer, tmp_path) -> None:
    def two(p: dict) -> list[float]:
        return [branin(p), (p["x1"] - 2.0) ** 2 + (p["x2"] - 3.0) ** 2]

    with Client(live_server.url) as c:
        study = c.create_study(unique(), BRANIN, directions=["minimize", "minimize"], settings=FAST)
        assert study.directions == ["minimize", "minimize"]
        t = study.ask()
        done = study.tell(t, two(t.params))
        assert done.values == two(t.params) and done.value is None
        with pytest.raises(InvalidRequest) as e:
            study.tell(study.ask(), 1.0)
        assert e.value.field == "value"
        csv_file = tmp_path / "mo.csv"
        csv_file.write_text("x1,x2,values.0,values.1\n1.5,2.5,4.2,0.5\n-3,12,20.5,106\n")
        added = study.add_trials(csv_file)
        assert [a.values for a in added] == [[4.2, 0.5], [20.5, 106.0]]
        study.optimize(two, n_trials=8, n_workers=2)
        front = study.pareto()
        assert front.trials and front.hypervolume > 0 and len(front.reference_point) == 2
        assert front.history[-1][0] == study.refresh().view["trials"]["complete"]
        assert {x.id for x in study.best_trials} == {x.id for x in front.trials}
        with pytest.raises(RuntimeError):  # several objectives: the front is the best, as in Optuna
            study.best_trial  # noqa: B018
    async def run() -> None:
        async with AsyncClient(live_server.url) as ac:
            s = await ac.create_study(unique(), BRANIN, directions=["minimize", "maximize"], settings=FAST)
            t = await s.ask()
            await s.tell(t, [1.0, 2.0])
            assert [x.values for x in (await s.pareto()).trials] == [[1.0, 2.0]]

    asyncio.run(run())


# --------------------------------------------------------------------------- honest waits
def test_a_wrong_port_fails_within_seconds_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with Client(url) as c:
        start = time.monotonic()
        with pytest.raises(ConnectionFailed) as info:
            c.health()
        with pytest.raises(ConnectionFailed) as posted:
            c.create_study(unique(), BRANIN)
        elapsed = time.monotonic() - start
    assert elapsed < 10  # two calls; each used to wait out the 60 s deadline
    assert info.value.attempts <= 3 and posted.value.attempts <= 3
    assert f"GET {url}/healthz: ConnectError" in str(info.value)
    assert f"POST {url}/v1/studies: ConnectError" in str(posted.value)
    assert f"no answer from {url} yet" in str(info.value)


def test_async_a_wrong_port_fails_within_seconds_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def main() -> ConnectionFailed:
        async with AsyncClient(url) as c:
            with pytest.raises(ConnectionFailed) as info:
                await c.ask(1)
            return info.value

    start = time.monotonic()
    error = asyncio.run(main())
    assert time.monotonic() - start < 10
    assert error.attempts <= 3 and f"POST {url}/v1/studies/1/ask" in str(error)


class Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_after_an_answer_an_outage_is_retried_to_the_deadline_with_a_warning_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with Client(url, retry_deadline=2.0, backoff=0.05) as c:
        assert c.health() == {"status": "ok"}
        server.shutdown()
        server.server_close()  # the port now refuses connections
        thread.join(10)
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="calibo.client"), \
                pytest.raises(ConnectionFailed) as info:
            c.health()
        elapsed = time.monotonic() - start
    assert 1.9 <= elapsed < 30  # the whole deadline, not the quick give-up of a wrong URL
    warnings = [r.getMessage() for r in caplog.records if r.name == "calibo.client"]
    assert info.value.attempts >= 4 and len(warnings) == info.value.attempts - 1
    for n, message in enumerate(warnings, start=1):
        assert message.startswith(f"GET {url}/healthz: ConnectError")
        assert f"; retry {n} in " in message
    assert "gave up after" in str(info.value) and "no answer" not in str(info.value)
