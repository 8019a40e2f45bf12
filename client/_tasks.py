"""``AsyncClient.optimize``: the ask-evaluate-tell loop, on asyncio tasks.

Coroutine objectives are awaited, plain ones run in a thread; asks and tells are never cut off by a
cancellation (``_uncut``). A cancelled run stops asking, lets the calls in flight finish and tells
every trial it holds failed before it re-raises: see ``AsyncClient.optimize`` for the contract.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast

from . import _endpoints as api
from ._endpoints import StudyRef
from ._optimize import (
    AsyncReporter,
    Options,
    Outcome,
    Reporter,
    Run,
    Running,
    TrialView,
    catchable,
    ends_heartbeats,
    failed_attrs,
    handle_view,
    interrupts,
    is_coroutine_callable,
    is_pruned,
    no_trial_error,
    notifier,
    outcome,
    pruned_outcome,
    running_on,
    wants_reporter,
    worker_id,
)
from ._progress import ProgressBar, require_tqdm
from ._signals import StopSignals, fail_reason
from ._study import AsyncStudy
from ._suggest import AsyncSuggestTrial, StudySpace, SuggestTrial
from .errors import CaliboError, InvalidRequest
from .models import Trial

if TYPE_CHECKING:
    from ._async import AsyncClient, Objective

_sleep = asyncio.sleep  # the heartbeat wait (a test may put a fake clock here)

T = TypeVar("T")
Params = SuggestTrial | AsyncSuggestTrial
# Calls the objective for a trial, with its reporter when it takes one.
ObjectiveCall = Callable[[Params, Reporter | AsyncReporter], Awaitable[Any]]


def handle_of(client: AsyncClient, study: StudyRef, study_id: int) -> AsyncStudy:
    """As ``_threads.handle_of``, for the async client: an :class:`AsyncStudy`."""
    if isinstance(study, AsyncStudy) and study.client is client:
        return study
    return AsyncStudy(client, handle_view(study, study_id))


async def optimize(client: AsyncClient, study: StudyRef, objective: Objective, opts: Options) -> list[TrialView]:
    """``AsyncClient.optimize`` (its defaults and contract are there)."""
    study_id = api.study_id_of(study)
    handle = handle_of(client, study, study_id)
    progress = None
    if opts.show_progress_bar:
        require_tqdm()  # before the first call: a clear ImportError
        progress = ProgressBar(opts.n_trials, opts.timeout, await _view_or_none(client, study_id))
    try:
        run = Run(opts.n_trials, notifier(opts, handle, study_id, progress), opts.timeout)
        with running_on(handle, run):
            return await _optimize(client, run, study_id, handle, objective, opts)
    finally:
        if progress is not None:
            progress.close()


async def _view_or_none(client: AsyncClient, study_id: int) -> dict[str, Any] | None:
    try:
        return await client.get_study(study_id)
    except CaliboError:
        return None


async def _optimize(client: AsyncClient, run: Run, study_id: int, handle: AsyncStudy, objective: Objective,
                    opts: Options) -> list[TrialView]:
    running = Running()
    call_objective = _objective_caller(objective)
    loop = asyncio.get_running_loop()
    trials = _Trials(client, objective, study_id, handle, loop)

    async def work(index: int) -> None:
        try:
            await _work(client, run, running, study_id, call_objective, trials, opts.catch, worker_id(index))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # raised by optimize below
            run.fail(exc)

    this = asyncio.current_task()
    assert this is not None  # a coroutine runs in a task
    pulse = None
    if opts.heartbeat_interval is not None and opts.asks_any:
        pulse = asyncio.create_task(_heartbeats(client, study_id, running, opts.heartbeat_interval))
    with StopSignals(cancel=lambda: loop.call_soon_threadsafe(this.cancel)) as signals:
        tasks = [asyncio.create_task(work(i)) for i in range(opts.n_workers)]
        try:
            await asyncio.gather(*tasks)
        except BaseException as exc:  # optimize itself cancelled
            run.stopped.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # each ends its call in flight
            reason = signals.reason() or fail_reason(exc)
            for trial_id in running.close(reason):
                await _tell_failed_quietly(client, study_id, trial_id, reason, interrupted=True)
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

    def arguments(params: Params, reporter: Any) -> tuple[Any, ...]:
        return (params, reporter) if with_reporter else (params,)

    if is_coroutine_callable(objective):

        async def awaited(params: Params, reporter: Any) -> Any:
            return await cast(Awaitable[Any], objective(*arguments(params, reporter)))

        return awaited

    # A plain function runs in a worker thread; should it hand back an awaitable
    # (say, a function returning a coroutine), that is awaited here.
    async def in_thread(params: Params, reporter: Any) -> Any:
        result = await asyncio.to_thread(objective, *arguments(params, reporter))
        if inspect.isawaitable(result):
            result = await result
        return result

    return in_thread


class _Trials:
    """Makes each trial's object and reporter: for a coroutine objective an
    :class:`AsyncSuggestTrial` and an :class:`AsyncReporter`; for a plain one, running in its
    thread, a :class:`SuggestTrial` and a :class:`Reporter` whose calls run on this loop.

    A plain objective's ``suggest_*`` reads the study's space on the loop the first time it needs
    it. A coroutine objective's ``suggest_*`` cannot wait for a call, so the space (when the study
    was given by id) is read once before the first trial's objective runs; if that read fails
    its ``suggest_*`` calls raise that error, and objectives that use ``params[...]`` go on.
    """

    def __init__(self, client: AsyncClient, objective: Objective, study_id: int, handle: AsyncStudy,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._client = client
        self._study_id = study_id
        self._handle = handle
        self._loop = loop
        self._coroutine = is_coroutine_callable(objective)
        fetch = None if self._coroutine else self._fetch_in_thread
        self._space = StudySpace(handle.space, fetch)
        self._reading = asyncio.Lock()
        self._read = False

    def _fetch_in_thread(self) -> Any:
        return _on_loop(self._loop, lambda: self._client.get_study(self._study_id)).get("space")

    async def make(self, trial: Trial) -> tuple[Params, Reporter | AsyncReporter]:
        client, study_id = self._client, self._study_id
        if self._coroutine:
            await self._read_space()

            async def send(step: int, value: float) -> bool:
                return await client.report(study_id, trial.id, step, value)

            reporter = AsyncReporter(trial, send)
            return AsyncSuggestTrial(trial, self._space, reporter, self._handle), reporter

        def send_blocking(step: int, value: float) -> bool:
            return _on_loop(self._loop, lambda: client.report(study_id, trial.id, step, value))

        blocking = Reporter(trial, send_blocking)
        return SuggestTrial(trial, self._space, blocking, self._handle), blocking

    async def _read_space(self) -> None:
        if self._space.known:
            return
        async with self._reading:  # the other tasks wait for the first one's read
            if self._space.known or self._read:
                return
            self._read = True
            try:
                self._space.set((await self._client.get_study(self._study_id)).get("space"))
            except CaliboError as exc:
                self._space.unavailable(exc)


async def _work(
    client: AsyncClient,
    run: Run,
    running: Running,
    study_id: int,
    call_objective: ObjectiveCall,
    trials: _Trials,
    catch: tuple[type[BaseException], ...],
    worker: str,
) -> None:
    while run.take():
        trial = await _uncut(_ask_into(client, running, study_id, worker))
        if trial is None:
            return
        told: Outcome
        params: Params | None = None
        reporter = None
        try:
            params, reporter = await trials.make(trial)
            told = outcome(await call_objective(params, reporter))
        except asyncio.CancelledError:
            raise  # optimize is stopping: it tells this trial failed
        except BaseException as exc:
            attrs = params.told_attrs() if params is not None else None
            if is_pruned(exc):
                told = (*pruned_outcome(reporter), None)
            elif catchable(exc, catch):
                told = (None, "failed", fail_reason(exc))
            else:
                if running.finish(trial.id):
                    try:
                        await _uncut(_tell_failed_quietly(client, study_id, trial.id, fail_reason(exc), attrs,
                                                          interrupted=interrupts(exc)))
                    finally:
                        running.end_call()
                raise
        if not running.finish(trial.id):
            return
        try:
            attrs = params.told_attrs() if params is not None else None
            view = await _uncut(_tell_outcome(client, study_id, trial.id, told, attrs))
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
        await _tell_failed_quietly(client, study_id, trial.id, running.reason, interrupted=True)
        return None
    finally:
        running.end_call()

async def _tell_outcome(client: AsyncClient, study_id: int, trial_id: int, told: Outcome,
                        attrs: dict[str, Any] | None = None) -> TrialView:
    """Tell what the objective came to (with the user attributes it set); a value the server
    refuses (422) is told failed, then raised."""
    value, state, reason = told
    try:
        return await client.tell(study_id, trial_id, value, state=state, user_attrs=failed_attrs(reason, attrs))
    except InvalidRequest as exc:
        if value is not None:
            await _tell_failed_quietly(client, study_id, trial_id, fail_reason(exc), attrs)
        raise

async def _tell_failed_quietly(client: AsyncClient, study_id: int, trial_id: int, reason: str | None,
                               attrs: dict[str, Any] | None = None, interrupted: bool = False) -> None:
    """Best effort: the objective's own error (or cancellation) is what propagates. ``interrupted``
    as in the threads' ``_tell_failed_quietly``."""
    try:
        await client.tell(study_id, trial_id, state="failed", user_attrs=failed_attrs(reason, attrs),
                          interrupted=interrupted)
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
