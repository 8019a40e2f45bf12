"""calibo's thin HTTP client: ask/tell against a calibo server with httpx alone.

>>> from client import Client
>>> with Client("http://127.0.0.1:8000") as calibo:            # doctest: +SKIP
...     study = calibo.create_study("svc", {"C": {"type": "float", "low": 1e-2,
...                                               "high": 1e3, "log": True}})
...     trial = calibo.ask(study["id"])[0]
...     calibo.tell(study["id"], trial.id, train(**trial.params))
...     calibo.optimize(study, lambda p: train(**p), n_trials=50, n_workers=4)

An objective that takes ``(params, reporter)`` can report intermediate values
and stop when the study's pruner says so (create the study with ``pruner=``)::

    def objective(params, reporter):
        for epoch in range(27):
            loss = train_one_epoch(params)
            if reporter.report(epoch, loss):    # the server's should_prune
                raise TrialPruned()             # told state="pruned" with loss
        return loss

This package imports only the standard library and httpx: remote tuning
workers install ``calibo`` without the ``server`` extra.
"""

from ._async import AsyncClient
from ._optimize import AsyncReporter, Reporter
from ._sync import Client
from .errors import (
    CaliboError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerError,
    TrialPruned,
    Unauthorized,
)
from .models import Trial

__all__ = [
    "AsyncClient",
    "AsyncReporter",
    "CaliboError",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "Reporter",
    "ServerError",
    "Trial",
    "TrialPruned",
    "Unauthorized",
]
