"""Katib's ``Suggestion`` gRPC service over a calibo server: ``calibo katib``.

Katib's controller calls ``ValidateAlgorithmSettings`` when an experiment is created and then
``GetSuggestions`` whenever it wants ``current_request_number`` more trials, sending the experiment and
its trials. For each request the adapter:

1. derives the calibo study from the experiment (:mod:`calibo.katib.experiment`) and creates it, or
   finds it (``create_study`` is idempotent);
2. tells the study every trial Katib reports finished whose calibo trial is still running there
   (found by the ``calibo-trial-id`` label the adapter put on the trial, else by its assignments), so
   each result reaches the study once: succeeded with the objective metric, early-stopped as pruned,
   failed / killed / metrics unavailable as failed; running trials stay running;
3. asks the study for exactly ``current_request_number`` trials with an idempotency key made of the
   study and ``total_request_number``, so a retried request gets the same trials, and answers them with
   the label.

Nothing is kept between requests: the study, its trials and which of them are told live in the calibo
server, so the adapter restarts (or runs as several replicas) without losing or repeating anything.
"""

from __future__ import annotations

import hashlib
import logging
import math
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from .. import Client
from .._signals import wait_for_stop
from ..errors import (
    CaliboError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerError,
    Unauthorized,
)
from . import messages as m
from .experiment import TRIAL_LABEL, StudyDefinition, Unsupported, definition

log = logging.getLogger("calibo.katib")

DEFAULT_PORT = 6789  # Katib's suggestion port (its controller dials <suggestion service>:6789)

_FAILED = ("FAILED", "KILLED", "METRICSUNAVAILABLE")


class Rejected(Exception):
    """A request answered with a gRPC status other than OK."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _status(error: CaliboError) -> grpc.StatusCode:
    if isinstance(error, InvalidRequest):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(error, Conflict):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(error, NotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, Unauthorized):
        return grpc.StatusCode.UNAUTHENTICATED
    if isinstance(error, Forbidden):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(error, ConnectionFailed | ServerError):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


def _condition(trial: Any) -> str:
    return m.enum_name("TrialStatus.TrialConditionType", trial.status.condition)


def _ended(trial: Any) -> bool:
    return _condition(trial) in ("SUCCEEDED", "EARLYSTOPPED", *_FAILED)


def _by_assignments(study: StudyDefinition, running: dict[int, Any]) -> dict[tuple[tuple[str, str], ...], list[int]]:
    """The running trials by their assignments as Katib writes them (to match a trial without the label)."""
    out: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for trial_id, view in running.items():
        try:
            out.setdefault(tuple(study.assignment(view.get("params") or {})), []).append(trial_id)
        except KeyError:
            continue
    return out


def outcome(trial: Any, study: StudyDefinition) -> dict[str, Any] | None:
    """What to tell calibo of a Katib trial: None while it runs, else ``tell``'s keyword arguments."""
    if not _ended(trial):
        return None
    condition = _condition(trial)
    metrics: dict[str, str] = {}
    for metric in trial.status.observation.metrics:
        metrics.setdefault(metric.name, metric.value)
    attrs: dict[str, Any] = {"katib_trial": trial.name, "katib_condition": condition.lower()}
    extra = {k: metrics[k] for k in study.additional_metrics if k in metrics}
    if extra:
        attrs["katib_metrics"] = extra
    try:
        value: float | None = float(metrics[study.metric])
    except (KeyError, ValueError):
        value = None
    if value is not None and not math.isfinite(value):
        value = None
    if condition == "SUCCEEDED":
        if value is None:
            attrs["fail_reason"] = f"no number for metric {study.metric!r} in the trial's observation"
            return {"state": "failed", "user_attrs": attrs}
        return {"value": value, "user_attrs": attrs}
    if condition == "EARLYSTOPPED":
        return {"state": "pruned", "value": value, "user_attrs": attrs}
    attrs["fail_reason"] = f"Katib trial {condition.lower()}"
    return {"state": "failed", "user_attrs": attrs}


class SuggestionService:
    """The ``Suggestion`` service's two calls over ``client`` (a thread-safe :class:`calibo.Client`)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    # -- the two calls, as plain functions of the request (the gRPC handlers wrap them) --------------

    def validate(self, request: Any) -> Any:
        """``ValidateAlgorithmSettings``: the experiment maps to a calibo study, and the server accepts
        that study (it is created then: a later ``GetSuggestions`` finds it)."""
        self._study(request.experiment)
        return m.ValidateAlgorithmSettingsReply()

    def suggest(self, request: Any) -> Any:
        """``GetSuggestions``: tell what finished, then exactly ``current_request_number`` new trials."""
        count = request.current_request_number
        if count < 0:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, f"current_request_number is {count}")
        study, study_id = self._study(request.experiment)
        self._tell_finished(study, study_id, request.trials)
        reply = m.GetSuggestionsReply()
        if count == 0:
            return reply
        key = hashlib.sha256(
            f"{study_id}|{request.total_request_number}|{count}".encode()
        ).hexdigest()[:40]
        trials: list[Any] = []
        while len(trials) < count:  # the server hands out at most 256 per ask
            part = min(count - len(trials), 256)
            trials += self._call(self.client.ask, study_id, part, "katib", f"katib-{key}-{len(trials)}")
        for trial in trials:
            assignment = reply.parameter_assignments.add()
            for name, value in study.assignment(trial.params):
                assignment.assignments.add(name=name, value=value)
            assignment.labels[TRIAL_LABEL] = str(trial.id)
        return reply

    # -- steps ----------------------------------------------------------------------------------------

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CaliboError as e:
            raise Rejected(_status(e), f"calibo server: {e}") from e

    def _study(self, experiment: Any) -> tuple[StudyDefinition, int]:
        try:
            study = definition(experiment)
        except Unsupported as e:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from e
        try:
            handle = self.client.create_study(study.name, study.space, study.direction, **study.options)
        except Conflict as e:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                           f"a calibo study named {study.name!r} exists with another definition (delete it, "
                           f"or set the algorithm setting study_name): {e}") from e
        except InvalidRequest as e:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, f"calibo refuses the study: {e}") from e
        except CaliboError as e:
            raise Rejected(_status(e), f"calibo server: {e}") from e
        return study, handle.id

    def _tell_finished(self, study: StudyDefinition, study_id: int, trials: Any) -> None:
        finished = [t for t in trials if _ended(t)]
        if not finished:
            return
        running = {int(t["id"]): t for t in self._call(
            lambda: list(self.client.iter_trials(study_id, state="running", page_size=500)))}
        by_params: dict[tuple[tuple[str, str], ...], list[int]] | None = None  # built for unlabelled trials
        for katib in finished:
            if by_params is None and TRIAL_LABEL not in katib.spec.labels:
                by_params = _by_assignments(study, running)
            trial_id = self._trial_id(katib, running, by_params or {})
            if trial_id is None:
                continue  # told already (by an earlier request, before a restart too), or not ours
            del running[trial_id]
            tell = outcome(katib, study)
            assert tell is not None  # the trial has ended
            self._call(self.client.tell, study_id, trial_id, tell.pop("value", None), **tell)
            log.info("told trial %s (%s) of study %s: %s", trial_id, katib.name, study.name,
                     tell.get("state", "complete"))

    @staticmethod
    def _trial_id(katib: Any, running: dict[int, Any], by_params: dict[Any, list[int]]) -> int | None:
        label = katib.spec.labels.get(TRIAL_LABEL)
        if label is not None:
            try:
                trial_id = int(label)
            except ValueError:
                return None
            return trial_id if trial_id in running else None
        # a trial without the label (made before it, or by hand): the running trial with its assignments
        pairs = tuple((a.name, a.value) for a in katib.spec.parameter_assignments.assignments)
        for key in (pairs, tuple(sorted(pairs))):
            for trial_id in by_params.get(key, []):
                if trial_id in running:
                    return trial_id
        return None


def _handler(fn: Any) -> Any:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(request)
        except Rejected as e:
            log.warning("%s: %s %s", fn.__name__, e.code.name, e.reason)
            context.abort(e.code, e.reason)
        except Exception as e:  # noqa: BLE001 - a bug must answer INTERNAL, never kill the server
            log.exception("%s failed", fn.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")

    return handle


def build_server(client: Client, address: str, *, threads: int = 8) -> tuple[grpc.Server, int]:
    """A gRPC server with the ``Suggestion`` and health services on ``address``; (server, bound port)."""
    service = SuggestionService(client)
    methods = {
        "GetSuggestions": grpc.unary_unary_rpc_method_handler(
            _handler(service.suggest), request_deserializer=m.GetSuggestionsRequest.FromString,
            response_serializer=m.GetSuggestionsReply.SerializeToString),
        "ValidateAlgorithmSettings": grpc.unary_unary_rpc_method_handler(
            _handler(service.validate), request_deserializer=m.ValidateAlgorithmSettingsRequest.FromString,
            response_serializer=m.ValidateAlgorithmSettingsReply.SerializeToString),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="katib"))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(m.SUGGESTION_SERVICE, methods),))
    checker = health.HealthServicer()
    for name in ("", m.HEALTH_SERVICE, m.SUGGESTION_SERVICE):
        checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return server, port


def serve(url: str | None = None, token: str | None = None, *, host: str = "0.0.0.0",
          port: int = DEFAULT_PORT, grace: float = 10.0) -> None:
    """Run the service until SIGTERM or Ctrl-C (calls in flight get ``grace`` seconds to finish).

    ``url`` and ``token`` default to ``$CALIBO_URL`` and ``$CALIBO_TOKEN``.
    """
    client = Client(url, token, retry_deadline=20.0)
    server, bound = build_server(client, f"{host}:{port}")
    server.start()
    log.info("Katib suggestion service on %s:%s over the calibo server %s", host, bound, client.base_url)
    try:
        wait_for_stop()
    finally:
        server.stop(grace).wait()
        client.close()
