"""``AsyncClient``: the asyncio calibo client over ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from . import _endpoints as api
from . import _tasks
from ._core import Attempts, Call, RetryPolicy, client_options
from ._endpoints import StudyRef, TrialRef
from ._optimize import (
    AsyncReporter,
    Callback,
    Reporter,
    TrialView,
    options,
)
from ._rows import add_chunks, read_rows, resumable
from ._study import AsyncStudy
from .errors import CaliboError
from .models import Trial, TrialRecord

__all__ = ["AsyncClient"]

_sleep = asyncio.sleep  # the retry waits (tests put a fake clock here)

T = TypeVar("T")
Objective = (
    Callable[[dict[str, Any]], float]
    | Callable[[dict[str, Any]], Awaitable[float]]
    | Callable[[dict[str, Any], Reporter], float]
    | Callable[[dict[str, Any], AsyncReporter], Awaitable[float]]
)


class AsyncClient:
    """The asyncio twin of :class:`~calibo.Client`: same methods, awaited.

    Same errors and the same retry rules: every call (``ask`` with its
    ``Idempotency-Key``) is retried on connection errors and 502/503/504 with
    backoff, honouring ``Retry-After``, until ``retry_deadline`` seconds have
    passed since its first try (and for at most ``retries`` retries if given),
    with a warning on the ``calibo.client`` logger for each retry; before any
    answer from the server, a connection refused or a host not found raises
    :class:`~calibo.ConnectionFailed` within about two seconds, naming the URL.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | httpx.Timeout | None = 30.0,
        retry_deadline: float = 60.0,
        retries: int | None = None,
        backoff: float = 0.2,
        max_backoff: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._policy = RetryPolicy(
            retries=retries, backoff=backoff, max_backoff=max_backoff, deadline=retry_deadline
        )
        self._http = httpx.AsyncClient(
            transport=transport, **client_options(base_url, token, timeout)
        )
        self._reached = False  # some answer came from the server: connection errors are an outage

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    # ------------------------------------------------------------ plumbing
    async def _run(self, call: Call[T]) -> T:
        attempts = Attempts(call, self._policy, base_url=self.base_url, reached=self._reached)
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    headers=call.headers,
                )
            except httpx.TransportError as exc:
                await _sleep(attempts.after_error(exc))
                continue
            self._reached = True
            delay = attempts.after_response(response)
            if delay is None:
                return attempts.finish(response)
            await _sleep(delay)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ the API
    async def health(self) -> dict[str, Any]:
        return await self._run(api.health())

    async def create_study(
        self,
        name: str,
        space: dict[str, Any],
        direction: str | None = None,
        *,
        surrogate: str | None = None,
        acquisition: str | None = None,
        seed: int | None = None,
        settings: dict[str, Any] | None = None,
        pruner: str | dict[str, Any] | None = None,
        constraints: list[str] | None = None,
        user_attrs: dict[str, Any] | None = None,
        directions: list[str] | None = None,
        learn_failures: bool | None = None,
    ) -> AsyncStudy:
        """Create a study, or get the existing one with the same definition: an
        :class:`~calibo.AsyncStudy` handle (``direction`` or ``directions``, and ``pruner``, as in
        :meth:`Client.create_study`; options left as None are not sent)."""
        return AsyncStudy(self, await self._run(
            api.create_study(
                name,
                space,
                direction,
                surrogate=surrogate,
                acquisition=acquisition,
                seed=seed,
                settings=settings,
                pruner=pruner,
                constraints=constraints,
                user_attrs=user_attrs,
                directions=directions,
                learn_failures=learn_failures,
            ),
        ))

    async def get_study(self, study_id: StudyRef, *, system_attrs: bool = False) -> dict[str, Any]:
        return await self._run(api.get_study(study_id, system_attrs))

    async def load_study(self, study: int | str, *, by: str | None = None) -> AsyncStudy:
        """A handle on an existing study: by id (an int, or a string of digits) or by name (any
        other string; ``by="name"`` for a name made of digits). NotFound when there is none."""
        if by not in (None, "id", "name"):
            raise ValueError(f"by must be 'id' or 'name', got {by!r}")
        ref = api.ByName(study) if by == "name" else study
        return AsyncStudy(self, await self.get_study(ref))

    async def trial_by_id(self, trial_id: TrialRef, *, curves: bool = False) -> dict[str, Any]:
        """One trial's view by its id alone (``study_id`` in it names its study); ``curves``: with its
        learning-curve points (``intermediate_values``, step as a string key)."""
        return await self._run(api.trial_by_id(trial_id, curves))

    async def get_trial(self, study_id: StudyRef, trial_id: TrialRef) -> dict[str, Any]:
        """One trial's view."""
        return await self._run(api.get_trial(study_id, trial_id))

    async def list_studies(self, name: str | None = None, *, system_attrs: bool = False) -> list[dict[str, Any]]:
        """Every study's summary, all pages (or only the study named ``name``; ``system_attrs``: with
        each one's system attributes)."""
        out: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            page = await self._run(api.list_studies(offset, name, system_attrs))
            out += page["studies"]
            offset = api.next_offset(page, offset, "studies")
        return out

    async def delete_study(self, study_id: StudyRef) -> None:
        await self._run(api.delete_study(study_id))

    async def ask(
        self,
        study_id: StudyRef,
        count: int = 1,
        worker_id: str | None = None,
        idempotency_key: str | None = None,
        *,
        user_attrs: dict[str, Any] | None = None,
    ) -> list[Trial]:
        """Ask for ``count`` new trials; retried with one ``Idempotency-Key`` as :meth:`Client.ask`."""
        return await self._run(api.ask(study_id, count, worker_id, idempotency_key, user_attrs))

    async def tell(
        self,
        study_id: StudyRef,
        trial_id: TrialRef,
        value: float | Sequence[float] | None = None,
        *,
        state: str | None = None,
        constraints: list[float] | None = None,
        user_attrs: dict[str, Any] | None = None,
        interrupted: bool = False,
    ) -> dict[str, Any]:
        """Finish a trial with its ``value``, or ``state="failed"`` / ``"pruned"`` (text, NaN and
        infinity, and ``interrupted``, as in :meth:`Client.tell`)."""
        return await self._run(api.tell(study_id, trial_id, value, state, constraints, user_attrs, interrupted))

    async def report(self, study_id: StudyRef, trial_id: TrialRef, step: int, value: float) -> bool:
        """Report an intermediate ``value`` at ``step``; True: prune it (see :meth:`Client.report`)."""
        return await self._run(api.report(study_id, trial_id, step, value))

    async def heartbeat(self, study_id: StudyRef, trial_id: TrialRef) -> None:
        await self._run(api.heartbeat(study_id, trial_id))

    async def trials(
        self, study_id: StudyRef, state: str | None = None, limit: int = 100, offset: int = 0, *,
        origin: str | None = None, user_attrs: dict[str, str] | None = None, curves: bool = False,
        number_from: int | None = None,
    ) -> dict[str, Any]:
        """One page: ``{"trials": [...], "total", "limit", "offset"}`` (only trials of ``origin``,
        and whose string user attributes match ``user_attrs``, when given; ``curves``: with each one's
        learning-curve points; ``number_from``: only trials numbered so or later)."""
        return await self._run(api.trials(study_id, state, limit, offset, origin, user_attrs, curves, number_from))

    async def iter_trials(
        self, study_id: StudyRef, state: str | None = None, page_size: int = 100, *,
        origin: str | None = None, user_attrs: dict[str, str] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Every trial view of the study (optionally filtered as :meth:`trials`), page by page."""
        offset: int | None = 0
        while offset is not None:
            page = await self.trials(study_id, state=state, limit=page_size, offset=offset, origin=origin,
                                     user_attrs=user_attrs)
            for trial in page.get("trials") or []:
                yield trial
            offset = api.next_offset(page, offset)

    async def enqueue(
        self, study_id: StudyRef, params: dict[str, Any], *, skip_if_exists: bool = True,
        user_attrs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Queue ``params`` (all of a configuration, or some: the rest is chosen then) for the next
        asks, which hand enqueued trials out first, each to one worker. With ``skip_if_exists`` a
        trial already holding these values is answered instead of a new one."""
        return await self._run(api.enqueue(study_id, params, skip_if_exists, user_attrs))

    async def dequeue(self, study_id: StudyRef, trial_id: TrialRef) -> None:
        """Remove an enqueued trial no ask has handed out yet (a retry that finds it gone is done);
        :class:`~calibo.Conflict` ``trial_not_waiting`` once an ask has handed it out."""
        await self._run(api.dequeue(study_id, trial_id))

    async def add_trials(
        self, study_id: StudyRef, rows: Any, *, chunk: int = 1000,
    ) -> list[dict[str, Any]]:
        """Add trials evaluated elsewhere, from dicts, a CSV file or a JSON-lines file (see
        ``calibo._rows``): they count in the next fit and the best trial, never in the calibration.
        Sent in requests of ``chunk`` (at most 1000) trials, each stored all or none; returns their
        views. A refused row raises the server's error naming it by its index among ``rows``
        (``field`` ``trials.<i>...``), with ``stored``: rows before it that earlier requests stored
        (``added``: their views), so ``rows[e.stored:]`` resumes once it is fixed."""
        view = await self.get_study(study_id)
        trials = read_rows(rows, view["space"], view.get("constraints", []))
        out: list[dict[str, Any]] = []
        for lo, rows in add_chunks(trials, chunk):
            try:
                added = await self._run(api.add_trials(view["id"], rows))
                out += added
            except CaliboError as e:
                raise resumable(e, lo, out) from None
        return out

    async def copy_study(
        self, study_id: StudyRef, name: str, *, user_attrs: dict[str, Any] | None = None,
    ) -> AsyncStudy:
        """A new study ``name`` with the same definition and every finished trial (server side)."""
        return AsyncStudy(self, await self._run(api.copy_study(study_id, name, user_attrs)))

    async def grow_space(self, study_id: StudyRef, space: dict[str, Any]) -> AsyncStudy:
        """Grow the study's space (as :meth:`Client.grow_space`); the study's handle."""
        return AsyncStudy(self, await self._run(api.grow_space(study_id, space)))

    async def set_study_user_attr(self, study_id: StudyRef, key: str, value: Any) -> dict[str, Any]:
        """Set the study's user attribute ``key`` to ``value``; answers its user attributes after."""
        return await self._run(api.change_study_attrs(study_id, {key: value}))

    async def set_study_system_attr(self, study_id: StudyRef, key: str, value: Any) -> dict[str, Any]:
        """Set the study's system attribute ``key``; answers ``{key: value}``."""
        return await self._run(api.change_study_attrs(study_id, {key: value}, kind="system_attrs"))

    async def start_trial(self, study_id: StudyRef, trial: dict[str, Any]) -> dict[str, Any]:
        """Add a trial its caller runs itself (see :meth:`calibo.Client.start_trial`); answers its view."""
        return await self._run(api.start_trial(study_id, trial))

    async def change_trial(self, study_id: StudyRef, trial_id: TrialRef, **change: Any) -> dict[str, Any]:
        """Change a waiting or running trial (see :meth:`calibo.Client.change_trial`); answers its view."""
        return await self._run(api.change_trial(study_id, trial_id, change))

    async def delete_study_user_attr(self, study_id: StudyRef, key: str) -> dict[str, Any]:
        """Remove the study's user attribute ``key``; answers its user attributes after."""
        return await self._run(api.change_study_attrs(study_id, drop=[key]))

    async def pareto(self, study_id: StudyRef) -> dict[str, Any]:
        """A multi-objective study's front: ``{"trials", "hypervolume", "reference_point", "history"}``."""
        return await self._run(api.pareto(study_id))

    async def calibration(self, study_id: StudyRef) -> dict[str, Any]:
        return await self._run(api.calibration(study_id))

    async def importance(self, study_id: StudyRef, objective: int = 0) -> dict[str, Any]:
        return await self._run(api.importance(study_id, objective))

    # ------------------------------------------------------------ the loop
    async def optimize(
        self,
        study: StudyRef,
        objective: Objective,
        n_trials: int | None = None,
        timeout: float | None = None,
        n_jobs: int | None = None,
        catch: type[BaseException] | Iterable[type[BaseException]] = (),
        callbacks: Iterable[Callable[[AsyncStudy, TrialRecord], Any]] | None = None,
        gc_after_trial: bool = False,
        show_progress_bar: bool = False,
        *,
        n_workers: int = 1,
        callback: Callback | None = None,
        heartbeat_interval: float | None = 30.0,
    ) -> list[TrialView]:
        """Evaluate trials with ``n_workers`` concurrent tasks, with Optuna's ``optimize`` arguments.

        ``n_trials``, ``timeout``, ``n_jobs``, ``catch``, ``callbacks`` (plain
        callables ``callback(study, trial)``, called on the event loop with an
        :class:`~calibo.AsyncStudy`), ``gc_after_trial``, ``show_progress_bar``
        (in Optuna's positional order) and the keywords ``n_workers`` and
        ``callback`` as in :meth:`Client.optimize`; ``study.stop()`` stops the run after the running
        trials. A coroutine objective gets an :class:`~calibo.AsyncSuggestTrial`
        (``suggest_*`` are plain calls, ``await trial.report(value, step)``; when
        the study is given by id its space is read once before the first trial),
        a plain one a :class:`~calibo.SuggestTrial`.

        ``objective`` is a coroutine function (awaited) or a plain function (run
        in a thread with :func:`asyncio.to_thread`). Otherwise as
        :meth:`Client.optimize`: numbers are told, NaN / infinity and exceptions
        in ``catch`` are told failed and the loop goes on, any other exception is
        told failed, stops every task after its current trial and is raised; a
        trial whose heartbeat answers 409 / 404 is still evaluated and told.

        No trial is left running, as in :meth:`Client.optimize`: failed trials
        carry ``user_attrs={"fail_reason": ...}``, a value the server refuses
        (422) is told failed before the error is raised. When ``optimize`` is
        cancelled (Ctrl-C under :func:`asyncio.run` cancels the main task) it
        stops asking, lets the asks and tells in flight finish, tells failed the
        trials whose objectives still run (``"fail_reason": "KeyboardInterrupt"``
        after a SIGINT, ``"CancelledError"`` for another cancellation), then
        re-raises. SIGTERM, and SIGINT outside :func:`asyncio.run`, while it runs
        on the main thread's loop cancel it the same way, and it raises
        :class:`~calibo.Terminated` (a ``SystemExit``) or ``KeyboardInterrupt``
        once stopped; the previous signal handlers are put back on return.

        Pruning as in :meth:`Client.optimize`: an objective with two positional
        parameters, ``(params, reporter)``, gets a reporter for its trial and may
        raise :class:`~calibo.TrialPruned` to have it told ``state="pruned"`` with
        its last reported value. A coroutine objective gets an
        :class:`~calibo.AsyncReporter` (``await reporter.report(step, value)``);
        a plain one, running in its thread, a :class:`~calibo.Reporter` whose
        ``report(step, value)`` blocks that thread while the report is sent on
        this event loop.
        """
        opts = options(n_trials=n_trials, timeout=timeout, n_workers=n_workers, n_jobs=n_jobs, catch=catch,
                       callback=callback, callbacks=callbacks, show_progress_bar=show_progress_bar,
                       heartbeat_interval=heartbeat_interval, gc_after_trial=gc_after_trial)
        return await _tasks.optimize(self, study, objective, opts)
