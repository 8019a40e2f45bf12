"""``Client.optimize``: the blocking ask-evaluate-tell loop, on worker threads.

The calling thread is worker 0; the others are daemon threads (after Ctrl-C an objective still
running must not keep the process alive). A heartbeat thread keeps the running trials alive.
Signals (``_signals.StopSignals``) and failures end every trial the run holds as failed before
``optimize`` returns or raises: see ``Client.optimize`` for the contract.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from . import _endpoints as api
from ._endpoints import StudyRef
from ._optimize import (
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
    from ._sync import Client, Objective


def optimize(client: Client, study: StudyRef, objective: Objective, n_trials: int, n_workers: int,
             catch: tuple[type[BaseException], ...], callback: Callback | None,
             heartbeat_interval: float | None) -> list[TrialView]:
    """``Client.optimize`` (its defaults and contract are there)."""
    check_arguments(n_trials, n_workers, heartbeat_interval)
    study_id = api.study_id_of(study)
    catch = tuple(catch)
    run = Run(n_trials, callback)
    running = Running()
    beating = threading.Event()
    pulse = None
    if heartbeat_interval is not None and n_trials > 0:
        pulse = threading.Thread(
            target=_heartbeats,
            args=(client, study_id, running, heartbeat_interval, beating),
            name="calibo-heartbeat",
            daemon=True,
        )
        pulse.start()

    def work(index: int, signals: StopSignals) -> None:
        try:
            _work(client, run, running, study_id, objective, catch, worker_id(index), signals)
        except BaseException as exc:  # raised by the calling thread
            run.fail(exc)

    with StopSignals() as signals:
        # daemon: after Ctrl-C an objective still running must not keep the process alive
        threads = [
            threading.Thread(target=work, args=(i, signals), name=f"calibo-worker-{i}", daemon=True)
            for i in range(1, n_workers)
        ]
        try:
            for thread in threads:
                thread.start()
            try:
                _work(client, run, running, study_id, objective, catch, worker_id(0), signals)
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
        _tell_failed_quietly(client, study_id, trial_id, reason)
    running.wait_calls()

def _work(
    client: Client,
    run: Run,
    running: Running,
    study_id: int,
    objective: Objective,
    catch: tuple[type[BaseException], ...],
    worker: str,
    signals: StopSignals,
) -> None:
    with_reporter = wants_reporter(objective)
    while run.take():
        with signals.deferred():
            trial = _ask_into(client, running, study_id, worker)
        if trial is None:
            return
        reporter = _reporter(client, study_id, trial) if with_reporter else None
        told: Outcome
        try:
            if reporter is None:
                result = objective(dict(trial.params))
            else:
                result = objective(dict(trial.params), reporter)
            told = outcome(result)
        except TrialPruned:
            told = (*pruned_outcome(reporter), None)
        except BaseException as exc:
            if not catchable(exc, catch):
                with signals.deferred():
                    if running.finish(trial.id):  # else the run was stopped and told it failed
                        try:
                            _tell_failed_quietly(client, study_id, trial.id, fail_reason(exc))
                        finally:
                            running.end_call()
                raise
            told = (None, "failed", fail_reason(exc))
        with signals.deferred():
            if not running.finish(trial.id):
                return  # the run was stopped and its trials told failed meanwhile
            try:
                view = _tell_outcome(client, study_id, trial.id, told)
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
        _tell_failed_quietly(client, study_id, trial.id, running.reason)  # stopped while asking
        return None
    finally:
        running.end_call()

def _tell_outcome(client: Client, study_id: int, trial_id: int, told: Outcome) -> TrialView:
    """Tell what the objective came to; a value the server refuses (422) is told failed, then raised."""
    value, state, reason = told
    try:
        return client.tell(study_id, trial_id, value, state=state, user_attrs=failed_attrs(reason))
    except InvalidRequest as exc:
        if value is not None:
            _tell_failed_quietly(client, study_id, trial_id, fail_reason(exc))
        raise

def _reporter(client: Client, study_id: int, trial: Trial) -> Reporter:
    def send(step: int, value: float) -> bool:
        return client.report(study_id, trial.id, step, value)

    return Reporter(trial, send)

def _tell_failed_quietly(client: Client, study_id: int, trial_id: int, reason: str | None) -> None:
    """Best effort: the objective's own error is the one to raise."""
    try:
        client.tell(study_id, trial_id, state="failed", user_attrs=failed_attrs(reason))
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
