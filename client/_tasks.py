"""``AsyncClient.optimize``: the ask-evaluate-tell loop, on asyncio tasks.

Coroutine objectives are awaited, plain ones run in a thread; asks and tells are never cut off by a
cancellation (``_uncut``). A cancelled run stops asking, lets the calls in flight finish and tells
every trial it holds failed before it re-raises: see ``AsyncClient.optimize`` for the contract.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from . import _endpoints as api
from ._endpoints import StudyRef
from ._optimize import (
    AsyncReporter,
    Callback,
    Outcome,
    Reporter,
    Run,
    Running,
    TrialView,
    catchable,
    check_arguments,
    ends_heartbeats,
    failed_attrs,
    is_coroutine_callable,
    no_trial_error,
    outcome,
    pruned_outcome,
    wants_reporter,
    worker_id,
)
from ._signals import StopSignals, fail_reason
from .errors import CaliboError, InvalidRequest, TrialPruned
from .models import Trial

if TYPE_CHECKING:
    from ._async import AsyncClient, Objective

_sleep = asyncio.sleep  # the heartbeat wait (a test may put a fake clock here)

T = TypeVar("T")
# Calls the objective for a trial's params, with its reporter when it takes one.
ObjectiveCall = Callable[[dict[str, Any], Reporter | AsyncReporter | None], Awaitable[Any]]
# Makes the reporter for a trial (None when the objective takes none).
ReporterFactory = Callable[[Trial], Reporter | AsyncReporter | None]


async def optimize(client: AsyncClient, study: StudyRef, objective: Objective, n_trials: int, n_workers: int,
                   catch: tuple[type[BaseException], ...], callback: Callback | None,
                   heartbeat_interval: float | None) -> list[TrialView]:
    """``AsyncClient.optimize`` (its defaults and contract are there)."""
    check_arguments(n_trials, n_workers, heartbeat_interval)
    study_id = api.study_id_of(study)
    catch = tuple(catch)
    run = Run(n_trials, callback)
    running = Running()
    call_objective = _objective_caller(objective)
    loop = asyncio.get_running_loop()
    make_reporter = _reporter_factory(client, objective, study_id, loop)

    async def work(index: int) -> None:
        try:
            await _work(client,
                run, running, study_id, call_objective, make_reporter, catch, worker_id(index)
            )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # raised by optimize below
            run.fail(exc)

    this = asyncio.current_task()
    assert this is not None  # a coroutine runs in a task
    pulse = None
    if heartbeat_interval is not None and n_trials > 0:
        pulse = asyncio.create_task(_heartbeats(client, study_id, running, heartbeat_interval))
    with StopSignals(cancel=lambda: loop.call_soon_threadsafe(this.cancel)) as signals:
        tasks = [asyncio.create_task(work(i)) for i in range(n_workers)]
        try:
            await asyncio.gather(*tasks)
        except BaseException as exc:  # optimize itself cancelled
            run.stopped.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # each ends its call in flight
            reason = signals.reason() or fail_reason(exc)
            for trial_id in running.close(reason):
                await _tell_failed_quietly(client, study_id, trial_id, reason)
            if signals.raised is not None and isinstance(exc, asyncio.CancelledError):
                this.uncancel()  # cancelled here for the signal: raise what it stands for
                raise signals.raised from None
            raise
        finally:
            if pulse is not None:
                pulse.cancel()
                await asyncio.gather(pulse, return_exceptions=True)
    if run.error is not None:
        raise run.error
    return run.results

def _objective_caller(objective: Objective) -> ObjectiveCall:
    with_reporter = wants_reporter(objective)

    def arguments(params: dict[str, Any], reporter: Any) -> tuple[Any, ...]:
        return (params, reporter) if with_reporter else (params,)

    if is_coroutine_callable(objective):

        async def awaited(params: dict[str, Any], reporter: Any) -> Any:
            return await objective(*arguments(params, reporter))

        return awaited

    # A plain function runs in a worker thread; should it hand back an awaitable
    # (say, a function returning a coroutine), that is awaited here.
    async def in_thread(params: dict[str, Any], reporter: Any) -> Any:
        result = await asyncio.to_thread(objective, *arguments(params, reporter))
        if inspect.isawaitable(result):
            result = await result
        return result

    return in_thread

def _reporter_factory(
    client: AsyncClient, objective: Objective, study_id: int, loop: asyncio.AbstractEventLoop
) -> ReporterFactory:
    if not wants_reporter(objective):
        return lambda trial: None
    if is_coroutine_callable(objective):

        def make_async(trial: Trial) -> AsyncReporter:
            async def send(step: int, value: float) -> bool:
                return await client.report(study_id, trial.id, step, value)

            return AsyncReporter(trial, send)

        return make_async

    def make_blocking(trial: Trial) -> Reporter:
        def send(step: int, value: float) -> bool:
            return _on_loop(loop, lambda: client.report(study_id, trial.id, step, value))

        return Reporter(trial, send)

    return make_blocking

async def _work(
    client: AsyncClient,
    run: Run,
    running: Running,
    study_id: int,
    call_objective: ObjectiveCall,
    make_reporter: ReporterFactory,
    catch: tuple[type[BaseException], ...],
    worker: str,
) -> None:
    while run.take():
        trial = await _uncut(_ask_into(client, running, study_id, worker))
        if trial is None:
            return
        reporter = make_reporter(trial)
        told: Outcome
        try:
            told = outcome(await call_objective(dict(trial.params), reporter))
        except TrialPruned:
            told = (*pruned_outcome(reporter), None)
        except asyncio.CancelledError:
            raise  # optimize is stopping: it tells this trial failed
        except BaseException as exc:
            if not catchable(exc, catch):
                if running.finish(trial.id):
                    try:
                        await _uncut(_tell_failed_quietly(client, study_id, trial.id, fail_reason(exc)))
                    finally:
                        running.end_call()
                raise
            told = (None, "failed", fail_reason(exc))
        if not running.finish(trial.id):
            return
        try:
            view = await _uncut(_tell_outcome(client, study_id, trial.id, told))
        finally:
            running.end_call()
        run.record(view)

async def _ask_into(client: AsyncClient, running: Running, study_id: int, worker: str) -> Trial | None:
    """One new trial, registered in ``running``; None once the run is stopped."""
    if not running.begin_call():
        return None
    try:
        trials = await client.ask(study_id, 1, worker)
        if not trials:
            raise no_trial_error()
        trial = trials[0]
        if running.add(trial.id):
            return trial
        await _tell_failed_quietly(client, study_id, trial.id, running.reason)
        return None
    finally:
        running.end_call()

async def _tell_outcome(client: AsyncClient, study_id: int, trial_id: int, told: Outcome) -> TrialView:
    """Tell what the objective came to; a value the server refuses (422) is told failed, then raised."""
    value, state, reason = told
    try:
        return await client.tell(study_id, trial_id, value, state=state, user_attrs=failed_attrs(reason))
    except InvalidRequest as exc:
        if value is not None:
            await _tell_failed_quietly(client, study_id, trial_id, fail_reason(exc))
        raise

async def _tell_failed_quietly(client: AsyncClient, study_id: int, trial_id: int, reason: str | None) -> None:
    """Best effort: the objective's own error (or cancellation) is what propagates."""
    try:
        await client.tell(study_id, trial_id, state="failed", user_attrs=failed_attrs(reason))
    except (CaliboError, asyncio.CancelledError):
        pass

async def _heartbeats(client: AsyncClient, study_id: int, running: Running, interval: float) -> None:
    while True:
        await _sleep(interval)
        for trial_id in running.snapshot():
            try:
                await client.heartbeat(study_id, trial_id)
            except CaliboError as exc:
                if ends_heartbeats(exc):
                    running.stop_beating(trial_id)
                # else the server stayed away past the retries: beat again next time



async def _uncut(call: Awaitable[T]) -> T:
    """Await an ask or a tell to its end even if the awaiting task is cancelled meanwhile, then
    raise the cancellation: a trial is never asked without being known, nor told halfway."""
    inner = asyncio.ensure_future(call)
    cancelled = False
    while not inner.done():
        try:
            await asyncio.wait({inner})  # cancelling the waiter leaves the call running
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not inner.cancelled():
            inner.exception()  # retrieved: the cancellation is what propagates
        raise asyncio.CancelledError
    return inner.result()


def _on_loop(loop: asyncio.AbstractEventLoop, start: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``start()`` makes on ``loop`` and wait for it, from another thread."""
    try:
        current = asyncio.get_running_loop()
    except RuntimeError:  # no loop in this thread: the usual case, a worker thread
        current = None
    if current is loop:  # waiting here would block the loop the call has to run on
        raise RuntimeError(
            "a blocking Reporter was called on the event loop's thread: give optimize a "
            "coroutine objective (async def) to get an AsyncReporter and await its report()"
        )
    return asyncio.run_coroutine_threadsafe(start(), loop).result()
