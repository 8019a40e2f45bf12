"""``Client``: the blocking calibo client over ``httpx.Client``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from . import _endpoints as api
from . import _threads
from ._core import Attempts, Call, RetryPolicy, client_options
from ._endpoints import StudyRef, TrialRef
from ._optimize import (
    Callback,
    Reporter,
    TrialView,
    options,
)
from ._rows import add_chunks, read_rows, resumable
from ._study import Study
from .errors import CaliboError
from .models import Trial, TrialRecord

__all__ = ["Client"]

T = TypeVar("T")
Objective = Callable[[dict[str, Any]], float] | Callable[[dict[str, Any], Reporter], float]


class Client:
    """Blocking client for a calibo server.

    Every call raises a :class:`~calibo.CaliboError` subclass on failure.
    Every call is safe to repeat (``ask`` sends an ``Idempotency-Key``, the same
    on each try) and is retried on connection errors and on 502/503/504 with
    exponential backoff, honouring ``Retry-After``, until ``retry_deadline``
    seconds have passed since its first try (and, when ``retries`` is given, for
    at most that many retries), with a warning on the ``calibo.client`` logger
    for each retry. Until the client has had an answer from the server, a
    connection refused or a host not found (a wrong URL, a server not started)
    raises :class:`~calibo.ConnectionFailed` within about two seconds, naming
    the URL. The client is thread-safe.
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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._policy = RetryPolicy(
            retries=retries, backoff=backoff, max_backoff=max_backoff, deadline=retry_deadline
        )
        self._http = httpx.Client(transport=transport, **client_options(base_url, token, timeout))
        self._reached = False  # some answer came from the server: connection errors are an outage

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    # ------------------------------------------------------------ plumbing
    def _run(self, call: Call[T]) -> T:
        attempts = Attempts(call, self._policy, base_url=self.base_url, reached=self._reached)
        while True:
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    headers=call.headers,
                )
            except httpx.TransportError as exc:
                time.sleep(attempts.after_error(exc))
                continue
            self._reached = True
            delay = attempts.after_response(response)
            if delay is None:
                return attempts.finish(response)
            time.sleep(delay)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ the API
    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok", "database": "ok", "fit_pool": "ok"}`` when the server is
        ready; ``{"status": "unavailable", ...}`` (answered at once, not retried) while its database is
        down (``"database": "down"``) or its fit processes are not up and warm (``"fit_pool": "starting"``
        or ``"down"``)."""
        return self._run(api.health())

    def create_study(
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
    ) -> Study:
        """Create a study, or get the existing one with the same definition; a :class:`~calibo.Study`
        handle on it (its server view is ``study.view``).

        Every worker of a crowd may call it with the same arguments. Raises :class:`~calibo.Conflict`
        (``name_conflict``) when ``name`` exists with a different definition. ``direction``
        (``"minimize"`` when neither is given) or ``directions`` (a multi-objective study), not both:
        ValueError, as Optuna's ``create_study``.
        Options left as None are not sent.
        ``pruner`` is a name (``"none"``, ``"median"``, ``"sh"``, ``"hb"``, ``"sh+"``,
        ``"hb+"``) or a dict with its ``"name"`` and options, e.g. ``{"name": "sh+",
        "min_resource": 1, "max_resource": 27, "reduction_factor": 3}``.
        ``learn_failures=False``: failed trials are recorded, not learned from (by default each one
        trains the study's model of where trials succeed).
        """
        return Study(self, self._run(
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

    def get_study(self, study_id: StudyRef, *, system_attrs: bool = False) -> dict[str, Any]:
        """The study's view: definition, trial counts, best trial, surrogate and adaptive state
        (``system_attrs``: with its system attributes)."""
        return self._run(api.get_study(study_id, system_attrs))

    def load_study(self, study: int | str, *, by: str | None = None) -> Study:
        """A handle on an existing study: by id (an int, or a string of digits) or by name (any
        other string; ``by="name"`` for a name made of digits). NotFound when there is none."""
        if by not in (None, "id", "name"):
            raise ValueError(f"by must be 'id' or 'name', got {by!r}")
        ref = api.ByName(study) if by == "name" else study
        return Study(self, self.get_study(ref))

    def trial_by_id(self, trial_id: TrialRef, *, curves: bool = False) -> dict[str, Any]:
        """One trial's view by its id alone (``study_id`` in it names its study); ``curves``: with its
        learning-curve points (``intermediate_values``, step as a string key)."""
        return self._run(api.trial_by_id(trial_id, curves))

    def get_trial(self, study_id: StudyRef, trial_id: TrialRef) -> dict[str, Any]:
        """One trial's view."""
        return self._run(api.get_trial(study_id, trial_id))

    def list_studies(self, name: str | None = None, *, system_attrs: bool = False) -> list[dict[str, Any]]:
        """Every study's summary, all pages (or only the study named ``name``; ``system_attrs``: with
        each one's system attributes)."""
        out: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            page = self._run(api.list_studies(offset, name, system_attrs))
            out += page["studies"]
            offset = api.next_offset(page, offset, "studies")
        return out

    def delete_study(self, study_id: StudyRef) -> None:
        """Delete a study and its trials (an already deleted one is not an error)."""
        self._run(api.delete_study(study_id))

    def ask(
        self,
        study_id: StudyRef,
        count: int = 1,
        worker_id: str | None = None,
        idempotency_key: str | None = None,
        *,
        user_attrs: dict[str, Any] | None = None,
    ) -> list[Trial]:
        """Ask for ``count`` new trials.

        Each call sends an ``Idempotency-Key`` (``idempotency_key``, 1-64 characters
        of ``[A-Za-z0-9_-]``, or a fresh random one) on every try, so a retry gets
        the trials of the first try instead of new ones. Asking again with the key
        of an earlier call answers that call's trials.
        """
        return self._run(api.ask(study_id, count, worker_id, idempotency_key, user_attrs))

    def tell(
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
        """Finish a trial with its ``value`` (a multi-objective study: a list, one value per
        objective), or ``state="failed"`` / ``"pruned"``. ``interrupted=True`` (state failed): the
        run was stopped from outside, not by its configuration (the study does not learn it as a failure).

        A value given as text raises TypeError, a NaN or infinite one ValueError, and nothing is
        told (:meth:`Study.tell` tells such a trial failed, as Optuna does). Telling the same thing
        twice is harmless; telling something different for a finished trial raises
        :class:`~calibo.Conflict`.
        """
        return self._run(api.tell(study_id, trial_id, value, state, constraints, user_attrs, interrupted))

    def report(self, study_id: StudyRef, trial_id: TrialRef, step: int, value: float) -> bool:
        """Report a running trial's intermediate ``value`` at ``step``; True: prune it.

        ``step`` is an int >= 0 (epoch, iteration, resource used) and ``value`` a
        finite number (NaN or infinity raise ValueError, unsent). Reporting a step
        again with the same value answers the same decision (so retries are safe);
        another value for a reported step, or any report for a finished trial
        (``trial_finished``), raises :class:`~calibo.Conflict`. To act on a
        True, tell the trial ``state="pruned"`` (with its last value).
        """
        return self._run(api.report(study_id, trial_id, step, value))

    def heartbeat(self, study_id: StudyRef, trial_id: TrialRef) -> None:
        """Tell the server the trial is still being evaluated."""
        self._run(api.heartbeat(study_id, trial_id))

    def trials(
        self, study_id: StudyRef, state: str | None = None, limit: int = 100, offset: int = 0, *,
        origin: str | None = None, user_attrs: dict[str, str] | None = None, curves: bool = False,
        number_from: int | None = None,
    ) -> dict[str, Any]:
        """One page: ``{"trials": [...], "total", "limit", "offset"}`` (only trials of ``origin``,
        and whose string user attributes match ``user_attrs``, when given; ``curves``: each with its
        learning-curve points, ``intermediate_values``; ``number_from``: only trials numbered so or later)."""
        return self._run(api.trials(study_id, state, limit, offset, origin, user_attrs, curves, number_from))

    def iter_trials(
        self, study_id: StudyRef, state: str | None = None, page_size: int = 100, *,
        origin: str | None = None, user_attrs: dict[str, str] | None = None, curves: bool = False,
        number_from: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every trial view of the study (optionally filtered as :meth:`trials`), page by page."""
        offset: int | None = 0
        while offset is not None:
            page = self.trials(study_id, state=state, limit=page_size, offset=offset, origin=origin,
                               user_attrs=user_attrs, curves=curves, number_from=number_from)
            yield from page.get("trials") or []
            offset = api.next_offset(page, offset)

    def enqueue(
        self, study_id: StudyRef, params: dict[str, Any], *, skip_if_exists: bool = True,
        user_attrs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Queue ``params`` (all of a configuration, or some: the rest is chosen then) for the next
        asks, which hand enqueued trials out first, each to one worker. With ``skip_if_exists`` a
        trial already holding these values is answered instead of a new one."""
        return self._run(api.enqueue(study_id, params, skip_if_exists, user_attrs))

    def dequeue(self, study_id: StudyRef, trial_id: TrialRef) -> None:
        """Remove an enqueued trial no ask has handed out yet (a retry that finds it gone is done);
        :class:`~calibo.Conflict` ``trial_not_waiting`` once an ask has handed it out."""
        self._run(api.dequeue(study_id, trial_id))

    def add_trials(
        self, study_id: StudyRef, rows: Any, *, chunk: int = 1000,
    ) -> list[dict[str, Any]]:
        """Add trials evaluated elsewhere, from dicts, a CSV file or a JSON-lines file (see
        ``calibo._rows``): they count in the next fit and the best trial, never in the calibration.
        Sent in requests of ``chunk`` (at most 1000) trials, each stored all or none; returns their
        views. A refused row raises the server's error naming it by its index among ``rows``
        (``field`` ``trials.<i>...``), with ``stored``: rows before it that earlier requests stored
        (``added``: their views), so ``rows[e.stored:]`` resumes once it is fixed."""
        view = self.get_study(study_id)
        trials = read_rows(rows, view["space"], view.get("constraints", []))
        out: list[dict[str, Any]] = []
        for lo, rows in add_chunks(trials, chunk):
            try:
                added = self._run(api.add_trials(view["id"], rows))
                out += added
            except CaliboError as e:
                raise resumable(e, lo, out) from None
        return out

    def copy_study(
        self, study_id: StudyRef, name: str, *, user_attrs: dict[str, Any] | None = None,
    ) -> Study:
        """A new study ``name`` with the same definition and every finished trial (server side)."""
        return Study(self, self._run(api.copy_study(study_id, name, user_attrs)))

    def grow_space(self, study_id: StudyRef, space: dict[str, Any]) -> Study:
        """Grow the study's space: ``space`` maps each new parameter (conditional ones too) or an existing
        one's grown definition (more choices, a wider range) to its definition; the others stay as they
        are, and the same growth again changes nothing. The trials already told keep their values (a
        new parameter is inactive for them); asks from now on hold it. Anything but growth raises
        :class:`~calibo.errors.InvalidRequest` naming the field. Answers the study's handle."""
        return Study(self, self._run(api.grow_space(study_id, space)))

    def set_study_user_attr(self, study_id: StudyRef, key: str, value: Any) -> dict[str, Any]:
        """Set the study's user attribute ``key`` to ``value`` (any JSON value), keeping the others;
        answers the study's user attributes after. Concurrent sets of different keys all land."""
        return self._run(api.change_study_attrs(study_id, {key: value}))

    def delete_study_user_attr(self, study_id: StudyRef, key: str) -> dict[str, Any]:
        """Remove the study's user attribute ``key`` (nothing happens if it has none); answers the
        study's user attributes after."""
        return self._run(api.change_study_attrs(study_id, drop=[key]))

    def set_study_system_attr(self, study_id: StudyRef, key: str, value: Any) -> dict[str, Any]:
        """Set the study's system attribute ``key`` (attributes kept apart from the user's: an Optuna
        storage's); answers ``{key: value}``."""
        return self._run(api.change_study_attrs(study_id, {key: value}, kind="system_attrs"))

    def start_trial(self, study_id: StudyRef, trial: dict[str, Any]) -> dict[str, Any]:
        """Add a trial its caller runs itself: ``trial`` is a body of ``POST .../trials`` with ``state``
        ``running`` (or ``waiting``) and the parameters set so far (``{}``: none yet), or an imported
        finished trial; answers its view. :meth:`change_trial` sets its parameters, :meth:`tell` ends it."""
        return self._run(api.start_trial(study_id, trial))

    def change_trial(self, study_id: StudyRef, trial_id: TrialRef, **change: Any) -> dict[str, Any]:
        """Change a waiting or running trial: ``params`` (one it runs itself: set or replace),
        ``distributions``, ``user_attrs``, ``system_attrs``, ``intermediate_values`` (``{step: value}``),
        ``state="running"`` (start a waiting one); answers its view."""
        return self._run(api.change_trial(study_id, trial_id, change))

    def pareto(self, study_id: StudyRef) -> dict[str, Any]:
        """A multi-objective study's front: ``{"trials", "hypervolume", "reference_point", "history"}``."""
        return self._run(api.pareto(study_id))

    def calibration(self, study_id: StudyRef) -> dict[str, Any]:
        """Per-trial prediction against outcome, coverage, breach rate, width and alpha trajectory."""
        return self._run(api.calibration(study_id))

    def importance(self, study_id: StudyRef, objective: int = 0) -> dict[str, Any]:
        """Each parameter's importance from a surrogate fitted on the completed trials:
        ``{"importances": [{"param", "importance", "low", "high"}...], "fit": {"r2_oob"}, ...}``
        (see ``GET /v1/studies/{study}/importance``); before 4 results ``importances`` is empty and
        ``reason`` says why."""
        return self._run(api.importance(study_id, objective))

    # ------------------------------------------------------------ the loop
    def optimize(
        self,
        study: StudyRef,
        objective: Objective,
        n_trials: int | None = None,
        timeout: float | None = None,
        n_jobs: int | None = None,
        catch: type[BaseException] | Iterable[type[BaseException]] = (),
        callbacks: Iterable[Callable[[Study, TrialRecord], Any]] | None = None,
        gc_after_trial: bool = False,
        show_progress_bar: bool = False,
        *,
        n_workers: int = 1,
        callback: Callback | None = None,
        heartbeat_interval: float | None = 30.0,
    ) -> list[TrialView]:
        """Evaluate trials of ``study`` with ``n_workers`` threads, with Optuna's ``optimize`` arguments.

        The arguments read as Optuna's, in its positional order (``n_trials, timeout, n_jobs, catch,
        callbacks, gc_after_trial, show_progress_bar``; the reference's "optimize, with Optuna's
        arguments" has the table): ``n_trials`` trials (None: no limit); ``timeout`` seconds after
        which no trial starts; with neither, the run goes on until ``study.stop()``, Ctrl-C or
        SIGTERM. ``n_jobs`` is Optuna's name for ``n_workers`` (-1: one per CPU). ``callbacks`` are
        called ``callback(study, trial)`` with the finished trial's :class:`~calibo.TrialRecord`
        after every told trial, in order; ``callback(trial_view)``, keyword only, before them. A
        callback that raises stops the run as an objective's error does. ``study.stop()`` asks no
        more trials after the running ones. ``show_progress_bar`` needs ``calibo[progress]``.

        Each worker asks one trial, calls ``objective(trial)`` with a :class:`~calibo.SuggestTrial`
        (the params ``dict`` with Optuna's ``suggest_*``, checked against the study's space: a
        mismatch raises :class:`~calibo.SpaceMismatch`; ``report``, ``should_prune``,
        ``set_user_attr``) and tells the number it returns (NaN or infinity: a failed trial).
        Worker 0 runs in the calling thread; running trials get a heartbeat every
        ``heartbeat_interval`` seconds (None: never), and every call is retried as the client's
        are. Returns the finished trial views in the order told.

        No trial is left running: an exception of a type in ``catch`` is told failed and the loop
        goes on; any other, a value the server refuses (422), Ctrl-C or SIGTERM is told failed with
        ``user_attrs={"fail_reason": ...}``, stops every worker after its current trial, and is
        raised (SIGTERM as :class:`~calibo.Terminated`); on a signal the objectives still running
        are not waited for, the asks and tells in flight are. Signal handlers are installed only
        while it runs in the main thread, and put back after.

        Pruning: ``objective(params, reporter)`` (two positional parameters) gets a
        :class:`~calibo.Reporter`; an objective that raises :class:`~calibo.TrialPruned` (or
        Optuna's) has its trial told pruned with the last value reported, and the loop goes on.
        The reference's client page and the remote-workers guide say the rest.
        """
        opts = options(n_trials=n_trials, timeout=timeout, n_workers=n_workers, n_jobs=n_jobs, catch=catch,
                       callback=callback, callbacks=callbacks, show_progress_bar=show_progress_bar,
                       heartbeat_interval=heartbeat_interval, gc_after_trial=gc_after_trial)
        return _threads.optimize(self, study, objective, opts)
