"""``Study`` and ``AsyncStudy``: a handle on one study, so no call repeats its id.

``Client.create_study`` / ``load_study`` return a :class:`Study`; its methods are the
client's dict API with the study filled in, answering typed values (:class:`Trial`
for an ask, :class:`TrialRecord` for a told or listed trial).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import _endpoints as api
from . import _export, _reprs
from ._optimize import stop_runs
from .models import ParetoFront, Trial, TrialRecord

if TYPE_CHECKING:
    from ._async import AsyncClient
    from ._sync import Client

__all__ = ["AsyncStudy", "Study"]

TrialLike = int | Trial | TrialRecord


def _trial_id(trial: TrialLike) -> int:
    return trial.id if isinstance(trial, Trial | TrialRecord) else trial


def _optuna_outcome(value: Any, state: str | None) -> tuple[Any, str | None]:
    """What a handle's tell sends, as Optuna's ``Study.tell`` has it: a NaN value (or an infinite one,
    which calibo does not store) with no state is a failed trial, with a warning."""
    reason = api.unacceptable(value, state)
    if reason is None:
        return value, state
    api.warn_outside(reason)
    return None, "failed"


class _Handle:
    """What the sync and async handles share: the study's view and what it says."""

    def __init__(self, view: dict[str, Any]) -> None:
        if not isinstance(view, dict) or "id" not in view:
            raise ValueError("a study handle needs the study's view (a dict with 'id')")
        self.view: dict[str, Any] = view  # the study as the server last described it

    @property
    def id(self) -> int:
        return int(self.view["id"])

    @property
    def name(self) -> str | None:
        return self.view.get("name")

    @property
    def direction(self) -> str | None:
        return self.view.get("direction")

    @property
    def directions(self) -> list[str] | None:
        """The objectives' directions of a multi-objective study (None for one objective)."""
        return self.view.get("directions")

    @property
    def space(self) -> dict[str, Any] | None:
        return self.view.get("space")

    @property
    def constraints(self) -> list[str]:
        return list(self.view.get("constraints") or [])

    @property
    def user_attrs(self) -> dict[str, Any]:
        return dict(self.view.get("user_attrs") or {})

    def _record(self, data: dict[str, Any]) -> TrialRecord:
        return TrialRecord.from_wire(data, self.id)

    @staticmethod
    def _best(view: dict[str, Any]) -> dict[str, Any] | None:
        """The view's best trial; a multi-objective study has none to give (Optuna's RuntimeError)."""
        if len(view.get("directions") or ()) > 1:
            raise RuntimeError("A single best trial cannot be retrieved from a multi-objective study. "
                               "Consider using Study.best_trials to retrieve a list containing the best trials.")
        return view.get("best_trial")

    def stop(self) -> None:
        """Optuna's ``Study.stop``: the ``optimize`` running on this handle asks no trial after the
        running ones, which finish and are told. Call it from an objective (``trial.study.stop()``)
        or a callback; RuntimeError when no ``optimize`` runs on this handle. (A plain call, also on
        an :class:`AsyncStudy`.)"""
        stop_runs(self)

    def __repr__(self) -> str:
        multi = self.directions
        return _reprs.build(self, ("id", str(self.id)), ("name", _reprs.value(self.name)),
                            ("directions", repr(multi)) if multi else ("direction", repr(self.direction)))


class Study(_Handle):
    """A study on a calibo server, bound to a :class:`~calibo.Client`.

    >>> study = client.create_study("svc", space)                # doctest: +SKIP
    >>> trial = study.ask()                                       # doctest: +SKIP
    >>> study.tell(trial, train(**trial.params))                  # doctest: +SKIP
    >>> study.optimize(lambda p: train(**p), n_trials=50, n_workers=4)   # doctest: +SKIP
    >>> study.best_trial.params                                   # doctest: +SKIP
    """

    def __init__(self, client: Client, view: dict[str, Any]) -> None:
        super().__init__(view)
        self.client = client

    def refresh(self) -> Study:
        """Read the study's view again (trial counts, best trial, surrogate and calibration state)."""
        self.view = self.client.get_study(self.id)
        return self

    def grow_space(self, space: dict[str, Any]) -> Study:
        """Grow the study's space (new parameters, new choices, wider ranges; see
        :meth:`Client.grow_space`); ``view`` follows."""
        self.view = self.client.grow_space(self.id, space).view
        return self

    def ask(self, worker_id: str | None = None, *, user_attrs: dict[str, Any] | None = None) -> Trial:
        """One new trial to evaluate (``user_attrs``: set on it)."""
        return self.client.ask(self.id, 1, worker_id, user_attrs=user_attrs)[0]

    def ask_batch(self, count: int, worker_id: str | None = None, *,
                  user_attrs: dict[str, Any] | None = None) -> list[Trial]:
        """``count`` new trials at once, chosen together (distinct, kept apart)."""
        return self.client.ask(self.id, count, worker_id, user_attrs=user_attrs)

    def tell(self, trial: TrialLike, value: float | Sequence[float] | None = None, *, state: str | None = None,
             constraints: list[float] | None = None, user_attrs: dict[str, Any] | None = None,
             interrupted: bool = False) -> TrialRecord:
        """Finish ``trial`` with its ``value`` (a multi-objective study: a list, one value per objective;
        and, in a constrained study, its ``constraints``: one value per constraint, feasible when each
        is <= 0), or ``state="failed"`` / ``"pruned"``. As Optuna's: a value given as text raises
        TypeError and the trial stays running; a NaN value (or infinite) tells it failed, with a
        warning. ``interrupted=True`` (state failed): its run was stopped from outside, and the study
        does not learn its configuration as a failure."""
        value, state = _optuna_outcome(value, state)
        return self._record(self.client.tell(self.id, _trial_id(trial), value, state=state,
                                             constraints=constraints, user_attrs=user_attrs,
                                             interrupted=interrupted))

    def enqueue(self, params: dict[str, Any], *, skip_if_exists: bool = True,
                user_attrs: dict[str, Any] | None = None) -> TrialRecord:
        """Queue a configuration (or part of one) for the next asks; see :meth:`Client.enqueue`."""
        return self._record(self.client.enqueue(self.id, params, skip_if_exists=skip_if_exists,
                                                user_attrs=user_attrs))

    def dequeue(self, trial: TrialLike) -> None:
        """Remove an enqueued trial no ask has handed out yet; see :meth:`Client.dequeue`."""
        self.client.dequeue(self.id, _trial_id(trial))

    def add_trials(self, rows: Any) -> list[TrialRecord]:
        """Add trials evaluated elsewhere (dicts, a CSV or a JSON-lines file); see :meth:`Client.add_trials`."""
        return [self._record(v) for v in self.client.add_trials(self.id, rows)]

    def copy(self, name: str, *, user_attrs: dict[str, Any] | None = None) -> Study:
        """A new study ``name``: this one's definition and every finished trial."""
        return self.client.copy_study(self.id, name, user_attrs=user_attrs)

    def report(self, trial: TrialLike, step: int, value: float) -> bool:
        """Report an intermediate value of a running trial; True: the pruner says stop it."""
        return self.client.report(self.id, _trial_id(trial), step, value)

    def heartbeat(self, trial: TrialLike) -> None:
        """Mark a running trial alive (``optimize`` does it for its trials)."""
        self.client.heartbeat(self.id, _trial_id(trial))

    def optimize(self, objective: Callable[..., Any], n_trials: int | None = None, timeout: float | None = None,
                 n_jobs: int | None = None, catch: Any = (),
                 callbacks: Iterable[Callable[[Study, TrialRecord], Any]] | None = None,
                 gc_after_trial: bool = False, show_progress_bar: bool = False, *, n_workers: int = 1,
                 callback: Callable[[TrialRecord], Any] | None = None,
                 heartbeat_interval: float | None = 30.0) -> list[TrialRecord]:
        """Evaluate trials with Optuna's ``optimize`` arguments, in its positional order: ``n_trials``
        (None: no limit), ``timeout``, ``n_jobs`` (threads), ``catch``, ``callbacks`` (each
        ``callback(study, trial)``), ``gc_after_trial`` and ``show_progress_bar``. Keywords only:
        ``n_workers`` (calibo's name for ``n_jobs``), ``callback(trial)`` (the single-callback form)
        and ``heartbeat_interval``. The objective gets a :class:`~calibo.SuggestTrial`
        (``params["x"]`` or ``trial.suggest_float("x", ...)``). See :meth:`Client.optimize`."""
        wrapped = None if callback is None else (lambda view: callback(self._record(view)))
        views = self.client.optimize(self, objective, n_trials, timeout, n_jobs, catch, callbacks, gc_after_trial,
                                     show_progress_bar, n_workers=n_workers, callback=wrapped,
                                     heartbeat_interval=heartbeat_interval)
        return [self._record(v) for v in views]

    def trials(self, state: str | None = None, *, origin: str | None = None,
               user_attrs: dict[str, str] | None = None) -> list[TrialRecord]:
        """Every trial of the study (or those in ``state``, of ``origin``, with these string
        ``user_attrs``), by number."""
        return [self._record(v) for v in self.client.iter_trials(self.id, state=state, origin=origin,
                                                                 user_attrs=user_attrs)]

    def trial(self, trial: TrialLike) -> TrialRecord:
        """One trial of the study, as the server has it now."""
        return self._record(self.client.get_trial(self.id, _trial_id(trial)))

    @property
    def best_trial(self) -> TrialRecord | None:
        """The best (feasible) completed trial as the server ranks it now (None before any). A
        multi-objective study has no single best: RuntimeError, as in Optuna (see ``best_trials``)."""
        best = self._best(self.refresh().view)
        return None if best is None else self.trial(int(best["id"]))

    @property
    def best_value(self) -> float | None:
        """The best completed trial's value (None before any; RuntimeError in a multi-objective study)."""
        best = self._best(self.refresh().view)
        return None if best is None else best.get("value")

    @property
    def best_params(self) -> dict[str, Any] | None:
        """The best completed trial's parameters (None before any; RuntimeError in a multi-objective
        study)."""
        best = self._best(self.refresh().view)
        return None if best is None else dict(best["params"])

    def pareto(self) -> ParetoFront:
        """A multi-objective study's front: its non-dominated (feasible) trials and hypervolume."""
        return ParetoFront.from_wire(self.client.pareto(self.id), self.id)

    @property
    def best_trials(self) -> list[TrialRecord]:
        """A multi-objective study's best trials: its Pareto front (Optuna's ``best_trials``)."""
        return self.pareto().trials

    def calibration(self) -> dict[str, Any]:
        """Prediction at ask against outcome, coverage, breach rate, width and alpha trajectory
        (per objective under ``objectives`` in a multi-objective study). An interval's end is ``None``
        where it is unbounded (too few scores for its coverage); ``summary["unbounded_share"]`` counts
        those per interval pair, and ``mean_width`` averages the bounded ones."""
        return self.client.calibration(self.id)

    def importance(self, objective: int = 0) -> dict[str, Any]:
        """Each parameter's importance with its bootstrap band (see :meth:`Client.importance`)."""
        return self.client.importance(self.id, objective)

    def delete(self) -> None:
        """Delete the study and its trials on the server."""
        self.client.delete_study(self.id)

    def set_user_attr(self, key: str, value: Any) -> None:
        """Set the study's user attribute ``key`` to ``value`` (any JSON value) on the server, keeping
        the others (Optuna's ``Study.set_user_attr``); ``user_attrs`` and ``view`` follow."""
        self.view = {**self.view, "user_attrs": self.client.set_study_user_attr(self.id, key, value)}

    def delete_user_attr(self, key: str) -> None:
        """Remove the study's user attribute ``key`` on the server (nothing happens if it has none)."""
        self.view = {**self.view, "user_attrs": self.client.delete_study_user_attr(self.id, key)}

    def trials_dataframe(self, attrs: Sequence[str] = _export.DATAFRAME_ATTRS, multi_index: bool = False) -> Any:
        """The study's trials as a pandas DataFrame in Optuna's layout (``number``, ``value`` or
        ``values_<i>``, ``datetime_start``, ``datetime_complete``, ``duration``, ``params_<name>``,
        ``user_attrs_<key>``, ``constraints_<name>``, ``state``); ``attrs`` may also name
        ``id``, ``origin``, ``worker_id`` and ``prediction`` (the mean and interval bounds at ask).
        Needs pandas (``pip install 'calibo[pandas]'``)."""
        return _export.trials_frame(self.trials(), self.directions, self.constraints, attrs, multi_index)

    def export(self, path: str | os.PathLike[str], format: str | None = None) -> int:
        """Write the study's finished trials (complete, failed, pruned) to ``path`` as CSV or JSON
        lines (by the suffix ``.csv`` / ``.jsonl`` / ``.ndjson``, or ``format``), in the format
        :meth:`add_trials` reads: adding the file to a study of the same definition gives the same
        trials. How many trials it wrote."""
        view = self.view if "space" in self.view else self.refresh().view
        return _export.write_trials(path, self.trials(), view["space"], self.constraints,
                                    len(self.directions or ()) or 1, format)


class AsyncStudy(_Handle):
    """:class:`Study` for :class:`~calibo.AsyncClient`: the same methods, awaited
    (``best_trial``, ``best_value`` and ``best_params`` are coroutine methods)."""

    def __init__(self, client: AsyncClient, view: dict[str, Any]) -> None:
        super().__init__(view)
        self.client = client

    async def refresh(self) -> AsyncStudy:
        self.view = await self.client.get_study(self.id)
        return self

    async def grow_space(self, space: dict[str, Any]) -> AsyncStudy:
        """Grow the study's space (as :meth:`Study.grow_space`)."""
        self.view = (await self.client.grow_space(self.id, space)).view
        return self

    async def ask(self, worker_id: str | None = None, *, user_attrs: dict[str, Any] | None = None) -> Trial:
        return (await self.client.ask(self.id, 1, worker_id, user_attrs=user_attrs))[0]

    async def ask_batch(self, count: int, worker_id: str | None = None, *,
                        user_attrs: dict[str, Any] | None = None) -> list[Trial]:
        return await self.client.ask(self.id, count, worker_id, user_attrs=user_attrs)

    async def tell(self, trial: TrialLike, value: float | Sequence[float] | None = None, *,
                   state: str | None = None,
                   constraints: list[float] | None = None, user_attrs: dict[str, Any] | None = None,
                   interrupted: bool = False) -> TrialRecord:
        value, state = _optuna_outcome(value, state)
        return self._record(await self.client.tell(self.id, _trial_id(trial), value, state=state,
                                                   constraints=constraints, user_attrs=user_attrs,
                                                   interrupted=interrupted))

    async def enqueue(self, params: dict[str, Any], *, skip_if_exists: bool = True,
                      user_attrs: dict[str, Any] | None = None) -> TrialRecord:
        return self._record(await self.client.enqueue(self.id, params, skip_if_exists=skip_if_exists,
                                                      user_attrs=user_attrs))

    async def dequeue(self, trial: TrialLike) -> None:
        await self.client.dequeue(self.id, _trial_id(trial))

    async def add_trials(self, rows: Any) -> list[TrialRecord]:
        return [self._record(v) for v in await self.client.add_trials(self.id, rows)]

    async def copy(self, name: str, *, user_attrs: dict[str, Any] | None = None) -> AsyncStudy:
        return await self.client.copy_study(self.id, name, user_attrs=user_attrs)

    async def report(self, trial: TrialLike, step: int, value: float) -> bool:
        return await self.client.report(self.id, _trial_id(trial), step, value)

    async def heartbeat(self, trial: TrialLike) -> None:
        await self.client.heartbeat(self.id, _trial_id(trial))

    async def optimize(self, objective: Callable[..., Any], n_trials: int | None = None,
                       timeout: float | None = None, n_jobs: int | None = None, catch: Any = (),
                       callbacks: Iterable[Callable[[AsyncStudy, TrialRecord], Any]] | None = None,
                       gc_after_trial: bool = False, show_progress_bar: bool = False, *, n_workers: int = 1,
                       callback: Callable[[TrialRecord], Any] | None = None,
                       heartbeat_interval: float | None = 30.0) -> list[TrialRecord]:
        """Evaluate trials as concurrent tasks, with Optuna's ``optimize`` arguments in its positional
        order (see :meth:`Study.optimize` and :meth:`AsyncClient.optimize`)."""
        wrapped = None if callback is None else (lambda view: callback(self._record(view)))
        views = await self.client.optimize(self, objective, n_trials, timeout, n_jobs, catch, callbacks,
                                           gc_after_trial, show_progress_bar, n_workers=n_workers,
                                           callback=wrapped, heartbeat_interval=heartbeat_interval)
        return [self._record(v) for v in views]

    async def trials(self, state: str | None = None, *, origin: str | None = None,
                     user_attrs: dict[str, str] | None = None) -> list[TrialRecord]:
        return [self._record(v) async for v in self.client.iter_trials(self.id, state=state, origin=origin,
                                                                       user_attrs=user_attrs)]

    async def trial(self, trial: TrialLike) -> TrialRecord:
        return self._record(await self.client.get_trial(self.id, _trial_id(trial)))

    async def best_trial(self) -> TrialRecord | None:
        best = self._best((await self.refresh()).view)
        return None if best is None else await self.trial(int(best["id"]))

    async def best_value(self) -> float | None:
        best = self._best((await self.refresh()).view)
        return None if best is None else best.get("value")

    async def best_params(self) -> dict[str, Any] | None:
        best = self._best((await self.refresh()).view)
        return None if best is None else dict(best["params"])

    async def pareto(self) -> ParetoFront:
        return ParetoFront.from_wire(await self.client.pareto(self.id), self.id)

    async def best_trials(self) -> list[TrialRecord]:
        return (await self.pareto()).trials

    async def calibration(self) -> dict[str, Any]:
        return await self.client.calibration(self.id)

    async def importance(self, objective: int = 0) -> dict[str, Any]:
        return await self.client.importance(self.id, objective)

    async def delete(self) -> None:
        await self.client.delete_study(self.id)

    async def set_user_attr(self, key: str, value: Any) -> None:
        self.view = {**self.view, "user_attrs": await self.client.set_study_user_attr(self.id, key, value)}

    async def delete_user_attr(self, key: str) -> None:
        self.view = {**self.view, "user_attrs": await self.client.delete_study_user_attr(self.id, key)}

    async def trials_dataframe(self, attrs: Sequence[str] = _export.DATAFRAME_ATTRS,
                               multi_index: bool = False) -> Any:
        return _export.trials_frame(await self.trials(), self.directions, self.constraints, attrs, multi_index)

    async def export(self, path: str | os.PathLike[str], format: str | None = None) -> int:
        view = self.view if "space" in self.view else (await self.refresh()).view
        return _export.write_trials(path, await self.trials(), view["space"], self.constraints,
                                    len(self.directions or ()) or 1, format)
