"""Prometheus metrics of one API process (``GET /metrics``), with prometheus-client.

Counted on the request path (cheap: a histogram observation or a counter
increment each): request latency per route template, trials asked, tells by
state, learning-curve reports, fit durations of this process's pool. Read from
the database when scraped, at most once per ``ttl`` seconds however often the
scrape comes: per study, trial counts by state, snapshot lag, and coverage and
breach rate per interval pair over the last ``RECENT`` predicted trials; and
the fit queue's depth. Each app has its own registry, so several apps in one
process (tests) do not collide.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .errors import Unavailable
from .storage import Storage

disable_created_metrics()  # no *_created series: half the text, nothing a dashboard reads

RECENT = 100  # predicted trials the per-study coverage and breach-rate gauges look back over
MAX_STUDIES = 200  # studies with per-study gauges (the newest); the rest are summed in totals only
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
FIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# a trial's calibration record -> its record per objective (one, unless the study has several)
PerObjective = Callable[[dict[str, Any]], list[dict[str, Any]]]


class Metrics:
    """The API process's metrics; ``render()`` is the /metrics body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Histogram("calibo_http_request_duration_seconds", "HTTP request latency, by route template",
                                  ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=r)
        self.asked = Counter("calibo_asked_trials", "trials suggested by asks", registry=r)
        self.told = Counter("calibo_tells", "tells that finished a trial, by the state told", ["state"], registry=r)
        self.reports = Counter("calibo_reports", "learning-curve points reported", registry=r)
        self.pruned = Counter("calibo_prune_decisions", "reports answered should_prune=true", registry=r)
        self.fits = Histogram("calibo_fit_duration_seconds", "fits of this process's pool (engine fit time)",
                              ["device"], buckets=FIT_BUCKETS, registry=r)
        self.fit_failures = Counter("calibo_fit_failures", "fits of this process's pool that raised", registry=r)
        self.fit_kinds = Counter("calibo_fits", "fits of this process's pool stored, by kind: full (hyperparameters "
                                 "tuned), update (kept; engine.retune) or extend (the newest snapshot "
                                 "extended at its candidates; engine.extend)", ["kind"], registry=r)
        self.fit_phases = Histogram("calibo_fit_phase_seconds", "fit jobs of this process's pool, by phase: load "
                                    "(read the study), fit (the engine), encode (the snapshot's bytes), store "
                                    "(write it)", ["phase"], buckets=LATENCY_BUCKETS, registry=r)
        self.fit_waits = Histogram("calibo_ask_fit_wait_seconds", "time an ask waited for the fit of the tells "
                                   "before it (a sequential user's; asks that did not wait are not counted)",
                                   buckets=LATENCY_BUCKETS, registry=r)

    def watch(self, storage: Storage, queue_depth: Callable[[], int], per_objective: PerObjective,
              ttl: float = 10.0) -> None:
        """Add the gauges read at scrape time from ``storage`` and the fit scheduler; ``per_objective``
        splits a trial's calibration record into one per objective (the studies layer knows how)."""
        self.registry.register(StudyGauges(storage, queue_depth, per_objective, ttl))

    def observe_fit(self, result: dict[str, Any]) -> None:
        """A fit job's result (see ``workers.jobs.fit_study``)."""
        if result.get("status") in ("fitted", "superseded") and result.get("fit_seconds") is not None:
            self.fits.labels(result.get("device", "cpu")).observe(float(result["fit_seconds"]))
            if result.get("status") == "fitted":
                self.fit_kinds.labels(result.get("fit_kind", "full")).inc()
            for phase, seconds in (result.get("phases") or {}).items():
                self.fit_phases.labels(phase).observe(float(seconds))

    def observe_wait(self, seconds: float) -> None:
        """An ask's wait for a fit (``FitPool.wait``)."""
        self.fit_waits.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class StudyGauges(Collector):
    """Gauges of every study (the newest ``MAX_STUDIES``), from the database, cached for ``ttl`` s."""

    def __init__(self, storage: Storage, queue_depth: Callable[[], int], per_objective: PerObjective,
                 ttl: float) -> None:
        self.storage = storage
        self.queue_depth = queue_depth
        self.per_objective = per_objective
        self.ttl = ttl
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._cached: list[Metric] = []

    def describe(self) -> Iterable[Metric]:
        return []  # read at scrape: nothing to check at registration

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if time.monotonic() - self._at >= self.ttl:
                try:
                    self._cached = self._read()
                except Unavailable:
                    pass  # the database is down: the last reading stands (the request metrics go on)
                self._at = time.monotonic()
            return list(self._cached)

    def _read(self) -> list[Metric]:
        depth = GaugeMetricFamily("calibo_fit_queue_depth", "studies with a fit waiting or running")
        depth.add_metric([], self.queue_depth())
        trials = GaugeMetricFamily("calibo_study_trials", "trials of a study by state", labels=["study", "state"])
        lag = GaugeMetricFamily("calibo_study_snapshot_lag", "completed trials told since the study's newest fit",
                                labels=["study"])
        coverage = GaugeMetricFamily(
            "calibo_study_coverage", f"share of the last {RECENT} predicted outcomes inside the interval issued "
            "at ask, per interval pair (nominal: its target coverage)", labels=["study", "nominal"])
        breach = GaugeMetricFamily(
            "calibo_study_breach_rate", f"share of the last {RECENT} predicted outcomes outside the interval "
            "(1 - coverage), per interval pair", labels=["study", "nominal"])
        per_objective = GaugeMetricFamily(
            "calibo_study_objective_coverage", f"multi-objective studies: share of the last {RECENT} predicted "
            "outcomes of each objective inside its interval, per interval pair (the study's own coverage "
            "gauges read objective 0)", labels=["study", "objective", "nominal"])
        _, total = self.storage.list_studies(1, 0)
        studies, _ = self.storage.list_studies(MAX_STUDIES, max(0, total - MAX_STUDIES))
        for info in studies:
            name = info.name
            for state, n in info.counts.items():
                if state != "total":
                    trials.add_metric([name, state], n)
            lag.add_metric([name], max(0, info.n_complete - info.snapshot_n_obs))
            records = self.storage.recent_records(info.id, RECENT)
            if not records:
                continue
            per = [self.per_objective(r) for r in records]
            m = len(per[-1])
            for i in range(m):
                for target, share in _shares([p[i] for p in per if len(p) > i]):
                    if i == 0:
                        coverage.add_metric([name, f"{target:g}"], share)
                        breach.add_metric([name, f"{target:g}"], 1.0 - share)
                    if m > 1:
                        per_objective.add_metric([name, str(i), f"{target:g}"], share)
        return [depth, trials, lag, coverage, breach, per_objective]


def _shares(records: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """``(nominal coverage, share covered)`` per interval pair over calibration ``records``."""
    out = []
    for j, target in enumerate(records[-1]["coverage"]):
        hits = [r["covered"][j] for r in records if len(r["covered"]) > j]
        out.append((target, sum(hits) / len(hits)))
    return out
