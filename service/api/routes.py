"""The v1 routes. They call ``StudyService``, which persists first and never blocks
on a fit longer than the study allows. Most handlers are plain functions (run on
the thread pool); ask and tell are coroutines whose batches run on a worker
thread (see ``service.batching``), so the hot path costs no hand-off per request."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from ..errors import Forbidden, Unauthorized
from ..studies import StudyService, trial_view
from . import schemas as S

ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": S.ErrorBody} for s in (400, 401, 403, 404, 409, 422)
}

StudyId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the study's id")]
TrialId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the trial's id")]


def _default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat().replace("+00:00", "Z")
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def fast_json(content: Any) -> Response:
    """The hot paths (ask, tell) skip FastAPI's response re-validation: the documented
    ``response_model`` still describes them, and tests check the bodies against it."""
    return Response(json.dumps(content, default=_default, separators=(",", ":"), allow_nan=False),
                    media_type="application/json")


async def service(request: Request) -> StudyService:
    return request.app.state.studies


Svc = Annotated[StudyService, Depends(service)]


async def authorize(request: Request) -> None:
    """Bearer tokens from CALIBO_API_TOKENS: any valid token reads, ``write`` tokens also write.

    Dependencies are coroutines: a plain function would cost a thread hand-off per request.
    """
    tokens: dict[str, str] = request.app.state.tokens
    if not tokens:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("an Authorization: Bearer <token> header is required", field="authorization")
    role = tokens.get(token.strip())
    if role is None:
        raise Unauthorized("invalid token", field="authorization")
    if request.method not in ("GET", "HEAD", "OPTIONS") and role != "write":
        raise Forbidden("this token may only read", field="authorization")


router = APIRouter(prefix="/v1", dependencies=[Depends(authorize)], responses=ERRORS)


@router.post("/studies", status_code=201, response_model=S.StudyView, tags=["studies"],
             summary="Create a study (idempotent: an identical definition answers 200)",
             responses={200: {"model": S.StudyView, "description": "the identical study already exists"}})
def create_study(body: S.StudyCreate, response: Response, svc: Svc) -> dict[str, Any]:
    info, created = svc.create(body.name, body.space, body.direction, body.surrogate, body.acquisition,
                               body.seed, body.settings)
    if not created:
        response.status_code = 200
    return svc.view(info)


@router.get("/studies", response_model=S.StudyList, tags=["studies"], summary="List studies")
def list_studies(svc: Svc) -> dict[str, Any]:
    return {"studies": [svc.view(i) for i in svc.storage.list_studies()]}


@router.get("/studies/{study_id}", response_model=S.StudyView, tags=["studies"],
            summary="A study: definition, trial counts, best trial, surrogate and adaptive state")
def get_study(study_id: StudyId, svc: Svc) -> dict[str, Any]:
    return svc.view(svc.storage.get_study(study_id))


@router.delete("/studies/{study_id}", status_code=204, tags=["studies"], summary="Delete a study and its trials")
def delete_study(study_id: StudyId, svc: Svc) -> Response:
    svc.delete(study_id)
    return Response(status_code=204)


@router.post("/studies/{study_id}/ask", response_model=S.AskResponse, tags=["trials"],
             summary="Suggest configurations to evaluate",
             description="Distinct configurations, none observed or running. Each comes with the "
             "calibrated prediction it was chosen on (null during the warm start).")
async def ask(study_id: StudyId, svc: Svc, body: Annotated[S.AskRequest | None, Body()] = None) -> Response:
    body = body or S.AskRequest()
    return fast_json({"trials": await svc.ask(study_id, body.count, body.worker_id)})


@router.post("/studies/{study_id}/trials/{trial_id}/tell", response_model=S.TrialView, tags=["trials"],
             summary="Report a trial's result (idempotent)",
             description="`value` completes the trial; `state` failed or pruned ends it without one. "
             "The same tell again answers 200 and changes nothing; a different one answers 409.")
async def tell(study_id: StudyId, trial_id: TrialId, body: S.TellRequest, svc: Svc) -> Response:
    view, _ = await svc.tell(study_id, trial_id, body.value, body.state)
    return fast_json(view)


@router.post("/studies/{study_id}/trials/{trial_id}/heartbeat", status_code=204, tags=["trials"],
             summary="Mark a running trial alive")
def heartbeat(study_id: StudyId, trial_id: TrialId, svc: Svc) -> Response:
    svc.storage.heartbeat(study_id, trial_id)
    return Response(status_code=204)


@router.get("/studies/{study_id}/trials", response_model=S.TrialPage, tags=["trials"],
            summary="A page of trials, by number")
def list_trials(
    study_id: StudyId, svc: Svc,
    state: Annotated[S.TrialState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> dict[str, Any]:
    rows, total = svc.storage.list_trials(study_id, state, limit, offset)
    return {"trials": [trial_view(t) for t in rows], "total": total, "limit": limit, "offset": offset}


@router.get("/studies/{study_id}/trials/{trial_id}", response_model=S.TrialView, tags=["trials"],
            summary="One trial")
def get_trial(study_id: StudyId, trial_id: TrialId, svc: Svc) -> dict[str, Any]:
    return trial_view(svc.storage.get_trial(study_id, trial_id))


@router.get("/studies/{study_id}/calibration", tags=["calibration"],
            summary="Prediction at ask vs outcome, coverage, breach rate, width, alpha trajectory",
            description="`trials`: for each completed trial that had a prediction, its intervals "
            "(bounds, alpha used, covered) and quantiles at ask, and the outcome. "
            "`cumulative_coverage` and `rolling_coverage` (trailing `window` trials) per interval pair "
            "after each trial; `alpha_trajectory`: the alphas the intervals were built at; `summary` "
            "(all predicted trials) and `conformal` (conformalized ones only): coverage, breach rate, "
            "rolling coverage error over windows of 20, mean width, LLR of breaches vs params, RMSCE.")
def calibration(study_id: StudyId, svc: Svc) -> dict[str, Any]:
    return svc.calibration(study_id)
