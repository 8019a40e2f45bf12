"""``optimize`` never leaves a trial running: failed objectives, values of the wrong shape,
Ctrl-C and SIGTERM all end their trials as failed, with the reason in ``user_attrs``.

In-process tests raise the signal in the main thread at a chosen point (in an objective, in
the middle of an ask or a tell) against the in-memory server of test_client; the others run
against a live server, and the last ones signal a real worker process in the middle of a
two-thread ``optimize`` and then look for running trials over HTTP.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from conftest import LiveServer, unique
from test_api import BRANIN, FAST, branin
from test_client import SPACE, FakeServer, async_client, sync_client

from calibo import AsyncClient, Client, InvalidRequest

KEYBOARD = {"fail_reason": "KeyboardInterrupt"}

def failed(trial: int, reason: dict[str, str] = KEYBOARD) -> dict[str, Any]:
    """The tell of a trial whose run was stopped: failed, and interrupted (its configuration is not
    learned as a failure)."""
    return {"trial": trial, "state": "failed", "user_attrs": reason, "interrupted": True}


class Intercept:
    """The in-memory server, with ``before(kind, request)`` and ``after(kind, request)`` hooks
    run around each ask / tell (``kind``), in the thread that sends it."""

    def __init__(self, before: Callable[[str, httpx.Request], None] = lambda k, r: None,
                 after: Callable[[str, httpx.Request], None] = lambda k, r: None) -> None:
        self.server = FakeServer()
        self.before = before
        self.after = after

    def __call__(self, request: httpx.Request) -> httpx.Response:
        kind = request.url.path.rsplit("/", 1)[1]
        self.before(kind, request)
        response = self.server(request)
        self.after(kind, request)
        return response


@pytest.fixture(autouse=True)
def python_sigint() -> Any:
    """Ctrl-C raises KeyboardInterrupt here whatever the test process inherited: a process started
    in the background by a non-interactive shell begins with SIGINT ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# --------------------------------------------------------------------------- in-process signals
def test_ctrl_c_tells_every_running_trial_failed_without_waiting_for_the_objectives() -> None:
    server = FakeServer()
    evaluating = threading.Event()  # worker 1 is in its objective
    release = threading.Event()

    def objective(params: dict[str, Any]) -> float:
        if in_main_thread():
            assert evaluating.wait(10)
            signal.raise_signal(signal.SIGINT)  # Ctrl-C: KeyboardInterrupt here
            time.sleep(10)
        evaluating.set()
        release.wait(10)
        return 1.0

    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            calibo.optimize(study, objective, n_trials=10, n_workers=2, heartbeat_interval=None)
        assert time.monotonic() - start < 9  # did not wait for worker 1's objective
    assert server.asks == 2
    assert sorted(server.tells, key=lambda t: t["trial"]) == [failed(1), failed(2)]
    assert {t["state"] for t in server.trials.values()} == {"failed"}
    release.set()  # worker 1's objective returns: its trial was told failed, it tells nothing
    for thread in threading.enumerate():
        if thread.name == "calibo-worker-1":
            thread.join(10)
    assert len(server.tells) == 2


def test_ctrl_c_during_a_tell_takes_effect_once_the_tell_is_answered() -> None:
    def before(kind: str, request: httpx.Request) -> None:
        if kind == "tell":
            signal.raise_signal(signal.SIGINT)

    intercept = Intercept(before=before)
    with sync_client(intercept) as calibo:
        study = calibo.create_study("s", SPACE)
        with pytest.raises(KeyboardInterrupt):
            calibo.optimize(study, lambda p: 5.0, n_trials=10, heartbeat_interval=None)
    assert intercept.server.tells == [{"trial": 1, "value": 5.0}]
    assert intercept.server.asks == 1  # and no ask after it


def test_ctrl_c_during_an_ask_still_tells_the_trial_it_made_failed() -> None:
    def after(kind: str, request: httpx.Request) -> None:
        if kind == "ask":  # the server made the trial; its answer is on the way back
            signal.raise_signal(signal.SIGINT)

    intercept = Intercept(after=after)
    with sync_client(intercept) as calibo:
        study = calibo.create_study("s", SPACE)
        with pytest.raises(KeyboardInterrupt):
            calibo.optimize(study, lambda p: 5.0, n_trials=10, heartbeat_interval=None)
    assert intercept.server.asks == 1
    assert intercept.server.tells == [failed(1)]


def test_a_second_signal_is_not_held_back() -> None:
    def before(kind: str, request: httpx.Request) -> None:
        if kind == "tell":
            signal.raise_signal(signal.SIGINT)  # held until the tell is answered...
            signal.raise_signal(signal.SIGINT)  # ...but not a second one

    intercept = Intercept(before=before)
    with sync_client(intercept) as calibo:
        study = calibo.create_study("s", SPACE)
        with pytest.raises(KeyboardInterrupt):
            calibo.optimize(study, lambda p: 5.0, n_trials=10, heartbeat_interval=None)
    assert intercept.server.tells == []


class Stop(BaseException):
    """What an application's own SIGTERM handler raises."""


def test_an_applications_own_handler_is_kept_and_put_back() -> None:
    def own(signum: int, frame: Any) -> None:
        raise Stop("shutting down")

    seen: dict[str, Any] = {}

    def objective(params: dict[str, Any]) -> float:
        seen["sigterm"] = signal.getsignal(signal.SIGTERM)
        seen["sigint"] = signal.getsignal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
        return 1.0

    previous = signal.signal(signal.SIGTERM, own)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        server = FakeServer()
        with sync_client(server) as calibo:
            study = calibo.create_study("s", SPACE)
            with pytest.raises(Stop):
                calibo.optimize(study, objective, n_trials=3, heartbeat_interval=None)
        assert signal.getsignal(signal.SIGTERM) is own
        assert signal.getsignal(signal.SIGINT) is sigint
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen["sigterm"] is not own and seen["sigint"] is not sigint  # handled while it ran
    assert server.tells == [failed(1, {"fail_reason": "Stop: shutting down"})]


def test_handlers_are_left_alone_off_the_main_thread() -> None:
    seen: list[Any] = []
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    def objective(params: dict[str, Any]) -> float:
        seen.append((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))
        return 1.0

    def run() -> None:
        with sync_client(FakeServer()) as calibo:
            calibo.optimize(calibo.create_study("s", SPACE), objective, n_trials=2)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert seen == [before, before]


def test_async_cancelled_during_an_ask_tells_the_trial_it_made_failed() -> None:
    async def main() -> None:
        server = FakeServer()
        asked, gate = asyncio.Event(), asyncio.Event()

        async def handler(request: httpx.Request) -> httpx.Response:
            response = server(request)
            if request.url.path.endswith("/ask"):
                asked.set()
                await gate.wait()  # the trial exists; its answer is held back
            return response

        async with async_client(handler) as calibo:  # type: ignore[arg-type]
            study = await calibo.create_study("s", SPACE)
            task = asyncio.create_task(calibo.optimize(study, lambda p: 1.0, 5, n_workers=1))
            await asyncio.wait_for(asked.wait(), 10)
            task.cancel()
            await asyncio.sleep(0.05)
            gate.set()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
        assert server.asks == 1
        assert server.tells == [failed(1, {"fail_reason": "CancelledError"})]

    asyncio.run(main())


def test_async_ctrl_c_under_asyncio_run_tells_running_trials_failed() -> None:
    server = FakeServer()

    async def objective(params: dict[str, Any]) -> float:
        if params["x"] == 2.0:
            await asyncio.sleep(0.05)  # both trials are running
            signal.raise_signal(signal.SIGINT)
        await asyncio.sleep(10)
        return 1.0

    async def main() -> None:
        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            await calibo.optimize(study, objective, n_trials=10, n_workers=2)

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    assert server.asks == 2
    assert sorted(server.tells, key=lambda t: t["trial"]) == [failed(1), failed(2)]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --------------------------------------------------------------------------- live: failed objectives
def trials_by_state(client: Client, study_id: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for trial in client.iter_trials(study_id):
        out.setdefault(trial["state"], []).append(trial)
    return out


def reasons(trials: list[dict[str, Any]]) -> list[str]:
    return [t["user_attrs"]["fail_reason"] for t in trials]


def test_failed_objectives_and_wrong_shapes_leave_no_running_trial(live_server: LiveServer) -> None:
    def broken(params: dict[str, Any]) -> float:
        raise KeyError("no such layer")

    with Client(live_server.url) as c:
        study = c.create_study(unique("fail"), BRANIN, settings=FAST)
        with pytest.raises(KeyError, match="no such layer"):
            study.optimize(broken, n_trials=4, n_workers=2)
        with pytest.raises(InvalidRequest) as info:  # two values for a study with one objective
            study.optimize(lambda p: (branin(p), 1.0), n_trials=4, n_workers=2)
        assert info.value.status == 422
        with pytest.raises(TypeError):
            study.optimize(lambda p: "oops", n_trials=1)
        caught = study.optimize(broken, n_trials=2, catch=(KeyError,))
        assert [r.state for r in caught] == ["failed", "failed"]
        done = study.optimize(branin, n_trials=2)
        assert [r.state for r in done] == ["complete", "complete"]
        states = trials_by_state(c, study.id)
        assert set(states) == {"failed", "complete"}
        why = reasons(states["failed"])
        assert why.count("KeyError: 'no such layer'") >= 3  # the first run's (one or two) and caught
        assert sum(r.startswith("InvalidRequest: 422 ") for r in why) in (1, 2)
        assert "TypeError: the objective must return a number, got 'oops'" in why
        assert all(len(r) <= 500 for r in why)

        multi = c.create_study(unique("fail-mo"), BRANIN, directions=["minimize", "minimize"],
                               settings=FAST)
        with pytest.raises(InvalidRequest):  # one number for a study with two objectives
            multi.optimize(branin, n_trials=2, n_workers=2)
        states = trials_by_state(c, multi.id)
        assert set(states) == {"failed"}
        assert all(r.startswith("InvalidRequest: 422 ") for r in reasons(states["failed"]))


def test_async_failed_objectives_and_wrong_shapes_leave_no_running_trial(
    live_server: LiveServer,
) -> None:
    async def broken(params: dict[str, Any]) -> float:
        raise ValueError("diverged")

    async def main() -> int:
        async with AsyncClient(live_server.url) as c:
            study = await c.create_study(unique("afail"), BRANIN, settings=FAST)
            with pytest.raises(ValueError, match="diverged"):
                await study.optimize(broken, n_trials=4, n_workers=2)
            with pytest.raises(InvalidRequest):
                await study.optimize(lambda p: [1.0, 2.0], n_trials=4, n_workers=2)
            return study.id

    study_id = asyncio.run(main())
    with Client(live_server.url) as c:
        states = trials_by_state(c, study_id)
    assert set(states) == {"failed"}
    why = reasons(states["failed"])
    assert "ValueError: diverged" in why and any(r.startswith("InvalidRequest: 422 ") for r in why)


# --------------------------------------------------------------------------- live: worker processes
WORKER = r"""
import asyncio, signal, sys, time
from calibo import AsyncClient, Client

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even if started ignoring it
url, study_id, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def objective(params):
    time.sleep(120)
    return 0.0


async def coroutine(params):
    await asyncio.sleep(120)
    return 0.0


async def main():
    async with AsyncClient(url) as client:
        await client.optimize(study_id, coroutine, n_trials=10, n_workers=2)


if kind == "sync":
    with Client(url) as client:
        client.optimize(study_id, objective, n_trials=10, n_workers=2)
else:
    asyncio.run(main())
"""


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("signum", "reason"),
    [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "Terminated: SIGTERM")],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signalled_worker_process_leaves_no_running_trial(
    live_server: LiveServer, kind: str, signum: int, reason: str
) -> None:
    with Client(live_server.url) as c:
        study = c.create_study(unique(f"signal-{kind}"), BRANIN, settings=FAST)

        def running() -> int:
            return c.trials(study.id, state="running", limit=1)["total"]

        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, live_server.url, str(study.id), kind],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_until(lambda: running() == 2 or worker.poll() is not None, 60, "two running trials")
            assert worker.poll() is None, worker.communicate()
            time.sleep(0.5)  # both objectives are sleeping now
            worker.send_signal(signum)
            _, err = worker.communicate(timeout=60)  # it does not wait for its objectives
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
        states = trials_by_state(c, study.id)
    assert "running" not in states, err
    assert len(states["failed"]) == 2 and reasons(states["failed"]) == [reason, reason], err
    if signum == signal.SIGTERM:
        assert worker.returncode == 143, err  # Terminated is a SystemExit(143)
    else:
        assert worker.returncode != 0 and "KeyboardInterrupt" in err
