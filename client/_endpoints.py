"""The calibo v1 API as :class:`Call` values: paths, bodies and answer parsers."""

from __future__ import annotations

import math
import operator
import os
import re
import sys
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast
from urllib.parse import quote

import httpx

from ._core import Call, Safety, invalid_response, json_object, no_content
from .models import Trial, TrialRecord

if TYPE_CHECKING:
    from ._study import AsyncStudy, Study

TRIAL_STATES = ("failed", "pruned")
IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")

# A study is named by its id (an int, or a string of digits), its name (any other string), its view
# (a dict with "id"), a Study handle or a ByName; a trial by its id, a Trial or a TrialRecord.
StudyRef: TypeAlias = "int | str | dict[str, Any] | Study | AsyncStudy"
TrialRef = Any


class ByName(str):
    """A study name to be read as a name even when it is made of digits (``?by=name``)."""


def _is_id(study: Any) -> bool:
    return not isinstance(study, str) or (not isinstance(study, ByName) and study.isascii()
                                           and study.strip().isdigit())


def _study_query(study: Any, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The query a call on ``study`` carries: ``by=name`` for a name made of digits."""
    if isinstance(study, ByName) and study.isascii() and study.isdigit():
        return {**(params or {}), "by": "name"}
    return params


def _ident(value: Any, what: str) -> int:
    """An id for a URL path: an int (or a string of digits), never anything else."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not bool")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise TypeError(f"{what} must be an int, got {value!r}")


def study_id_of(study: Any) -> int:
    """The id of a study given as an id, a study view dict or a ``Study`` handle."""
    if isinstance(study, dict):
        if "id" not in study:
            raise ValueError("a study view needs an 'id'")
        return _ident(study["id"], "study['id']")
    if isinstance(getattr(study, "view", None), dict):  # Study / AsyncStudy
        return _ident(study.id, "study.id")
    return _ident(study, "study")


def trial_id_of(trial: Any) -> int:
    """The id of a trial given as an id, a :class:`Trial` or a :class:`TrialRecord`."""
    if isinstance(trial, Trial | TrialRecord):
        return trial.id
    return _ident(trial, "trial_id")


def _study(study: Any) -> str:
    """The path of a study: by id, or by its URL-encoded name (``/`` as ``%2F``)."""
    if _is_id(study):
        return f"/v1/studies/{study_id_of(study)}"
    if not study:
        raise ValueError("a study name must not be empty")
    return f"/v1/studies/{quote(study, safe='')}"


def _trial(study: Any, trial: Any) -> str:
    return f"{_study(study)}/trials/{trial_id_of(trial)}"


def _list_of(key: str) -> Callable[[httpx.Response], list[dict[str, Any]]]:
    def parse(response: httpx.Response) -> list[dict[str, Any]]:
        items = json_object(response).get(key)
        if not isinstance(items, list):
            raise invalid_response(response, f"a list under {key!r}")
        return items

    return parse


def _says_down(response: httpx.Response) -> bool:
    if response.status_code != 503:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") == "unavailable"


def health() -> Call[dict[str, Any]]:
    # a readiness probe: the server's own "database down" (503) is an answer now, not a reason to wait
    return Call("GET", "/healthz", json_object, answer_if=_says_down)


def create_study(
    name: str,
    space: dict[str, Any],
    direction: str | None,
    *,
    surrogate: str | None,
    acquisition: str | None,
    seed: int | None,
    settings: dict[str, Any] | None,
    pruner: str | dict[str, Any] | None = None,
    constraints: list[str] | None = None,
    user_attrs: dict[str, Any] | None = None,
    directions: Sequence[str] | None = None,
    learn_failures: bool | None = None,
) -> Call[dict[str, Any]]:
    if pruner is not None and not isinstance(pruner, str | dict):
        raise TypeError(f"pruner must be a name or a dict with a 'name', got {pruner!r}")
    if isinstance(directions, str):
        raise TypeError("directions is a list, one direction per objective, e.g. ['minimize', 'maximize']")
    if direction is not None and directions is not None:  # as Optuna's create_study
        raise ValueError("Specify only one of `direction` and `directions`.")
    body: dict[str, Any] = {"name": name, "space": space}
    if directions is not None:  # several objectives: the first is the study's direction
        body["directions"] = list(directions)
    else:
        body["direction"] = "minimize" if direction is None else direction
    optional = {
        "surrogate": surrogate,
        "acquisition": acquisition,
        "seed": seed,
        "settings": settings,
        "pruner": pruner,  # the server checks the name and the options
        "constraints": list(constraints) if constraints is not None else None,
        "user_attrs": user_attrs,
        "learn_failures": learn_failures,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    # Creating the same definition again answers 200 with the existing study.
    return Call("POST", "/v1/studies", json_object, json=body)


STUDY_PAGE = 1000  # the server's largest page


def _study_page(response: httpx.Response) -> dict[str, Any]:
    body = json_object(response)
    _list_of("studies")(response)  # checks the shape
    return body


def list_studies(offset: int = 0, name: str | None = None, system_attrs: bool = False) -> Call[dict[str, Any]]:
    """One page of study summaries (``{"studies", "total", ...}``); see ``next_offset``."""
    params: dict[str, Any] = {"limit": STUDY_PAGE, "offset": offset}
    if system_attrs:
        params["system_attrs"] = "true"
    if name is not None:
        params["name"] = name
    return Call("GET", "/v1/studies", _study_page, params=params)


def get_study(study_id: StudyRef, system_attrs: bool = False) -> Call[dict[str, Any]]:
    return Call("GET", _study(study_id), json_object,
                params=_study_query(study_id, {"system_attrs": "true"} if system_attrs else None))


def get_trial(study_id: StudyRef, trial_id: TrialRef) -> Call[dict[str, Any]]:
    return Call("GET", _trial(study_id, trial_id), json_object, params=_study_query(study_id))


def trial_by_id(trial_id: TrialRef, curves: bool = False) -> Call[dict[str, Any]]:
    return Call("GET", f"/v1/trials/{trial_id_of(trial_id)}", json_object,
                params={"curves": "true"} if curves else None)


def delete_study(study_id: StudyRef) -> Call[None]:
    return Call("DELETE", _study(study_id), no_content, gone_means_done=True, params=_study_query(study_id))


def ask(
    study_id: StudyRef, count: int, worker_id: str | None, idempotency_key: str | None = None,
    user_attrs: dict[str, Any] | None = None,
) -> Call[list[Trial]]:
    sid = study_id_of(study_id) if _is_id(study_id) else None
    list_trials = _list_of("trials")
    if idempotency_key is None:
        idempotency_key = uuid.uuid4().hex
    elif not isinstance(idempotency_key, str) or not IDEMPOTENCY_KEY.fullmatch(idempotency_key):
        raise ValueError(
            f"idempotency_key must be 1-64 characters of [A-Za-z0-9_-], got {idempotency_key!r}"
        )

    def parse(response: httpx.Response) -> list[Trial]:
        return [Trial.from_wire(item, sid) for item in list_trials(response)]

    # Every try of this call carries the same key, and the server answers a
    # repeated key with the trials it made the first time: safe to retry.
    return Call(
        "POST",
        f"{_study(study_id)}/ask",
        parse,
        json={"count": count, "worker_id": worker_id,
              **({"user_attrs": user_attrs} if user_attrs is not None else {})},
        headers={"Idempotency-Key": idempotency_key},
        params=_study_query(study_id),
    )


def _not_text(value: Any, what: str) -> None:
    """A number given as text is refused (TypeError, as Optuna's ``Study.tell``), never parsed."""
    if isinstance(value, str | bytes):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise TypeError(f"{what} must be a number, not {type(value).__name__} {shown}")


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a number, not bool")
    _not_text(value, what)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what} must be finite, got {number!r}")
    return number


def tell_body(
    value: float | Sequence[float] | None,
    state: str | None,
    constraints: Sequence[float] | None = None,
    user_attrs: dict[str, Any] | None = None,
    interrupted: bool = False,
) -> dict[str, Any]:
    """A tell's body; ``value`` a list (or tuple) of numbers: a multi-objective study's ``values``;
    ``interrupted``: a failed trial whose run was stopped from outside (not learned as a failure)."""
    if value is None and state is None:
        raise ValueError("tell needs a value, a state ('failed' or 'pruned'), or both")
    if state is not None and state not in TRIAL_STATES:
        raise ValueError(f"state must be one of {TRIAL_STATES}, got {state!r}")
    body: dict[str, Any] = {}
    if isinstance(value, list | tuple):
        body["values"] = [_finite(v, "a value") for v in value]
    elif value is not None:
        _not_text(value, "value")
        number = float(cast(float, value))  # a bool is the number it stands for, as in Optuna
        if not math.isfinite(number):
            raise ValueError(f"value must be finite, got {number!r}; tell state='failed' instead")
        body["value"] = number
    if state is not None:
        body["state"] = state
    if constraints is not None:
        body["constraints"] = [_finite(c, "a constraint value") for c in constraints]
    if user_attrs is not None:
        body["user_attrs"] = dict(user_attrs)
    if interrupted:
        body["interrupted"] = True
    return body


def unacceptable(value: float | Sequence[float] | None, state: str | None) -> str | None:
    """Why a tell of ``value`` with no ``state`` is a failed trial, as Optuna's ``Study.tell`` has it:
    a value (or one of a multi-objective trial's values) that is NaN, or infinite (a number calibo
    does not store); None when it is not (text and other non-numbers are ``tell_body``'s to refuse)."""
    if state is not None or value is None:
        return None
    values = value if isinstance(value, list | tuple) else [value]
    for v in values:
        if isinstance(v, int | float) and not isinstance(v, bool) and not math.isfinite(v):
            why = "as in Optuna" if math.isnan(v) else "calibo stores finite values only"
            return f"The value {v!r} is not acceptable: the trial is told failed ({why})."
    return None


def warn_outside(message: str) -> None:
    """A UserWarning attributed to the first caller outside this package (the user's line)."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


def tell(
    study_id: StudyRef,
    trial_id: TrialRef,
    value: float | Sequence[float] | None,
    state: str | None,
    constraints: Sequence[float] | None = None,
    user_attrs: dict[str, Any] | None = None,
    interrupted: bool = False,
) -> Call[dict[str, Any]]:
    # The same tell again answers 200, so it is safe to retry.
    path = f"{_trial(study_id, trial_id)}/tell"
    return Call("POST", path, json_object, json=tell_body(value, state, constraints, user_attrs, interrupted),
                params=_study_query(study_id))


def enqueue(
    study_id: StudyRef,
    params: dict[str, Any],
    skip_if_exists: bool = True,
    user_attrs: dict[str, Any] | None = None,
) -> Call[dict[str, Any]]:
    # skip_if_exists makes a repeat answer the trial the first try enqueued: safe to retry then.
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {params!r}")
    body: dict[str, Any] = {"params": params, "skip_if_exists": bool(skip_if_exists)}
    if user_attrs is not None:
        body["user_attrs"] = dict(user_attrs)
    return Call("POST", f"{_study(study_id)}/enqueue", json_object, json=body, params=_study_query(study_id),
                safety=Safety.IDEMPOTENT if skip_if_exists else Safety.UNSENT_ONLY)


def dequeue(study_id: StudyRef, trial_id: TrialRef) -> Call[None]:
    # a repeat after a lost answer finds the trial gone: done, as for delete_study
    return Call("DELETE", _trial(study_id, trial_id), no_content, gone_means_done=True,
                params=_study_query(study_id))


def add_trials(study_id: StudyRef, rows: list[dict[str, Any]]) -> Call[list[dict[str, Any]]]:
    # Not idempotent (each try would add the trials again): retried only when surely unsent.
    return Call("POST", f"{_study(study_id)}/trials", _list_of("trials"), json={"trials": rows},
                params=_study_query(study_id), safety=Safety.UNSENT_ONLY)


def copy_study(study_id: StudyRef, name: str, user_attrs: dict[str, Any] | None = None) -> Call[dict[str, Any]]:
    body: dict[str, Any] = {"name": name}
    if user_attrs is not None:
        body["user_attrs"] = dict(user_attrs)
    # a repeat after a lost answer is a 409 name_conflict, never a second copy
    return Call("POST", f"{_study(study_id)}/copy", json_object, json=body, params=_study_query(study_id),
                safety=Safety.UNSENT_ONLY)


def _attrs(kind: str) -> Callable[[httpx.Response], dict[str, Any]]:
    def parse(response: httpx.Response) -> dict[str, Any]:
        attrs = json_object(response).get(kind)
        if not isinstance(attrs, dict):
            raise invalid_response(response, f"an object under {kind!r}")
        return attrs
    return parse


def change_study_attrs(study_id: StudyRef, put: dict[str, Any] | None = None,
                       drop: Sequence[str] | None = None, kind: str = "user_attrs") -> Call[dict[str, Any]]:
    """Set ``put`` and delete ``drop`` in a study's user attributes (``kind="system_attrs"``: its
    system attributes); answers them all after."""
    body: dict[str, Any] = {}
    for key in [*(put or {}), *(drop or ())]:
        if not isinstance(key, str):
            raise TypeError(f"an attribute's key must be a str, got {key!r}")
    if put:
        body["set"] = dict(put)
    if drop:
        body["delete"] = list(drop)
    # the same change again changes nothing: safe to retry
    return Call("PATCH", f"{_study(study_id)}/{kind}", _attrs(kind), json=body, params=_study_query(study_id))



def start_trial(study_id: StudyRef, trial: dict[str, Any]) -> Call[dict[str, Any]]:
    """Add one trial its caller runs itself (``trial``: an added trial's body with ``state`` running or
    waiting, or an imported finished one); answers its view."""
    def parse(response: httpx.Response) -> dict[str, Any]:
        (view,) = _list_of("trials")(response)
        return view
    # not idempotent (each try would add a trial): retried only when surely unsent
    return Call("POST", f"{_study(study_id)}/trials", parse, json=trial, params=_study_query(study_id),
                safety=Safety.UNSENT_ONLY)


def change_trial(study_id: StudyRef, trial_id: TrialRef, change: dict[str, Any]) -> Call[dict[str, Any]]:
    """Change a waiting or running trial (PATCH): parameters, distributions, attributes, learning-curve
    points, ``state: running``; answers its view. The same change again sets the same values (safe to
    retry), but for ``state: running``, whose repeat is a 409 ``trial_running``."""
    safety = Safety.UNSENT_ONLY if change.get("state") else Safety.IDEMPOTENT
    return Call("PATCH", _trial(study_id, trial_id), json_object, json=change, params=_study_query(study_id),
                safety=safety)


def grow_space(study_id: StudyRef, space: dict[str, Any]) -> Call[dict[str, Any]]:
    if not isinstance(space, dict) or not space:
        raise TypeError("space maps each new (or grown) parameter's name to its definition, e.g. "
                        "{'depth': {'type': 'int', 'low': 1, 'high': 8}}")
    # the same growth again changes nothing: safe to retry
    return Call("PATCH", f"{_study(study_id)}/space", json_object, json={"space": space},
                params=_study_query(study_id))


def report_body(step: int, value: float) -> dict[str, Any]:
    if isinstance(step, bool):
        raise TypeError("step must be an int, not bool")
    try:
        step = operator.index(step)
    except TypeError as exc:
        raise TypeError(f"step must be an int, got {step!r}") from exc
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if isinstance(value, bool):
        raise TypeError("value must be a number, not bool")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(
            f"value must be finite, got {number!r}; raise TrialPruned or tell state='failed' instead"
        )
    return {"step": step, "value": number}


def _should_prune(response: httpx.Response) -> bool:
    answer = json_object(response).get("should_prune")
    if not isinstance(answer, bool):
        raise invalid_response(response, "a bool under 'should_prune'")
    return answer


def report(study_id: StudyRef, trial_id: TrialRef, step: int, value: float) -> Call[bool]:
    # One value per (trial, step): the same report again answers the same decision,
    # so it is safe to retry; a different value for a reported step is a 409.
    path = f"{_trial(study_id, trial_id)}/report"
    return Call("POST", path, _should_prune, json=report_body(step, value), params=_study_query(study_id))


def heartbeat(study_id: StudyRef, trial_id: TrialRef) -> Call[None]:
    return Call("POST", f"{_trial(study_id, trial_id)}/heartbeat", no_content, params=_study_query(study_id))


def trials(
    study_id: StudyRef,
    state: str | None,
    limit: int,
    offset: int,
    origin: str | None = None,
    user_attrs: dict[str, str] | None = None,
    curves: bool = False,
    number_from: int | None = None,
) -> Call[dict[str, Any]]:
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if curves:
        params["curves"] = "true"
    if number_from is not None:
        params["number_from"] = number_from
    if state is not None:
        params["state"] = state
    if origin is not None:
        params["origin"] = origin
    if user_attrs:
        params["user_attr"] = [f"{k}:{v}" for k, v in user_attrs.items()]
    return Call("GET", f"{_study(study_id)}/trials", json_object, params=_study_query(study_id, params))


def pareto(study_id: StudyRef) -> Call[dict[str, Any]]:
    return Call("GET", f"{_study(study_id)}/pareto", json_object, params=_study_query(study_id))


def calibration(study_id: StudyRef) -> Call[dict[str, Any]]:
    return Call("GET", f"{_study(study_id)}/calibration", json_object, params=_study_query(study_id))


def importance(study_id: StudyRef, objective: int = 0) -> Call[dict[str, Any]]:
    params = {**(_study_query(study_id) or {}), **({"objective": objective} if objective else {})}
    return Call("GET", f"{_study(study_id)}/importance", json_object, params=params or None)


def next_offset(page: dict[str, Any], offset: int, key: str = "trials") -> int | None:
    """Where the page after ``page`` (asked at ``offset``) starts, or None at the end."""
    items = page.get(key) or []
    if not items:
        return None
    following = offset + len(items)
    total = page.get("total")
    if isinstance(total, int) and following >= total:
        return None
    return following
