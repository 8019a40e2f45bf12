"""The local fit pool: coalescing, retries after a crash, a dead worker process replaced."""

from __future__ import annotations

import os
import threading
import time

import pytest

from calibo.server.storage import Storage
from calibo.server.workers import FitPool

CALLS: list[int] = []
GATE = threading.Event()
FAILS = {"left": 0}


def slow_job(study_id: int, storage: Storage | None = None, save: bool = True) -> dict:
    CALLS.append(study_id)
    GATE.wait(10)
    return {"study_id": study_id, "status": "fitted", "n_obs": len(CALLS)}


def flaky_job(study_id: int, storage: Storage | None = None, save: bool = True) -> dict:
    CALLS.append(study_id)
    if FAILS["left"] > 0:
        FAILS["left"] -= 1
        raise ValueError("surrogate blew up")
    return {"study_id": study_id, "status": "fitted", "n_obs": 5}


def dying_job(study_id: int, storage: Storage | None = None, save: bool = True) -> dict:
    if study_id == 666:
        os._exit(3)  # the worker process dies mid-fit
    return {"study_id": study_id, "status": "fitted", "n_obs": 7}


@pytest.fixture
def storage(tmp_path):
    st = Storage(f"sqlite:///{tmp_path / 'p.db'}")
    yield st
    st.close()


def test_requests_coalesce_into_at_most_one_more_fit(storage: Storage) -> None:
    CALLS.clear()
    GATE.clear()
    pool = FitPool(storage, "", workers=0, job=slow_job)
    try:
        for _ in range(50):
            pool.request(1)
        assert pool.status(1) == {"fitting": True, "queued": True}
        GATE.set()
        assert pool.wait(1, 2, timeout=10)
        deadline = time.monotonic() + 10
        while pool.busy(1):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert CALLS == [1, 1]  # the running fit, then one for everything requested meanwhile
    finally:
        GATE.set()
        pool.close()


def test_a_failing_fit_is_recorded_and_retried(storage: Storage) -> None:
    CALLS.clear()
    FAILS["left"] = 2
    info, _ = storage.create_study("f", {}, {})
    pool = FitPool(storage, "", workers=0, retries=3, backoff=0.01, job=flaky_job)
    try:
        pool.request(info.id)
        assert pool.wait(info.id, 5, timeout=10)
        assert len(CALLS) == 3
        assert "surrogate blew up" in storage.get_study(info.id).fit_error
        FAILS["left"] = 10
        pool.request(info.id)  # gives up after the retries, and the pool stays usable
        deadline = time.monotonic() + 10
        while pool.busy(info.id):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert len(CALLS) == 3 + 4
        FAILS["left"] = 0
        pool.request(info.id)
        assert pool.wait(info.id, 5, timeout=10)
    finally:
        pool.close()


def test_a_dead_worker_process_is_replaced(storage: Storage) -> None:
    pool = FitPool(storage, storage.engine.url.render_as_string(hide_password=False), workers=1, retries=1,
                   backoff=0.01, job=dying_job)
    try:
        pool.request(666)
        deadline = time.monotonic() + 60
        while pool.busy(666):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pool.request(1)  # a fresh process pool serves the next fit
        assert pool.wait(1, 7, timeout=60)
    finally:
        pool.close()
