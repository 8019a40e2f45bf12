"""The tells of one write batch inside a study's locked transaction: each trial finished once (a
repeated tell changes nothing), the engine's ``StudyState.adapt`` on the prediction stored at ask,
the new state stored once for the batch."""

from __future__ import annotations

from typing import Any

from calibo.engine import Prediction, StudyState
from calibo.engine.errors import FieldError

from ..errors import Conflict, InvalidRequest, NotFound
from ..storage import INTERRUPTED, StudyTx, expired, feasible
from .definitions import StudyDef
from .outcomes import same_value
from .steps import StudySteps
from .views import TrialView, trial_view
from .writes import TellWrite, Told


class TellSteps(StudySteps):
    """:class:`StudyService`'s tell step (mixed into it)."""

    def _tell_in(self, tx: StudyTx, sd: StudyDef, items: list[TellWrite]) -> list[Told | Exception]:
        study_id = sd.id
        out: list[tuple[TrialView, bool] | Exception] = []
        trials = tx.trials([item.trial_id for item in items])
        adaptive: StudyState | None = None  # loaded at the first completion, adapted tell by tell, stored once
        adapted = False
        for item in items:
            trial_id, value, state, constraints = item.trial_id, item.value, item.state, item.constraints
            attrs, values = item.user_attrs, item.values
            trial = trials.get(trial_id)
            if trial is None:
                out.append(NotFound(f"trial {trial_id} not found in study {study_id}", field="trial_id"))
                continue
            if trial.state == "waiting":
                out.append(Conflict(f"trial {trial.number} is enqueued: an ask hands it out before it can be told",
                                    field="trial_id", code="trial_waiting"))
                continue
            # a trial expired for silence is still running as far as its worker knows:
            # its tell is recorded (late, not lost); only a failed one changes nothing
            late = expired(trial)
            if late and state == "failed":
                out.append((trial_view(trial), False))
                continue
            if trial.state != "running" and not late:
                if trial.state == state and same_value(trial.value, value) and \
                        (constraints is None or trial.constraints == constraints) and \
                        (values is None or trial.values == values):
                    changed = _new_attrs(trial.user_attrs, attrs)
                    if changed:  # a finished trial's attributes are its record: not rewritten by a repeat
                        out.append(Conflict(f"trial {trial.number} already finished with other user attributes "
                                            f"({', '.join(map(repr, changed[:5]))}): a repeated tell may only "
                                            "repeat them", field="user_attrs", code="trial_finished"))
                    else:
                        out.append((trial_view(trial), False))
                    continue
                told = f"{trial.state}" + (f" with value {trial.value!r}" if trial.value is not None else "")
                out.append(Conflict(f"trial {trial.number} already finished as {told}",
                                    field="state" if trial.state != state else "value",
                                    code="trial_finished"))
                continue
            interrupted = item.interrupted
            if trial.origin in ("added", "enqueued") and (why := _not_configuration(sd, trial.params)) is not None:
                # a trial its caller ran with some of its parameters set: no fit can place it
                if state == "complete":
                    out.append(InvalidRequest(f"trial {trial.number} cannot complete with these parameters: {why}",
                                              field="params", code="incomplete_params"))
                    continue
                interrupted, value = state == "failed", None  # failed: not its configuration's doing
            if state == "complete":
                pred = None if trial.prediction is None else Prediction.from_storage(trial.prediction, trial.points)
                if adaptive is None:
                    adaptive = StudyState.from_dict(tx.study.state)
                outcome = values if sd.multi else value
                assert outcome is not None  # check_outcome gives a completed trial its value(s)
                adaptive, record = adaptive.adapt(pred, outcome, constraints)
                adapted = adapted or record is not None
                better = feasible(constraints) and sd.better(value, tx.study.best_value)
                tx.finish(trial, "complete", value, None if record is None else record.to_dict(), better,
                          constraints=constraints, values=values, user_attrs=attrs)
            else:
                tx.finish(trial, state, value, {"reason": INTERRUPTED} if interrupted else None,
                          constraints=constraints, user_attrs=attrs)
            out.append((trial_view(trial), True))
        if adapted and adaptive is not None:
            tx.set_state(adaptive.to_dict())
        n_complete = tx.study.n_complete
        return [r if isinstance(r, Exception) else Told(*r, n_complete) for r in out]


def _not_configuration(sd: StudyDef, params: dict[str, Any]) -> str | None:
    """Why ``params`` is not a configuration of the study's space (a parameter it needs is missing), or
    None when it is one."""
    try:
        sd.space.validate(params)
    except FieldError as e:
        return f"{e.field}: {e.message}"
    return None


def _new_attrs(stored: dict[str, Any] | None, told: dict[str, Any] | None) -> list[str]:
    """The keys of ``told`` that ``stored`` lacks or holds with another value (JSON equality: ``1`` and
    ``1.0`` are the same number, ``true`` is not ``1``)."""
    stored = stored or {}
    return [k for k, v in (told or {}).items() if k not in stored or not _same_json(stored[k], v)]


def _same_json(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b
