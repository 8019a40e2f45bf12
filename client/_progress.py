"""``optimize(..., show_progress_bar=True)``: a tqdm bar on stderr, as Optuna's.

tqdm is imported only when a bar is asked for (the ``progress`` extra); the client itself needs
httpx alone. The bar counts trials up to ``n_trials``; with a ``timeout`` alone it is a time bar
up to the timeout; with neither, a counter. Its description shows the study's best trial and
value so far (Optuna's ``Best trial: 3. Best value: 0.25``; not for a multi-objective study), its
postfix the trials per second (and, with both limits, the seconds used of the timeout).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from .models import TrialRecord

__all__ = ["ProgressBar", "require_tqdm"]

INSTALL = "pip install 'calibo[progress]'"


def require_tqdm() -> Any:
    """tqdm's ``tqdm`` class (``tqdm.auto``: a widget in notebooks), or a clear ImportError."""
    try:
        from tqdm.auto import tqdm
    except ImportError as exc:
        raise ImportError(f"show_progress_bar=True needs tqdm: {INSTALL}") from exc
    return tqdm


class ProgressBar:
    """One ``optimize``'s bar; ``view`` is the study's view when it starts (direction, best trial).

    ``update`` runs after each tell (one call at a time), ``close`` on every exit path.
    """

    def __init__(self, n_trials: int | None, timeout: float | None, view: dict[str, Any] | None,
                 file: Any = None) -> None:
        tqdm = require_tqdm()
        self._n_trials = n_trials
        self._timeout = timeout
        self._start = time.monotonic()
        self._shown_seconds = 0.0
        self._count = 0
        view = view or {}
        self._direction = view.get("direction") if not view.get("directions") else None
        self._best: tuple[int, float] | None = None
        best = view.get("best_trial")
        if self._direction is not None and isinstance(best, dict) and isinstance(best.get("value"), int | float):
            self._best = (int(best["number"]), float(best["value"]))
        out = file if file is not None else sys.stderr
        if n_trials is not None:
            self._bar = tqdm(total=n_trials, file=out, unit="trial",
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                        "[{elapsed}<{remaining}{postfix}]")
        elif timeout is not None:
            total = tqdm.format_interval(timeout)
            self._bar = tqdm(total=timeout, file=out,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}/" + total + "{postfix}")
        else:
            self._bar = tqdm(total=None, file=out, unit="trial",
                             bar_format="{desc}: {n_fmt} trials [{elapsed}{postfix}]")
        self._closed = False
        if self._best is not None:
            self._describe()
            self._bar.refresh()

    def _better(self, value: float) -> bool:
        if self._best is None:
            return True
        return value > self._best[1] if self._direction == "maximize" else value < self._best[1]

    def _describe(self) -> None:
        if self._best is not None:  # none before a complete trial, as Optuna's
            self._bar.set_description_str(f"Best trial: {self._best[0]}. Best value: {self._best[1]:.6g}",
                                          refresh=False)

    def update(self, record: TrialRecord) -> None:
        self._count += 1
        if (self._direction is not None and record.state == "complete" and record.value is not None
                and record.feasible and self._better(record.value)):
            self._best = (record.number, record.value)
        self._describe()
        elapsed = time.monotonic() - self._start
        rate = f"{self._count / elapsed:.3g} trials/s" if elapsed > 0 else ""
        if self._n_trials is not None:
            used = f"{elapsed:.02f}/{self._timeout} seconds, " if self._timeout is not None else ""
            self._bar.set_postfix_str(used + rate, refresh=False)
            self._bar.update(1)
        elif self._timeout is not None:
            self._bar.set_postfix_str(rate, refresh=False)
            self._advance_time(elapsed)
        else:
            self._bar.set_postfix_str(rate, refresh=False)
            self._bar.update(1)

    def _advance_time(self, elapsed: float) -> None:
        assert self._timeout is not None
        shown = min(elapsed, self._timeout)  # past the timeout the bar is full, not over
        self._bar.update(shown - self._shown_seconds)
        self._shown_seconds = shown

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._n_trials is None and self._timeout is not None:
            self._advance_time(time.monotonic() - self._start)
        self._bar.close()
