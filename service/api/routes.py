"""The v1 routes. They call ``StudyService``, which persists first and never blocks
on a fit longer than the study allows. Most handlers are plain functions (run on
the thread pool); ask and tell are coroutines whose batches run on a worker
thread (see ``calibo.server.batching``), so the hot path costs no hand-off per request."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import unquote

import anyio.to_thread
from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request, Response, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer

from .. import finite
from ..studies import StudyService, trial_view
from ..studies import attrs as study_attrs
from ..studies import views as V
from . import schemas as S

ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": S.ErrorBody, "description": d} for s, d in (
        (400, "malformed request (JSON, Content-Length)"), (401, "no valid token (when auth is on)"),
        (403, "a read token writing"), (404, "unknown study or trial"), (408, "the body came too slowly"),
        (409, "conflict"), (413, "the body is too large"), (422, "a field is invalid: `field` names it"),
        (503, "the database is unreachable: retry after `Retry-After` seconds"))
}

# the longest name create accepts, percent-encoded: MAX_NAME characters of up to 4 UTF-8 bytes, each "%XX"
StudyRef = Annotated[str, Path(min_length=1, max_length=12 * S.MAX_NAME,
                               description="the study's name (URL-encoded: `/` as `%2F`) or its id; a name "
                               "made only of digits is read as an id unless `by=name`")]
By = Annotated[Literal["id", "name"] | None, Query(description="read `study` as an id or as a name (default: "
                                                    "an id when it is digits, else a name)")]
TrialId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the trial's id")]


def _resolve(svc: StudyService, study: str, by: str | None) -> int:
    return svc.resolve(unquote(study), by)


async def _aresolve(svc: StudyService, study: str, by: str | None) -> int:
    """``_resolve`` for the coroutine routes: an id costs nothing, a name one lookup on a thread."""
    ref = unquote(study)
    if by != "name" and ref.isascii() and ref.isdigit():
        return svc.resolve(ref, by)
    return await anyio.to_thread.run_sync(svc.resolve, ref, by)


def _default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat().replace("+00:00", "Z")
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def fast_json(content: Any) -> Response:
    """The hot paths (ask, tell) skip FastAPI's response re-validation: the documented
    ``response_model`` still describes them, and tests check the bodies against it."""
    return Response(finite.dumps(content, default=_default, separators=(",", ":")), media_type="application/json")


class FiniteJSON(JSONResponse):
    """The answer of a route without a response model (computed views: calibration, importance):
    written by ``finite.dumps``, so a number no JSON can hold never fails the request."""

    def render(self, content: Any) -> bytes:
        return finite.dumps(content, default=_default, ensure_ascii=False, separators=(",", ":")).encode()


async def service(request: Request) -> StudyService:
    return request.app.state.studies


Svc = Annotated[StudyService, Depends(service)]


# Auth is enforced by api.middleware.BearerAuth before a body is read; this only documents it.
bearer = HTTPBearer(auto_error=False, description="CALIBO_API_TOKENS: any token reads; write tokens write")

router = APIRouter(prefix="/v1", responses=ERRORS)
# included with dependencies=[AUTH_DOC] only when tokens are configured, so the document says
# Authorization is required exactly when it is
AUTH_DOC = Security(bearer)


SystemAttrs = Annotated[bool, Query(description="with each study's `system_attrs` (an Optuna storage's: they may "
                                               "be many)")]


@router.post("/studies", status_code=201, response_model=S.StudyView, tags=["studies"],
             summary="Create a study (idempotent: an identical definition answers 200)",
             responses={200: {"model": S.StudyView, "description": "the identical study already exists"}})
def create_study(body: S.StudyCreate, response: Response, svc: Svc) -> V.StudyView:
    info, created = svc.create(body.name, body.plain_space(), body.direction, body.surrogate, body.acquisition,
                               body.seed, body.plain_settings(), body.plain_pruner(), body.constraints,
                               body.user_attrs, body.directions, body.learn_failures)
    if not created:
        response.status_code = 200
    return svc.view(info)


@router.get("/studies", response_model=S.StudyPage, tags=["studies"], summary="A page of studies, by id",
            description="Summaries (no space or settings): GET /v1/studies/{id} has the whole view.")
def list_studies(
    svc: Svc,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    name: Annotated[S.Name | None, Query(description="only the study of this name")] = None,
    system_attrs: SystemAttrs = False,
) -> dict[str, Any]:
    infos, total = svc.storage.list_studies(limit, offset, name)
    summaries = [svc.summary(i) for i in infos]
    if system_attrs:
        for out, info in zip(summaries, infos, strict=True):
            out["system_attrs"] = info.system_attrs or {}
    return {"studies": summaries, "total": total, "limit": limit, "offset": offset}


@router.get("/studies/{study}", response_model=S.StudyView, tags=["studies"],
            summary="A study: definition, trial counts, best trial, surrogate and adaptive state")
def get_study(study: StudyRef, svc: Svc, by: By = None, system_attrs: SystemAttrs = False) -> V.StudyView:
    info = svc.storage.get_study(_resolve(svc, study, by))
    view = svc.view(info)
    if system_attrs:
        view["system_attrs"] = info.system_attrs or {}
    return view


@router.delete("/studies/{study}", status_code=204, tags=["studies"], summary="Delete a study and its trials")
def delete_study(study: StudyRef, svc: Svc, by: By = None) -> Response:
    svc.delete(_resolve(svc, study, by))
    return Response(status_code=204)


@router.post("/studies/{study}/copy", status_code=201, response_model=S.StudyView, tags=["studies"],
             summary="Copy a study: the same definition and every finished trial, under a new name",
             description="The copies keep their values, constraints and attributes (origin `copied`) and "
             "feed the new study's first fit; they have no prediction, so its calibration starts fresh. "
             "409 `name_conflict` when the name exists.")
def copy_study(study: StudyRef, body: S.CopyRequest, svc: Svc, by: By = None) -> V.StudyView:
    info, _ = svc.copy(_resolve(svc, study, by), body.name, body.user_attrs)
    return svc.view(info)


@router.patch("/studies/{study}/user_attrs", response_model=S.StudyAttrs, tags=["studies"],
              summary="Set and delete a study's user attributes",
              description="`set` adds or replaces keys, `delete` removes keys (one the study lacks is ignored), "
              "in one transaction: concurrent changes of different keys all land, and the same change again "
              "changes nothing. The attributes after the change must stay within the bounds of `user_attrs` at "
              "creation (422 naming `set` otherwise, and nothing changes). Answers the study's attributes.")
def change_study_attrs(study: StudyRef, body: S.StudyAttrsChange, svc: Svc, by: By = None) -> dict[str, Any]:
    return {"user_attrs": study_attrs.change_study_attrs(svc.storage, _resolve(svc, study, by), body.set,
                                                         body.delete)}


@router.patch("/studies/{study}/system_attrs", response_model=S.StudySystemAttrs, tags=["studies"],
              summary="Set and delete a study's system attributes",
              description="As PATCH .../user_attrs, on the attributes kept apart from the user's (an Optuna "
              "storage's system attributes: a sampler's or Optuna's own bookkeeping; at most 100000 keys and 64 "
              "MiB as JSON). Answers the keys set, with their values.")
def change_study_system_attrs(study: StudyRef, body: S.StudyAttrsChange, svc: Svc, by: By = None
                              ) -> dict[str, Any]:
    after = study_attrs.change_study_attrs(svc.storage, _resolve(svc, study, by), body.set, body.delete,
                                           "system_attrs")
    return {"system_attrs": {k: after[k] for k in body.set or {}}}


@router.patch("/studies/{study}/space", response_model=S.StudyView, tags=["studies"],
              summary="Grow a study's space: new parameters, new choices, wider ranges",
              description="Adds each parameter the space lacks, and grows each existing one given: new choices, a "
              "wider range, more parent values in its condition. Only growth: removing a parameter or a choice, "
              "narrowing a range, changing a type, a scale or a condition's parent is a 422 naming the field, and "
              "nothing changes. The trials already told keep their values; a new parameter is inactive for them "
              "(as a conditional parameter whose condition does not hold: `grown` in the space), and every ask "
              "after the change holds it where it is active. The change waits for the study's asks and tells in "
              "flight and is one transaction; the surrogate is refitted on the new space (until then asks draw "
              "from the study's quasi-random sequence, or wait for the refit as any ask does). The same change "
              "again changes nothing. Answers the study view.")
def grow_space(study: StudyRef, body: S.SpaceGrowth, svc: Svc, by: By = None) -> V.StudyView:
    info, _ = svc.grow_space(_resolve(svc, study, by), body.plain_space())
    return svc.view(info)


@router.get("/studies/{study}/pareto", response_model=S.ParetoView, tags=["studies"],
            summary="A multi-objective study's Pareto front and hypervolume",
            description="The non-dominated completed trials (feasible ones only, when the study has constraints), "
            "the hypervolume they dominate up to the reference point, and the hypervolume after each completed "
            "trial. 409 `not_multi_objective` for a study with one objective.")
def get_pareto(study: StudyRef, svc: Svc, by: By = None) -> V.ParetoView:
    return svc.pareto(_resolve(svc, study, by))


@router.post("/studies/{study}/enqueue", status_code=201, response_model=S.EnqueuedTrial, tags=["trials"],
             summary="Queue a configuration (or part of one) for the next asks",
             description="Asks hand enqueued trials out first, oldest first, each to exactly one worker; "
             "parameters left out are chosen then. With `skip_if_exists` (default) a trial that already has "
             "these parameter values is answered with 200 instead.",
             responses={200: {"model": S.EnqueuedTrial, "description": "a trial with these values exists"}})
def enqueue(study: StudyRef, body: S.EnqueueRequest, response: Response, svc: Svc, by: By = None
            ) -> V.EnqueuedView:
    trial, created = svc.enqueue(_resolve(svc, study, by), body.params, body.skip_if_exists, body.user_attrs)
    if not created:
        response.status_code = 200
    return trial


@router.delete("/studies/{study}/trials/{trial_id}", status_code=204, tags=["trials"],
               summary="Remove an enqueued trial no ask has handed out yet",
               description="Takes a `waiting` trial (see enqueue) off the queue: no ask hands it out, and its "
               "number is not reused. 409 `trial_not_waiting` for a trial an ask handed out (running or "
               "finished: tell it instead); 404 for an unknown trial.")
def dequeue(study: StudyRef, trial_id: TrialId, svc: Svc, by: By = None) -> Response:
    svc.dequeue(_resolve(svc, study, by), trial_id)
    return Response(status_code=204)


@router.post("/studies/{study}/trials", status_code=201, response_model=S.TrialList, tags=["trials"],
             summary="Add trials evaluated elsewhere",
             description="One trial, or `{\"trials\": [...]}` (up to 1000, stored all or none): `params` "
             "(exactly the active ones) and `value`, or `state: failed` (or `pruned`, with or without a value); a "
             "constrained study's `constraints`; "
             "`user_attrs`. They count in the next fit and in the best trial; they have no prediction, so "
             "they never move the calibration state (origin `added`). `state: running` (or `waiting`) adds a "
             "trial its caller runs itself, with the parameters it has so far: PATCH .../trials/{tid} sets the "
             "others as they are drawn, tell ends it (define-by-run, as Optuna's storage API does it). An "
             "imported trial may carry its `system_attrs`, `distributions`, `intermediate_values`, "
             "`started_at` and `finished_at`.")
def add_trials(study: StudyRef, body: Annotated[S.AddBody, Body()], svc: Svc,
               by: By = None) -> dict[str, Any]:
    rows = body.trials if isinstance(body, S.AddTrialsRequest) else [body]
    return {"trials": svc.add(_resolve(svc, study, by), [r.model_dump(exclude_none=True) for r in rows])}


@router.patch("/studies/{study}/trials/{trial_id}", response_model=S.TrialView, tags=["trials"],
              summary="Change a waiting or running trial: parameters, attributes, learning-curve points, start",
              description="A trial its caller runs itself (added with `state: running` or `waiting`) takes its "
              "parameters one change at a time, as define-by-run code draws them (Optuna's storage API): each "
              "known to the space (grow the space first for a new one) and valid there as the trial's parameters "
              "then stand, with the distribution it was drawn from if the caller keeps one. Any trial still "
              "running or waiting takes `user_attrs`, `system_attrs` and `intermediate_values` (set or replaced; "
              "no pruning decision: POST .../report asks the pruner), and `state: running` starts a waiting trial "
              "(409 `trial_running` if it has started). A finished trial answers 409 `trial_finished`; an asked "
              "trial's parameters are the ask's (409 `trial_asked`). A change of a running trial is a heartbeat. "
              "Its tell needs a configuration of the space (422 `incomplete_params` otherwise); told failed "
              "without one, it is failed as interrupted (no fit learns from it).")
def change_trial(study: StudyRef, trial_id: TrialId, body: S.TrialChange, svc: Svc, by: By = None) -> V.TrialView:
    return svc.update_trial(_resolve(svc, study, by), trial_id, body.model_dump(exclude_none=True))


@router.post("/studies/{study}/ask", response_model=S.AskResponse, tags=["trials"],
             summary="Suggest configurations to evaluate",
             description="Distinct configurations, none observed or running; enqueued ones first. Each "
             "comes with the calibrated prediction it was chosen on (null during the warm start and for "
             "enqueued trials).")
async def ask(
    study: StudyRef, svc: Svc, body: Annotated[S.AskRequest | None, Body()] = None, by: By = None,
    idempotency_key: Annotated[str | None, Header(
        alias="Idempotency-Key", pattern=S.IDEMPOTENCY_KEY,
        description="makes the ask safe to retry: an ask with a key already used on this study answers "
        "the trials that key created (whatever their state now) instead of new ones")] = None,
) -> Response:
    body = body or S.AskRequest()
    sid = await _aresolve(svc, study, by)
    return fast_json({"trials": await svc.ask(sid, body.count, body.worker_id, idempotency_key,
                                                       body.user_attrs)})


@router.post("/studies/{study}/trials/{trial_id}/tell", response_model=S.TrialView, tags=["trials"],
             summary="Report a trial's result (idempotent)",
             description="`value` completes the trial; `state` failed or pruned ends it without one; a "
             "constrained study's completed trial carries `constraints`. The same tell again answers 200 and "
             "changes nothing; a different one answers 409.")
async def tell(study: StudyRef, trial_id: TrialId, body: S.TellRequest, svc: Svc, by: By = None) -> Response:
    sid = await _aresolve(svc, study, by)
    view, _ = await svc.tell(sid, trial_id, body.value, body.state, body.constraints, body.user_attrs,
                             body.values, body.interrupted)
    return fast_json(view)


@router.post("/studies/{study}/trials/{trial_id}/report", response_model=S.ReportResponse, tags=["trials"],
             summary="Report a learning-curve point of a running trial; should it stop?",
             description="Stored once per (trial, step): the same step and value again answers the same "
             "decision, another value 409 `step_reported`. A finished trial answers 409 `trial_finished`, "
             "an expired one 409 `trial_expired`. The decision is the study's pruner on every stored curve; "
             "stop the trial, then tell it with state pruned (and its last value, optionally). A report is "
             "also a heartbeat.")
def report(study: StudyRef, trial_id: TrialId, body: S.ReportRequest, svc: Svc, by: By = None) -> dict[str, Any]:
    return {"should_prune": svc.report(_resolve(svc, study, by), trial_id, body.step, body.value)}


@router.post("/studies/{study}/trials/{trial_id}/heartbeat", status_code=204, tags=["trials"],
             summary="Mark a running trial alive",
             description="A trial silent for longer than its study's heartbeat timeout has expired: the "
             "heartbeat answers 409 `trial_expired` and the trial is failed, but a tell of it is still "
             "recorded. A finished trial answers 409 `trial_finished`.")
def heartbeat(study: StudyRef, trial_id: TrialId, svc: Svc, by: By = None) -> Response:
    svc.heartbeat(_resolve(svc, study, by), trial_id)
    return Response(status_code=204)


@router.get("/studies/{study}/trials", response_model=S.TrialPage, tags=["trials"],
            summary="A page of trials, by number")
def list_trials(
    study: StudyRef, svc: Svc,
    state: Annotated[S.TrialState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    origin: Annotated[Literal["asked", "enqueued", "added", "copied"] | None, Query(
        description="only trials that came this way (asked: chosen by an ask)")] = None,
    user_attr: Annotated[list[Annotated[str, Query(pattern=r"^[^:\x00]{1,128}:[^\x00]*$")]] | None, Query(
        max_length=16, description="`key:value`, repeatable: only trials whose string user attribute `key` "
        "is `value`")] = None,
    curves: Annotated[bool, Query(description="with each trial's learning-curve points "
                                  "(`intermediate_values`)")] = False,
    number_from: Annotated[int | None, Query(ge=0, le=2**31 - 1, description="only trials numbered this or "
                                             "later (a reader that holds the finished ones before it)")] = None,
    by: By = None,
) -> dict[str, Any]:
    attrs = dict(a.split(":", 1) for a in user_attr or ())  # the pattern refused NUL: PostgreSQL cannot compare it
    rows, total = svc.storage.list_trials(_resolve(svc, study, by), state, limit, offset, attrs, origin, number_from)
    return {"trials": _views(svc, rows, curves), "total": total, "limit": limit, "offset": offset}


Curves = Annotated[bool, Query(description="with each trial's learning-curve points (`intermediate_values`)")]


def _views(svc: StudyService, rows: list[Any], curves: bool) -> list[V.TrialView]:
    views = [trial_view(t) for t in rows]
    if curves:
        points = svc.storage.intermediate_of([t.id for t in rows])
        for v in views:
            v["intermediate_values"] = {str(k): x for k, x in points.get(v["id"], {}).items()}
    return views


@router.get("/studies/{study}/trials/{trial_id}", response_model=S.TrialView, tags=["trials"],
            summary="One trial")
def get_trial(study: StudyRef, trial_id: TrialId, svc: Svc, by: By = None, curves: Curves = False) -> V.TrialView:
    return _views(svc, [svc.storage.get_trial(_resolve(svc, study, by), trial_id)], curves)[0]


@router.get("/trials/{trial_id}", response_model=S.TrialView, tags=["trials"],
            summary="One trial, by its id alone (ids are unique across studies: `study_id` names its study)")
def get_trial_by_id(trial_id: TrialId, svc: Svc, curves: Curves = False) -> V.TrialView:
    return _views(svc, [svc.storage.trial_by_id(trial_id)], curves)[0]


@router.get("/studies/{study}/curves", response_model=S.CurvePage, tags=["trials"],
            summary="Learning curves: the reported points of each trial, a page of trials by number")
def curves(
    study: StudyRef, svc: Svc,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    by: By = None,
) -> dict[str, Any]:
    rows, total = svc.storage.curves(_resolve(svc, study, by), limit, offset)
    out: dict[int, dict[str, Any]] = {}
    for tid, number, state, step, value in rows:
        c = out.setdefault(tid, {"trial_id": tid, "number": number, "state": state, "steps": [], "values": []})
        c["steps"].append(step)
        c["values"].append(value)
    return {"curves": list(out.values()), "total": total, "limit": limit, "offset": offset}


@router.get("/studies/{study}/importance", tags=["calibration"], response_class=FiniteJSON,
            response_model=dict[str, Any],  # not the annotation's TypedDict, which FastAPI would validate by
            summary="Each parameter's importance, from a surrogate fitted on the completed trials",
            description="A first-order functional-ANOVA decomposition of a quantile-GBM surrogate fitted on "
            "the study's completed trials (`objective`: which objective of a multi-objective study): "
            "`importances` (most important first) holds each parameter's share of the model's variance "
            "(`importance`, summing to 1) and its 10th-90th percentile band over 8 bootstrap refits "
            "(`low`, `high`); `fit.r2_oob` is the refits' out-of-bag R^2 (near 0 or below: the model "
            "explains little and the importances describe noise). Cached until the next result. Before 4 completed "
            "trials `importances` is empty and `reason` says why.")
def importance(study: StudyRef, svc: Svc, by: By = None,
               objective: Annotated[int, Query(ge=0, le=3, description="objective index")] = 0) -> V.ImportanceView:
    return svc.importance(_resolve(svc, study, by), objective)


@router.get("/studies/{study}/calibration", tags=["calibration"], response_class=FiniteJSON,
            response_model=dict[str, Any],  # not the annotation's TypedDict, which FastAPI would validate by
            summary="Prediction at ask vs outcome, coverage, breach rate, width, alpha trajectory",
            description="`trials`: for each completed trial that had a prediction, its intervals "
            "(bounds, null where unbounded; alpha used; covered) and quantiles at ask, and the outcome. "
            "`cumulative_coverage` and `rolling_coverage` (trailing `window` trials) per interval pair "
            "after each trial; `alpha_trajectory`: the alphas the intervals were built at; `summary` "
            "(all predicted trials) and `conformal` (conformalized ones only): coverage, breach rate, "
            "rolling coverage error over windows of 20, mean width of the bounded intervals, share of unbounded "
            "ones, LLR of breaches vs params, RMSCE.")
def calibration(study: StudyRef, svc: Svc, by: By = None) -> V.CalibrationView:
    return svc.calibration(_resolve(svc, study, by))
