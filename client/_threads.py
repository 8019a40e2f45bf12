"""``Client.optimize``: the blocking ask-evaluate-tell loop, on worker threads.

The calling thread is worker 0; the others are daemon threads (after Ctrl-C an objective still
running must not keep the process alive). A heartbeat thread keeps the running trials alive.
Signals (``_signals.StopSignals``) and failures end every trial the run holds as failed before
``optimize`` returns or raises: see ``Client.optimize`` for the contract.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import _endpoints as api
from ._endpoints import StudyRef
from ._optimize import (
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
from ._study import Study
from ._suggest import StudySpace, SuggestTrial
from .errors import CaliboError, InvalidRequest
from .models import Trial

if TYPE_CHECKING:
    from ._sync import Client, Objective


@dataclass(frozen=True)
class _Loop:
    """What every worker of one run shares."""

    client: Client
    run: Run
    running: Running
    study_id: int
    objective: Objective
    catch: tuple[type[BaseException], ...]
    space: StudySpace
    handle: Study
    with_reporter: bool


def handle_of(client: Client, study: StudyRef, study_id: int) -> Study:
    """The study handle callbacks and trials get: ``study`` itself when it is one, else a handle
    on its view (a dict given) or on its id alone (``refresh()`` reads the view)."""
    if isinstance(study, Study) and study.client is client:
        return study
    return Study(client, handle_view(study, study_id))


def optimize(client: Client, study: StudyRef, objective: Objective, opts: Options) -> list[TrialView]:
    """``Client.optimize`` (its defaults and contract are there)."""
    study_id = api.study_id_of(study)
    handle = handle_of(client, study, study_id)
    progress = None
    if opts.show_progress_bar:
        require_tqdm()  # before the first call: a clear ImportError
        progress = ProgressBar(opts.n_trials, opts.timeout, _view_or_none(client, study_id))
    try:
        run = Run(opts.n_trials, notifier(opts, handle, study_id, progress), opts.timeout)
        with running_on(handle, run):
            return _optimize(client, run, study_id, handle, objective, opts)
    finally:
        if progress is not None:
            progress.close()


def _view_or_none(client: Client, study_id: int) -> dict[str, object] | None:
    """The study's view for the progress bar's best value; None if it cannot be read now."""
    try:
        return client.get_study(study_id)
    except CaliboError:
        return None


def _optimize(client: Client, run: Run, study_id: int, handle: Study, objective: Objective,
              opts: Options) -> list[TrialView]:
    running = Running()
    space = StudySpace(handle.space, lambda: client.get_study(study_id).get("space"))
    loop = _Loop(client, run, running, study_id, objective, opts.catch, space, handle,
                 wants_reporter(objective))
    beating = threading.Event()
    pulse = None
    if opts.heartbeat_interval is not None and opts.asks_any:
        pulse = threading.Thread(
            target=_heartbeats,
            args=(client, study_id, running, opts.heartbeat_interval, beating),
            name="calibo-heartbeat",
            daemon=True,
        )
        pulse.start()

    def work(index: int, signals: StopSignals) -> None:
        try:
            _work(loop, worker_id(index), signals)
        except BaseException as exc:  # raised by the calling thread
            run.fail(exc)

    with StopSignals() as signals:
        # daemon: after Ctrl-C an objective still running must not keep the process alive
        threads = [
            threading.Thread(target=work, args=(i, signals), name=f"calibo-worker-{i}", daemon=True)
            for i in range(1, opts.n_workers)
        ]
        try:
            for thread in threads:
                thread.start()
            try:
                _work(loop, worker_id(0), signals)
            except Exception as exc:
                run.fail(exc)
            for thread in threads:
                thread.join()
        except BaseException as exc:  # Ctrl-C, SIGTERM: stop now, leaving no trial running
            _stop(client, run, running, study_id, fail_reason(exc))
            raise
        finally:
            beating.set()
            if pulse is not None:
                pulse.join(timeout=1.0)
    if run.error is not None:
        raise run.error
    return run.results

def _stop(client: Client, run: Run, running: Running, study_id: int, reason: str) -> None:
    """Stop asking, tell failed the trials whose objectives still run (not waiting for them),
    and wait for the asks and tells in flight."""
    run.stopped.set()
    for trial_id in running.close(reason):
        _tell_failed_quietly(client, study_id, trial_id, reason, interrupted=True)
    running.wait_calls()

def _work(loop: _Loop, worker: str, signals: StopSignals) -> None:
    client, run, running, study_id = loop.client, loop.run, loop.running, loop.study_id
    while run.take():
        with signals.deferred():
            trial = _ask_into(client, running, study_id, worker)
        if trial is None:
            return
        reporter = _reporter(client, study_id, trial)
        params = SuggestTrial(trial, loop.space, reporter, loop.handle)
        told: Outcome
        try:
            if loop.with_reporter:
                result = loop.objective(params, reporter)  # type: ignore[call-arg]  # its arity read at start
            else:
                result = loop.objective(params)  # type: ignore[call-arg]  # its arity read at start
            told = outcome(result)
        except BaseException as exc:
            if is_pruned(exc):
                told = (*pruned_outcome(reporter), None)
            elif catchable(exc, loop.catch):
                told = (None, "failed", fail_reason(exc))
            else:
                with signals.deferred():
                    if running.finish(trial.id):  # else the run was stopped and told it failed
                        try:
                            _tell_failed_quietly(client, study_id, trial.id, fail_reason(exc),
                                                 params.told_attrs(), interrupted=interrupts(exc))
                        finally:
                            running.end_call()
                raise
        with signals.deferred():
            if not running.finish(trial.id):
                return  # the run was stopped and its trials told failed meanwhile
            try:
                view = _tell_outcome(client, study_id, trial.id, told, params.told_attrs())
            finally:
                running.end_call()
        run.record(view)

def _ask_into(client: Client, running: Running, study_id: int, worker: str) -> Trial | None:
    """One new trial, registered in ``running``; None once the run is stopped."""
    if not running.begin_call():
        return None
    try:
        trials = client.ask(study_id, 1, worker)
        if not trials:
            raise no_trial_error()
        trial = trials[0]
        if running.add(trial.id):
            return trial
        _tell_failed_quietly(client, study_id, trial.id, running.reason, interrupted=True)  # stopped while asking
        return None
    finally:
        running.end_call()

def _tell_outcome(client: Client, study_id: int, trial_id: int, told: Outcome,
                  attrs: dict[str, object] | None = None) -> TrialView:
    """Tell what the objective came to (with the user attributes it set); a value the server
    refuses (422) is told failed, then raised."""
    value, state, reason = told
    try:
        return client.tell(study_id, trial_id, value, state=state, user_attrs=failed_attrs(reason, attrs))
    except InvalidRequest as exc:
        if value is not None:
            _tell_failed_quietly(client, study_id, trial_id, fail_reason(exc), attrs)
        raise

def _reporter(client: Client, study_id: int, trial: Trial) -> Reporter:
    def send(step: int, value: float) -> bool:
        return client.report(study_id, trial.id, step, value)

    return Reporter(trial, send)

def _tell_failed_quietly(client: Client, study_id: int, trial_id: int, reason: str | None,
                         attrs: dict[str, object] | None = None, interrupted: bool = False) -> None:
    """Best effort: the objective's own error is the one to raise. ``interrupted``: the run was
    stopped, its configuration did not fail (the study does not learn it as a failure)."""
    try:
        client.tell(study_id, trial_id, state="failed", user_attrs=failed_attrs(reason, attrs),
                    interrupted=interrupted)
    except CaliboError:
        pass

def _heartbeats(
    client: Client, study_id: int, running: Running, interval: float, done: threading.Event
) -> None:
    while not done.wait(interval):
        for trial_id in running.snapshot():
            if done.is_set():
                return
            try:
                client.heartbeat(study_id, trial_id)
            except CaliboError as exc:
                if ends_heartbeats(exc):
                    running.stop_beating(trial_id)
                # else the server stayed away past the retries: beat again next time
            except Exception:
                if done.is_set():
                    return  # a late retry after the client was closed
                raise
