"""Group commit under real concurrency: many coroutines, batches on worker threads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from calibo.server.batching import GroupCommit


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

    async def main():
        async def client(c: int):
            return [await gc("k", c * 100 + j) for j in range(20)]
        return await asyncio.gather(*(client(c) for c in range(32)))

    results = asyncio.run(main())
    assert results == [[("k", (c * 100 + j) * 10) for j in range(20)] for c in range(32)]
    items = sorted(i for b in seen for i in b)
    assert items == sorted(c * 100 + j for c in range(32) for j in range(20))  # each ran exactly once
    assert max(len(b) for b in seen) > 1 and all(len(b) <= 8 for b in seen)
    assert gc.batches == len(seen) < 640 and gc.items == 640


def test_failures_reach_exactly_their_callers() -> None:
    def run(key, items):
        if "all" in items:
            raise RuntimeError("transaction failed")
        return [ValueError(i) if i.startswith("bad") else i.upper() for i in items]

    gc = GroupCommit(run)

    async def main():
        assert await gc("k", "ok") == "OK"
        with pytest.raises(ValueError, match="bad1"):
            await gc("k", "bad1")
        with pytest.raises(RuntimeError):
            await gc("k", "all")

        async def call(i: int):
            try:
                return await gc("k", f"bad{i}" if i % 3 == 0 else f"x{i}")
            except ValueError as e:
                return f"error {e}"

        return await asyncio.gather(*(call(i) for i in range(16)))

    out = asyncio.run(main())
    assert out == [f"error bad{i}" if i % 3 == 0 else f"X{i}" for i in range(16)]


def test_keys_are_independent_and_a_single_caller_runs_alone() -> None:
    blocked = threading.Event()

    def run(key, items):
        if key == "slow":
            blocked.wait(5)
        return items

    gc = GroupCommit(run)

    async def main():
        slow = asyncio.create_task(gc("slow", 1))
        await asyncio.sleep(0.05)
        assert await gc("fast", 2) == 2  # not stuck behind the other key's batch
        blocked.set()
        assert await slow == 1
        assert await gc("solo", 3) == 3

    asyncio.run(main())
    assert gc.items == 3 and gc.batches == 3
