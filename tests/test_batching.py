"""Group commit under real thread contention."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from service.batching import GroupCommit


def test_every_caller_gets_its_own_result_and_batches_form_under_contention() -> None:
    seen: list[list[int]] = []
    running = threading.Lock()

    def run(key, items):
        assert running.acquire(blocking=False), "two batches of one key at once"
        try:
            seen.append(list(items))
            time.sleep(0.002)  # like a transaction: others queue meanwhile
            return [(key, i * 10) for i in items]
        finally:
            running.release()

    gc = GroupCommit(run, max_batch=8)
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda i: gc("k", i), range(400)))
    assert results == [("k", i * 10) for i in range(400)]
    assert sorted(i for b in seen for i in b) == list(range(400))  # each item ran exactly once
    assert max(len(b) for b in seen) > 1 and all(len(b) <= 8 for b in seen)
    assert gc.batches == len(seen) < 400


def test_failures_reach_exactly_their_callers() -> None:
    def run(key, items):
        if "all" in items:
            raise RuntimeError("transaction failed")
        return [ValueError(i) if i.startswith("bad") else i.upper() for i in items]

    gc = GroupCommit(run)
    assert gc("k", "ok") == "OK"
    with pytest.raises(ValueError, match="bad1"):
        gc("k", "bad1")
    with pytest.raises(RuntimeError):
        gc("k", "all")
    gate = threading.Barrier(16)

    def call(i: int):
        gate.wait()
        try:
            return gc("k", f"bad{i}" if i % 3 == 0 else f"x{i}")
        except ValueError as e:
            return f"error {e}"

    with ThreadPoolExecutor(16) as pool:
        out = list(pool.map(call, range(16)))
    assert out == [f"error bad{i}" if i % 3 == 0 else f"X{i}" for i in range(16)]


def test_keys_are_independent_and_a_single_caller_runs_alone() -> None:
    blocked = threading.Event()

    def run(key, items):
        if key == "slow":
            blocked.wait(5)
        return items

    gc = GroupCommit(run)
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(gc, "slow", 1)
        time.sleep(0.05)
        assert gc("fast", 2) == 2  # not stuck behind the other key's batch
        blocked.set()
        assert slow.result(5) == 1
    assert gc("solo", 3) == 3 and gc.items == 3
