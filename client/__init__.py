"""calibo: hyperparameter optimization from conformally calibrated surrogates.

This package is the thin HTTP client (httpx alone). The engine is ``calibo.engine``,
the server ``calibo.server`` (both need ``pip install "calibo[server]"``), the Optuna
sampler ``calibo.optuna``.

>>> from calibo import Client
>>> with Client("http://127.0.0.1:8000") as client:             # doctest: +SKIP
...     study = client.create_study("svc", {"C": {"type": "float", "low": 1e-2,
...                                               "high": 1e3, "log": True}})
...     trial = study.ask()
...     study.tell(trial, train(**trial.params))
...     study.optimize(lambda p: train(**p), n_trials=50, n_workers=4)
...     print(study.best_trial.params)

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

# ruff: noqa: E402 - the import-name guard comes before the imports it protects
if __name__ != "calibo":  # the repository's client/ folder installs as the package calibo only
    raise ImportError(f"calibo's client is the package calibo, not {__name__!r}")

__version__ = "0.1.0"

from ._async import AsyncClient
from ._optimize import AsyncReporter, Reporter
from ._study import AsyncStudy, Study
from ._suggest import AsyncSuggestTrial, SpaceMismatch, SuggestTrial
from ._sync import Client
from .errors import (
    CaliboError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerError,
    Terminated,
    TrialPruned,
    Unauthorized,
)
from .models import ParetoFront, Trial, TrialRecord, TrialState

__all__ = [
    "__version__",
    "AsyncClient",
    "AsyncReporter",
    "AsyncStudy",
    "AsyncSuggestTrial",
    "CaliboError",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "ParetoFront",
    "Reporter",
    "ServerError",
    "SpaceMismatch",
    "Study",
    "SuggestTrial",
    "Terminated",
    "Trial",
    "TrialRecord",
    "TrialPruned",
    "TrialState",
    "Unauthorized",
]
