"""Trials that did not come from an ask: enqueued configurations, trials evaluated elsewhere
(added, with their outcomes), and the copy of a study."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from itertools import groupby
from typing import Any, TypeVar

from calibo.engine.errors import FieldError
from calibo.engine.study import StudySpec

from ..errors import Conflict, InvalidRequest
from ..storage import StudyInfo, TrialRow
from .definitions import StudyDef, check_name
from .outcomes import check_constraints, check_outcome
from .steps import StudySteps
from .views import EnqueuedView, TrialView, trial_view

MAX_ADDED = 1000  # trials one add request may carry
T = TypeVar("T")


def _utc(t: datetime | None) -> datetime | None:
    """A time given without a zone is UTC, as every time calibo stores."""
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=UTC)


def _key(sd: StudyDef, params: dict[str, Any]) -> str:
    """The configuration key of a trial its caller runs: its configuration's once it holds one, else
    empty (it matches no other trial's)."""
    return sd.space.key(params).hex() if sd.space.is_configuration(params) else ""


def _enqueued_view(t: TrialRow) -> EnqueuedView:
    return {"id": t.id, "number": t.number, "params": t.params, "state": t.state, "origin": t.origin or "asked",
            "user_attrs": t.user_attrs or {}}


class AddedTrials(StudySteps):
    """:class:`StudyService`'s enqueue, add and copy (mixed into it)."""

    def enqueue(self, study_id: int, params: dict[str, Any], skip_if_exists: bool = True,
                user_attrs: dict[str, Any] | None = None) -> tuple[EnqueuedView, bool]:
        """Queue ``params`` (all of a configuration, or some) for the next asks; ``(trial, created)``.

        With ``skip_if_exists``, a trial whose parameters already include these values (enqueued,
        running or finished) is answered instead of a new one; and a complete configuration enqueued
        so is taken off the queue at the next ask if a trial has finished with it since (added or
        told: ``asks._queue``).
        """
        raw = params

        def checked(sd: StudyDef) -> dict[str, Any]:
            try:
                return sd.space.validate_partial(raw)
            except FieldError as e:
                raise InvalidRequest(e.message,
                                     field=f"params.{e.field}" if e.field != "params" else "params") from None

        sd, given = self._checked(study_id, checked)
        with self.storage.locked(study_id) as tx:
            if (cur := self._current(tx, sd)) is not sd:  # the space grew meanwhile
                sd, given = cur, checked(cur)
            params, complete = given, sd.space.complete(given)
            if skip_if_exists:
                same = tx.trials_with_params(params)
                if same:
                    return _enqueued_view(same[0]), False
            # the key only with skip_if_exists: an ask drops the waiting trial if its configuration has
            # finished since (asks._queue); without, the configuration is wanted again whatever happens
            key = sd.space.key(params).hex() if complete and skip_if_exists else ""
            (row,) = tx.add_trials([{"params": params, "ukey": key, "origin": "enqueued", "user_attrs": user_attrs}],
                                   state="waiting")
            return {"id": row["id"], "number": row["number"], "params": params, "state": "waiting",
                    "origin": "enqueued", "user_attrs": user_attrs or {}}, True

    def dequeue(self, study_id: int, trial_id: int) -> None:
        """Remove an enqueued trial that no ask has handed out yet; Conflict ``trial_not_waiting`` for a
        trial an ask handed out (it runs or has finished: tell it instead), NotFound for an unknown one."""
        with self.storage.locked(study_id) as tx:
            trial = tx.trial(trial_id)
            if trial.state != "waiting":
                raise Conflict(f"trial {trial.number} is {trial.state}, not waiting: only an enqueued trial no ask "
                               "has handed out can be removed (tell a running one failed instead)",
                               field="trial_id", code="trial_not_waiting")
            tx.remove_waiting(trial)

    def add(self, study_id: int, trials: list[dict[str, Any]], origin: str = "added") -> list[TrialView]:
        """Record trials evaluated elsewhere (``params`` and ``value``, or ``state: failed``; a
        constrained study's ``constraints``; ``user_attrs``): they count in the next fit and the best
        trial, and, having no prediction, never move the calibration state. A ``running`` or ``waiting``
        one is a trial its caller runs itself (define-by-run: ``update_trial`` sets its parameters, a tell
        ends it). All or none are stored, in the order given."""
        if not 1 <= len(trials) <= MAX_ADDED:
            raise InvalidRequest(f"1 to {MAX_ADDED} trials per request (got {len(trials)})", field="trials")

        def checked(sd: StudyDef) -> list[dict[str, Any]]:
            return [self._added_spec(sd, t, f"trials.{i}") for i, t in enumerate(trials)]

        sd, specs = self._checked(study_id, checked)
        with self.storage.locked(study_id) as tx:
            if (cur := self._current(tx, sd)) is not sd:  # the space grew meanwhile: keys of the new one
                sd, specs = cur, checked(cur)
            rows: list[TrialRow] = []
            for unfinished, run in groupby(specs, key=lambda sp: sp["state"] in ("running", "waiting")):
                group = list(run)
                if not unfinished:
                    rows += tx.add_finished(group, lambda v: sd.better(v, tx.study.best_value))
                    continue
                for spec in group:  # numbered in the order given, between the finished ones
                    (made,) = tx.add_trials([spec], state=spec["state"])
                    rows.append(tx.trial(made["id"]))
            views = [trial_view(r) for r in rows]
            n_complete = tx.study.n_complete
        news = ("complete", "failed") if sd.learn_failures else ("complete",)  # what a fit learns from
        if any(spec["state"] in news for spec in specs) and sd.config.fits(n_complete) \
                and self.fits is not None:
            self.fits.request(study_id)
        return views

    def _added_spec(self, sd: StudyDef, trial: dict[str, Any], where: str) -> dict[str, Any]:
        state = trial.get("state") or "complete"
        if state not in ("complete", "failed", "pruned", "running", "waiting"):
            raise InvalidRequest("must be complete, failed, pruned, running or waiting", field=f"{where}.state")
        unfinished = state in ("running", "waiting")
        try:
            params = (sd.space.validate_partial if unfinished else sd.space.validate)(trial.get("params"))
        except FieldError as e:
            raise InvalidRequest(e.message, field=f"{where}.params.{e.field}" if e.field != "params"
                                 else f"{where}.params") from None
        extra = {k: trial[k] for k in ("system_attrs", "distributions") if trial.get(k)}
        extra["intermediate_values"] = {int(k): v for k, v in (trial.get("intermediate_values") or {}).items()}
        extra["started_at"] = _utc(trial.get("started_at"))
        if unfinished:
            for key in ("value", "values", "constraints", "finished_at"):
                if trial.get(key) is not None:
                    raise InvalidRequest(f"a {state} trial has no {key} yet: tell it when it ends",
                                         field=f"{where}.{key}")
            return {"params": params, "ukey": _key(sd, params), "state": state, "user_attrs": trial.get("user_attrs"),
                    "origin": "added", **extra}
        try:
            value, values = check_outcome(sd, state, trial.get("value"), trial.get("values"))
            constraints = check_constraints(sd, state, trial.get("constraints"))
        except InvalidRequest as e:
            raise InvalidRequest(e.message, field=f"{where}.{e.field}") from None
        return {"params": params, "ukey": sd.space.key(params).hex(), "state": state, "value": value,
                "values": values, "constraints": constraints, "user_attrs": trial.get("user_attrs"),
                "origin": trial.get("origin", "added"), "finished_at": _utc(trial.get("finished_at")), **extra}

    def update_trial(self, study_id: int, trial_id: int, change: dict[str, Any]) -> TrialView:
        """Change a trial its caller runs itself (added running or waiting): set or replace parameters
        (``params``, valid for the space as the trial's parameters then stand; ``distributions``), merge
        ``user_attrs`` and ``system_attrs``, set or replace learning-curve points
        (``intermediate_values``), start a waiting trial (``state: running``; Conflict ``trial_running``
        when it has started: its caller completes an enqueued configuration's parameters). A finished
        trial is Conflict ``trial_finished`` and nothing changes; a trial an ask handed out takes
        attributes and points only (its parameters are the ask's)."""
        steps = {int(k): v for k, v in (change.get("intermediate_values") or {}).items()}
        given = change.get("params") or {}
        sd = self.study(study_id)
        with self.storage.locked(study_id) as tx:
            sd = self._current(tx, sd)  # the space as stored now (it may have grown in another process)
            trial = tx.trial(trial_id)
            if trial.state not in ("running", "waiting"):
                raise Conflict(f"trial {trial.number} is already {trial.state}: a finished trial does not "
                               "change", field="trial_id", code="trial_finished")
            if change.get("state") == "running" and trial.state == "running":
                raise Conflict(f"trial {trial.number} is running already", field="state", code="trial_running")
            params: dict[str, Any] | None = None
            if given:
                # its caller's: added, or enqueued and started by a change (an ask's hand-out sets no start)
                if not (trial.origin == "added" or (trial.origin == "enqueued" and trial.started_at is not None)):
                    raise Conflict(f"trial {trial.number} was handed out by an ask: its parameters are the "
                                   "ask's", field="params", code="trial_asked")
                try:
                    params = sd.space.validate_partial({**trial.params, **given})
                except FieldError as e:
                    raise InvalidRequest(e.message, field=f"params.{e.field}" if e.field != "params"
                                         else "params") from None
            tx.update_trial(trial, {**change, "intermediate_values": steps,
                                    "params": params and {k: params[k] for k in given},
                                    "ukey": params and _key(sd, params)})
            return trial_view(trial)

    def _checked(self, study_id: int, check: Callable[[StudyDef], T]) -> tuple[StudyDef, T]:
        """``check(definition)`` on the study's cached definition; when it refuses, and another process
        has grown the space since that was read, on the stored one (whose new parameters it may hold)."""
        sd = self.study(study_id)
        try:
            return sd, check(sd)
        except InvalidRequest:
            fresh = self._reload(study_id)
            if fresh.revision == sd.revision:
                raise
            return fresh, check(fresh)

    def copy(self, study_id: int, name: str, user_attrs: dict[str, Any] | None = None) -> tuple[StudyInfo, int]:
        """A new study named ``name`` with the same definition and every finished trial of this one
        (copied: their values, constraints and attributes, no predictions); ``(study, trials copied)``.
        One transaction: concurrent copies and creates of one name leave one study, whole; the others
        get Conflict ``name_conflict``."""
        check_name(name)
        sd = self.study(study_id)
        definition = self.storage.definition(study_id)
        state = StudySpec.from_definition(definition).initial_state().to_dict()
        info, n = self.storage.copy_study(study_id, name, definition, state, user_attrs, sd.better)
        if sd.config.fits(info.n_complete) and self.fits is not None:
            self.fits.request(info.id)
        return info, n
