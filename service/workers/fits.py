"""The interface of a fit backend, as the API side uses it: the local process pool (``FitPool``) and
the cluster's job queue (``queue.QueueFits``) both provide it."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Fits(Protocol):
    """Where a replica's refits go. Every method is safe to call from any thread."""

    def request(self, study_id: int) -> None:
        """Queue a fit of the study, coalesced with one already waiting."""

    def wait(self, study_id: int, n_obs: int, timeout: float, n_failed: int = 0) -> bool:
        """Wait up to ``timeout`` seconds for a fit on at least ``n_obs`` observations and
        ``n_failed`` failures; whether one landed."""

    def depth(self) -> int:
        """Fits running or waiting to run."""

    def busy(self, study_id: int) -> bool:
        """Whether a fit of the study runs or waits."""

    def status(self, study_id: int) -> dict[str, Any]:
        """``{"fitting": bool, "queued": bool}`` for the study's view."""

    def restart(self, study_id: int) -> None:
        """The study's space grew: no fit stored so far is of it."""

    def forget(self, study_id: int) -> None:
        """The study was deleted."""

    def resume_stalled(self) -> int:
        """Queue again the studies whose fits gave up (an outage); how many."""

    def readiness(self) -> str:
        """``"ok"``, or why fits cannot run now (``/healthz``)."""

    def close(self) -> None:
        """Stop taking fits; what was requested before is still fitted where the backend can."""
