"""The thin client against a live uvicorn server, sync and async."""

from __future__ import annotations

import asyncio

import pytest
from conftest import LiveServer, unique
from test_api import BRANIN, FAST, branin

from calibo import AsyncClient, Client, Conflict, InvalidRequest, NotFound


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
