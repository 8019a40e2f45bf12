"""Ray Tune integration, installed as ``calibo.ray``: :class:`CaliboSearch`.

A Ray Tune ``Searcher`` whose suggestions come from a study on a calibo server. Needs Ray Tune
(``pip install "calibo[ray]"``); ``import calibo`` never imports Ray, importing this module does.

>>> from ray import tune
>>> from calibo.ray import CaliboSearch
>>> tuner = tune.Tuner(                                              # doctest: +SKIP
...     train,
...     param_space={"lr": tune.loguniform(1e-4, 1e-1), "layers": tune.randint(1, 5)},
...     tune_config=tune.TuneConfig(
...         search_alg=CaliboSearch(url="http://calibo:8000", study_name="mnist"),
...         metric="loss", mode="min", num_samples=100, max_concurrent_trials=8),
... )
>>> tuner.fit()                                                      # doctest: +SKIP

What runs where:

* Tune calls ``suggest`` synchronously in its driver loop. The searcher hands out trials that it
  asked the server for ahead of time (one ``ask`` of ``batch`` trials, refilled in a background
  thread when half are handed out), so a suggestion is a local pop, not a round trip.
* Results and completions are queued for one background sender thread: the driver never waits on
  HTTP. Each trial's intermediate results are reported (``training_iteration`` as the step) and its
  end is told once: complete with its metric, ``failed`` when it errored, ``pruned`` (with its last
  value) when a scheduler stopped it early. Every tell carries ``{"ray_trial_id": ...}``.
* The searcher keeps no state of its own beyond the study, the map from Tune's trial ids to the
  study's trials and the trials fetched ahead: ``save`` writes exactly that, and a restored
  searcher continues the same study.
"""

from __future__ import annotations

import atexit
import copy
import logging
import math
import os
import pickle
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

try:
    from ray.tune.search import Searcher
    from ray.tune.search.sample import (
        Categorical,
        Domain,
        Float,
        Function,
        Integer,
        LogUniform,
        Quantized,
        Uniform,
    )
except ImportError as e:  # the extra is not installed
    raise ImportError('calibo.ray needs Ray Tune: pip install "calibo[ray]"') from e

from ._sync import Client
from .errors import CaliboError, Conflict, ConnectionFailed, InvalidRequest, ServerError
from .models import Trial

__all__ = ["CaliboSearch", "convert_search_space"]

logger = logging.getLogger("calibo.ray")

SEP = "/"  # nested parameters are named by their path, joined with it (as Tune's OptunaSearch does)
# trials asked ahead of Tune: each is chosen knowing fewer results the more are ahead. On 4 tasks x 5
# seeds with 8 in flight (benchmarks/ray_tune.py), 2 ahead ranked 2.12 against 2.55 with 4 and 2.52 with
# 8 (Optuna TPE 1.9-2.0, GP 2.4-2.6); the cost, slots left empty while an ask is out, shows only when
# trials last less than an ask (about a second)
DEFAULT_BATCH = 2
FIRST_ASK_TIMEOUT = 120.0  # seconds suggest waits for trials when none is running (it blocks Tune then)
FLUSH_TIMEOUT = 60.0  # seconds shutdown waits for the queued reports and tells
SAVE_FLUSH_TIMEOUT = 10.0  # seconds a checkpoint waits for them (Tune's driver waits with it)
RETRY_FOR = 600.0  # seconds the sender keeps retrying a tell through an outage (after the client's own retries)
JSON_SCALARS = (str, int, float, bool, type(None))
_CHOICE_TEXT = 100


# ------------------------------------------------------------------ the search space
@dataclass(frozen=True)
class _Param:
    """One Tune domain as a calibo parameter, and how a value of it goes back into Tune's config."""

    path: tuple[Any, ...]  # where it sits in the config (dict keys, list indices)
    wire: dict[str, Any]  # the calibo parameter
    q: float | None = None  # quantized: the value handed to Tune is rounded to a multiple of q
    integer: bool = False
    labels: tuple[Any, ...] | None = None  # categorical choices that are not JSON scalars: sent by label

    @property
    def name(self) -> str:
        return SEP.join(str(p) for p in self.path)

    def to_tune(self, value: Any) -> Any:
        if self.labels is not None:
            return copy.deepcopy(self.labels[self.wire["choices"].index(value)])
        if self.q is not None:
            low = math.ceil(self.wire["low"] / self.q - 1e-9) * self.q
            high = math.floor(self.wire["high"] / self.q + 1e-9) * self.q
            value = min(max(round(value / self.q) * self.q, low), high)
        return int(round(value)) if self.integer else value

    def to_wire(self, value: Any) -> Any:
        value = _plain(value)
        if self.labels is not None:
            for label, choice in zip(self.wire["choices"], self.labels, strict=True):
                if _same(choice, value):
                    return label
            raise ValueError(f"{value!r} is not a choice of {self.name!r}")
        return value


def _plain(value: Any) -> Any:
    """numpy scalars as Python ones."""
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an object whose == raises or is ambiguous (arrays) is not equal
        return a is b


def _equal(a: Any, b: Any) -> bool:
    """Equal as Python sees it (1 == 1.0 == True): such choices go by label, never collapsed."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return a is b


@dataclass(frozen=True)
class TuneSpace:
    """A Tune search space read once: its parameters and the config around them (constants kept)."""

    params: tuple[_Param, ...]
    template: Any  # the config with every domain left in place; constants are copied from it

    @property
    def wire(self) -> dict[str, dict[str, Any]]:
        return {p.name: p.wire for p in self.params}

    def config(self, values: dict[str, Any]) -> dict[str, Any]:
        """Tune's config for the study's ``values`` (flat names): nested, with the constants."""
        by_path = {p.path: p.to_tune(values[p.name]) for p in self.params if p.name in values}
        return _fill(self.template, (), by_path)

    def flat(self, config: dict[str, Any]) -> dict[str, Any]:
        """The study's values (flat names) of a Tune config (``points_to_evaluate``, evaluated points);
        parameters it leaves out are left out (the server chooses them)."""
        out = {}
        for p in self.params:
            node: Any = config
            try:
                for key in p.path:
                    node = node[key]
            except (KeyError, IndexError, TypeError):
                flat = config.get(p.name, _MISSING) if isinstance(config, dict) else _MISSING
                if flat is _MISSING:
                    continue
                node = flat
            if isinstance(node, Domain):
                continue
            out[p.name] = p.to_wire(node)
        return out


_MISSING = object()


def _fill(node: Any, path: tuple[Any, ...], values: dict[tuple[Any, ...], Any]) -> Any:
    if path in values:
        return values[path]
    if isinstance(node, dict):
        return {k: _fill(v, (*path, k), values) for k, v in node.items()}
    if isinstance(node, list | tuple):
        out = [_fill(v, (*path, i), values) for i, v in enumerate(node)]
        return out if isinstance(node, list) else tuple(out)
    return copy.deepcopy(node)


def _walk(node: Any, path: tuple[Any, ...]) -> Iterable[tuple[tuple[Any, ...], Domain]]:
    name = SEP.join(str(p) for p in path) or "<config>"
    if isinstance(node, dict):
        if set(node) == {"grid_search"}:
            raise ValueError(f"parameter {name!r}: tune.grid_search has no calibo equivalent; use tune.choice")
        for k, v in node.items():
            if isinstance(k, str) and SEP in k:
                raise ValueError(f"parameter {SEP.join(map(str, (*path, k)))!r}: a key holding {SEP!r} "
                                 f"(calibo names nested parameters by their path joined with {SEP!r})")
            yield from _walk(v, (*path, k))
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, i))
    elif isinstance(node, Domain):
        yield path, node


def _param(path: tuple[Any, ...], domain: Domain) -> _Param:
    name = SEP.join(str(p) for p in path)
    if isinstance(domain, Function):
        raise ValueError(f"parameter {name!r}: tune.sample_from (a function of the config) has no calibo "
                         "equivalent; use tune.uniform / loguniform / randint / choice ...")
    sampler = domain.get_sampler()
    q = None
    if isinstance(sampler, Quantized):
        q, sampler = sampler.q, sampler.sampler
    if isinstance(domain, Categorical):
        if not isinstance(sampler, Uniform):
            raise ValueError(f"parameter {name!r}: a categorical domain sampled by {type(sampler).__name__}")
        choices = [_plain(c) for c in domain.categories]
        scalar = all(isinstance(c, JSON_SCALARS) and not (isinstance(c, float) and not math.isfinite(c))
                     and not (isinstance(c, str) and len(c) > _CHOICE_TEXT) for c in choices)
        if scalar and all(not _equal(a, b) for i, a in enumerate(choices) for b in choices[i + 1:]):
            return _Param(path, {"type": "categorical", "choices": choices})
        labels = [repr(c)[:_CHOICE_TEXT - 8] for c in choices]
        if len(set(labels)) < len(labels):
            labels = [f"#{i} {t}" for i, t in enumerate(labels)]
        return _Param(path, {"type": "categorical", "choices": labels}, labels=tuple(domain.categories))
    if not isinstance(sampler, Uniform | LogUniform):
        raise ValueError(f"parameter {name!r}: {type(domain).__name__} sampled by {type(sampler).__name__} "
                         "(tune.randn) has no calibo equivalent; give it bounds (tune.uniform)")
    log = isinstance(sampler, LogUniform)
    if isinstance(domain, Float):
        if domain.lower is None or domain.upper is None:
            raise ValueError(f"parameter {name!r}: a float without bounds")
        wire = {"type": "float", "low": float(domain.lower), "high": float(domain.upper), "log": log}
        return _Param(path, wire, q=float(q) if q else None)
    if isinstance(domain, Integer):
        # Tune's randint / lograndint exclude the upper bound; quantized ones (q > 1) include it
        high = int(domain.upper) - (0 if q and q != 1 else 1)
        wire = {"type": "int", "low": int(domain.lower), "high": high, "log": log}
        if wire["high"] < wire["low"]:
            raise ValueError(f"parameter {name!r}: an empty integer range")
        return _Param(path, wire, q=int(q) if q and q != 1 else None, integer=True)
    raise ValueError(f"parameter {name!r}: Tune domain {type(domain).__name__} has no calibo equivalent")


def read_space(spec: dict[str, Any]) -> TuneSpace:
    """A Tune search space (``tune.uniform``, ``tune.choice`` ... nested in dicts and lists, beside
    constants) as calibo parameters; a ValueError names any parameter calibo cannot search."""
    if not isinstance(spec, dict):
        raise ValueError(f"a Tune search space is a dict, got {type(spec).__name__}")
    params = tuple(_param(path, domain) for path, domain in _walk(spec, ()))
    if not params:
        raise ValueError("the search space has no parameter to search (no tune.uniform, tune.choice ...)")
    names = [p.name for p in params]
    if len(set(names)) < len(names):
        raise ValueError(f"two parameters with one flat name: {sorted(n for n in names if names.count(n) > 1)}")
    return TuneSpace(params, spec)


def convert_search_space(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A Tune search space as a calibo study's space (the wire format): nested parameters named by
    their path joined with ``/``. Constants are not parameters."""
    return read_space(spec).wire


# ------------------------------------------------------------------ the sender
class _Sender:
    """One daemon thread that runs queued calls in order (reports, tells, heartbeats): the driver
    never waits on HTTP. ``flush`` waits until everything queued so far has been sent."""

    def __init__(self, heartbeat: Callable[[], None] | None, every: float | None) -> None:
        self._cond = threading.Condition()
        self._items: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._busy = 0
        self._heartbeat = heartbeat
        self._every = every
        self._thread: threading.Thread | None = None
        self._closed = False

    def put(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            self._items.append((fn, args))
            self._busy += 1
            self._start_locked()
            self._cond.notify_all()

    def start(self) -> None:
        """Start the thread (for the heartbeats) before anything is queued."""
        with self._cond:
            self._start_locked()

    def _start_locked(self) -> None:
        self._closed = False
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="calibo-ray-sender", daemon=True)
            self._thread.start()

    def flush(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def pending(self) -> int:
        with self._cond:
            return self._busy

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        last_beat = time.monotonic()
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    wait = None if self._every is None else last_beat + self._every - time.monotonic()
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._closed and not self._items:
                    return
                beat = self._every is not None and time.monotonic() >= last_beat + self._every
                item = None if beat else self._items.popleft()
            if item is None:  # the heartbeats are due (before anything else queued)
                last_beat = time.monotonic()
                if self._heartbeat is not None:
                    try:
                        self._heartbeat()
                    except Exception as e:  # noqa: BLE001 - a missed heartbeat is retried next time
                        logger.debug("heartbeats failed: %r", e)
                continue
            fn, args = item
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - logged; the sender goes on with the next call
                logger.exception("calibo.ray: a queued call failed")
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()


_LIVE: weakref.WeakSet[CaliboSearch] = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for search in list(_LIVE):
        try:
            search.shutdown()
        except Exception:  # noqa: BLE001 - at exit: log and go on with the others
            logger.exception("calibo.ray: shutdown at exit failed")


# ------------------------------------------------------------------ the searcher
class CaliboSearch(Searcher):
    """A Ray Tune searcher over a study on a calibo server.

    Args:
        space: a Tune search space (``tune.uniform``, ``loguniform``, ``quniform``, ``qloguniform``,
            ``randint``, ``qrandint``, ``lograndint``, ``qlograndint``, ``choice``; nested dicts
            and lists; constants pass through), or None to take the Tuner's ``param_space``.
            ``tune.grid_search``, ``tune.sample_from`` and ``tune.randn`` raise a ValueError that
            names the parameter. Quantized domains are searched as their continuous range and the
            value handed to the trial is rounded to the multiple of ``q``, as Tune rounds.
        metric, mode: what to optimize (``"min"`` / ``"max"``), or None to take the TuneConfig's.
        url, token, client: the server (``$CALIBO_URL`` and ``$CALIBO_TOKEN`` when not given), or a
            :class:`~calibo.Client` to use.
        study_name: the study, created from the space or, when a study of that name and the same
            definition exists, continued (a different definition raises :class:`~calibo.Conflict`).
            None: a new study ``ray-tune-<random>``. It is created when Tune hands the searcher its
            ``param_space`` (``set_search_properties``, where the first trials are asked ahead), or
            at the first suggestion.
        surrogate, acquisition, seed, settings: the study's, when it is created (see
            :meth:`calibo.Client.create_study`).
        batch: trials asked for ahead of Tune (one ``ask`` of up to ``batch``, refilled in the
            background once half are handed out). None: 2. Trials asked ahead count as running on
            the server, so the study's crowd-aware acquisition keeps new asks apart from them; more
            ahead means each suggestion was chosen knowing fewer results (measured: 2 ahead searched
            better than 4 or 8 with 8 in flight). Raise it when trials last less than an ask takes.
        max_trials: the study's budget: suggest returns ``Searcher.FINISHED`` once this many trials
            were handed out to Tune (over restores: it is kept in the study's ``user_attrs`` as
            ``ray_max_trials``, where a restored or new searcher on the study finds it).
        max_t: the ``training_iteration`` a trial that runs to its end reaches (a scheduler's
            ``max_t``, ASHA's included), to tell a trial Tune stopped early (``pruned``) from one it
            stopped at its end (complete). None: ``stop={"training_iteration": n}`` when Tune
            passes one, else the most iterations any trial of this searcher has reached.
        points_to_evaluate: configurations (Tune configs, all or some parameters) enqueued on the
            study: handed out first.
        report: report every intermediate result to the study (``client.report``); the server's
            pruning answer is not acted on (a Tune scheduler stops trials).
        heartbeat_interval: seconds between heartbeats of the trials handed out or asked ahead
            (the server fails a silent running trial after its ``heartbeat_timeout_seconds``); None:
            none.
        worker_id: the ``worker_id`` of the asks (default ``ray-<host>``).
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        client: Client | None = None,
        study_name: str | None = None,
        surrogate: str | None = None,
        acquisition: str | None = None,
        seed: int | None = None,
        settings: dict[str, Any] | None = None,
        batch: int | None = None,
        max_trials: int | None = None,
        max_t: int | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        report: bool = True,
        heartbeat_interval: float | None = 60.0,
        worker_id: str | None = None,
    ) -> None:
        if isinstance(metric, list | tuple) or isinstance(mode, list | tuple):
            raise ValueError("CaliboSearch optimizes one metric (a str), not a list")
        super().__init__(metric=metric, mode=mode)
        if batch is not None and batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if max_trials is not None and max_trials < 1:
            raise ValueError(f"max_trials must be >= 1, got {max_trials}")
        self._space: TuneSpace | None = read_space(space) if space is not None else None
        self._url = client.base_url if client is not None else url
        self._token = token  # never saved: a restored searcher takes its token from the constructor or $CALIBO_TOKEN
        self._client = client
        # chosen now, so that a copy Tune pickled before the run (``Tuner.restore``) finds the same study
        self._study_name = study_name or f"ray-tune-{uuid.uuid4().hex[:10]}"
        self._study_options = {k: v for k, v in (("surrogate", surrogate), ("acquisition", acquisition),
                                                 ("seed", seed), ("settings", settings)) if v is not None}
        self._batch = batch
        self._max_trials = max_trials
        self._max_t = max_t
        self._points = list(points_to_evaluate or [])
        self._report = report
        self._heartbeat_interval = heartbeat_interval
        self._worker_id = worker_id or f"ray-{os.uname().nodename}"[:64]
        # the state a checkpoint keeps
        self._study_id: int | None = None
        self._trials: dict[str, int] = {}  # Tune's trial id -> the study's trial id
        # the process's own
        self._num_samples: int | None = None
        self._stop_iterations: int | None = None
        self._setup()

    def _setup(self) -> None:
        """The parts no checkpoint or pickle holds: threads, locks, what this process handed out."""
        self._lock = threading.Condition()
        self._queue: deque[Trial] = deque()  # asked, not handed out yet
        self._params: dict[str, dict[str, Any]] = {}  # Tune's trial id -> the study's values (flat)
        self._live: set[str] = set()  # handed out in this process, not completed
        self._done: set[str] = set()  # completed (told) in this process
        self._last_iter: dict[str, int] = {}  # the last training_iteration passed to on_trial_result
        self._reported: dict[str, int] = {}  # the last step reported
        self._reached = 0  # the most iterations any trial reached
        self._asker: threading.Thread | None = None  # one thread asks ahead (and creates the study)
        self._job: tuple[int, str] | None = None  # an ask to make: (count, idempotency key)
        self._asking = False  # the asker is making one
        self._fetch_error: BaseException | None = None
        self._retry_at = 0.0
        self._fetch_no = 0
        self._creating = threading.Lock()
        self._session = uuid.uuid4().hex[:12]
        self._handed = 0  # new trials handed out by this process
        self._finished = False  # the budget is spent: FINISHED
        self._hold = False  # Tune's num_samples are handed out: no asking ahead (until it asks again)
        self._closed = False
        self._sender = _Sender(self._heartbeats, self._heartbeat_interval)
        self.stats = {"asks": 0, "asked": 0, "suggest_waits": 0, "suggest_wait_s": 0.0, "suggest_none": 0,
                      "max_in_flight": 0, "unused": 0, "reported": 0, "told": {"complete": 0, "pruned": 0, "failed": 0}}
        _LIVE.add(self)

    # ------------------------------------------------------------ pickling (Tune pickles its searcher)
    def __getstate__(self) -> dict[str, Any]:
        # no client, token, thread or lock; and not the trials asked ahead: they stay this object's
        # (it hands them out or tells them unused), so no copy can hand one out a second time
        return {k: v for k, v in self.__dict__.items() if k in _PICKLED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client = None
        self._token = None
        self._setup()

    # ------------------------------------------------------------ connection and study
    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._url, self._token)
            self._url = self._client.base_url
        return self._client

    @property
    def study_id(self) -> int | None:
        """The study's id, once it is created (at the first suggestion) or restored."""
        return self._study_id

    @property
    def trial_map(self) -> dict[str, int]:
        """Tune's trial id -> the study's trial id, for every trial handed out to Tune."""
        with self._lock:
            return dict(self._trials)

    def _direction(self) -> str:
        return "maximize" if self._mode == "max" else "minimize"

    def _ensure_study(self) -> int:
        if self._study_id is not None:
            return self._study_id
        with self._creating:
            if self._study_id is None:
                self._create_study()
            return self._study_id

    def _create_study(self) -> None:
        if self._space is None:
            raise RuntimeError("CaliboSearch has no search space: pass space= or the Tuner's param_space")
        name = self._study_name
        attrs = {"ray_metric": self._metric, "ray_mode": self._mode}
        if self._max_trials is not None:
            attrs["ray_max_trials"] = self._max_trials
        study = self.client.create_study(name, self._space.wire, self._direction(), user_attrs=attrs,
                                         **self._study_options)
        for point in self._points:  # before any ask: handed out first
            self.client.enqueue(study.id, self._space.flat(point), user_attrs={"ray": "points_to_evaluate"})
        self._points = []
        self._adopt(study.view)

    def _adopt(self, view: dict[str, Any]) -> None:
        self._study_id = int(view["id"])
        self._study_name = view.get("name", self._study_name)
        if self._max_trials is None and (budget := (view.get("user_attrs") or {}).get("ray_max_trials")):
            self._max_trials = int(budget)

    # ------------------------------------------------------------ Tune's hooks
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        if metric and not self._metric:
            self._metric = metric
        if mode and not self._mode:
            self._mode = mode
        samples = spec.get("num_samples")
        if isinstance(samples, int) and samples > 0:
            self._num_samples = samples
        stop = spec.get("stop")
        if isinstance(stop, dict) and isinstance(stop.get("training_iteration"), int):
            self._stop_iterations = stop["training_iteration"]
        if not config:
            return False
        space = read_space(config)
        if self._space is not None and space.wire != self._space.wire:
            return False  # a space of its own: Tune refuses a param_space with other parameters
        self._space = space
        if self._metric and self._mode:  # Tune is about to start: create the study and ask ahead, in the background
            with self._lock:
                self._maybe_fetch_locked()
        return True

    @property
    def batch(self) -> int:
        """How many trials are asked for ahead of Tune."""
        return self._batch if self._batch is not None else DEFAULT_BATCH

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if not self._metric or not self._mode:
            raise RuntimeError("CaliboSearch needs metric and mode: pass them to it or to tune.TuneConfig")
        with self._lock:
            known = trial_id in self._trials
        if known:  # Tune asks again for a trial it has (after a restore): the same configuration
            return self._space_or_fail().config(self._values_of(trial_id))
        space = self._space_or_fail()
        with self._lock:
            if self._budget_spent():
                self._finished = True
                self._release_locked("budget spent")
                return Searcher.FINISHED
            self._hold = self._closed = False
            self._maybe_fetch_locked()
            if not self._queue:
                if self._live:  # trials are running: Tune calls again within its next step
                    self.stats["suggest_none"] += 1
                    return None
                t0 = time.perf_counter()  # nothing running: Tune would sleep a second between tries
                self.stats["suggest_waits"] += 1
                deadline = time.monotonic() + FIRST_ASK_TIMEOUT
                while not self._queue and time.monotonic() < deadline:
                    if self._fetch_error is not None and not self._asking and self._job is None:
                        error, self._fetch_error = self._fetch_error, None
                        raise error
                    self._maybe_fetch_locked()
                    self._lock.wait(0.5)
                self.stats["suggest_wait_s"] += time.perf_counter() - t0
                if not self._queue:
                    return None
            trial = self._queue.popleft()
            self._trials[trial_id] = trial.id
            self._params[trial_id] = trial.params
            self._live.add(trial_id)
            self._handed += 1
            if self._num_samples is not None and self._handed >= self._num_samples:
                self._hold = True  # Tune asks no more in this run
                self._release_locked("num_samples reached")
            else:
                self._maybe_fetch_locked()
        return space.config(trial.params)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        step = result.get("training_iteration")
        with self._lock:
            cid = self._trials.get(trial_id)
            if isinstance(step, int):
                self._last_iter[trial_id] = step
                self._reached = max(self._reached, step)
            if cid is None or trial_id in self._done or not self._report:
                return
            value = _finite(result.get(self._metric))
            if value is None or not isinstance(step, int) or step <= self._reported.get(trial_id, -1):
                return
            self._reported[trial_id] = step
            study = self._study_id
        self._sender.put(self._send_report, study, cid, step, value)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        with self._lock:
            cid = self._trials.get(trial_id)
            if cid is None:
                logger.warning("calibo.ray: trial %s completed but this searcher never suggested it; not told",
                               trial_id)
                return
            if trial_id in self._done:
                return  # told already: a trial is told once
            self._done.add(trial_id)
            self._live.discard(trial_id)
            attrs: dict[str, Any] = {"ray_trial_id": trial_id}
            value = _finite(result.get(self._metric)) if result else None
            step = result.get("training_iteration") if result else None
            report = None
            if error:
                state = "failed"
                attrs["fail_reason"] = "the trial raised an error"
            elif not result:
                state = "failed"
                attrs["fail_reason"] = "stopped before it reported"
            elif value is None:
                state = "failed"
                raw = result.get(self._metric)
                attrs["fail_reason"] = f"no finite {self._metric!r} in its result" + (f" ({raw!r})" if raw is not None else "")
            elif isinstance(step, int) and step > self._last_iter.get(trial_id, 0):
                # Tune withheld the trial's last result from on_trial_result: a scheduler or a
                # stopper stopped it on that result. Pruned unless it had reached the trial's end.
                self._reached = max(self._reached, step)
                state = "complete" if step >= self._full_iterations() else "pruned"
                if state == "pruned":
                    attrs["ray_stopped_at"] = step
                if self._report and step > self._reported.get(trial_id, -1):
                    report = step
            else:
                state = "complete"
            self.stats["told"][state] += 1
            study = self._study_id
        if report is not None:
            self._sender.put(self._send_report, study, cid, report, value)
        self._sender.put(self._send_tell, study, cid, state, value, attrs)

    def add_evaluated_point(self, parameters: dict[str, Any], value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: list[float] | None = None) -> None:
        """Add a configuration evaluated elsewhere to the study (it counts in the next fit, never in
        the calibration); a pruned one is not added (the study takes complete or failed ones)."""
        if pruned:
            logger.info("calibo.ray: a pruned evaluated point is not added to the study")
            return
        study = self._ensure_study()
        row: dict[str, Any] = {"params": self._space_or_fail().flat(parameters)}
        if error or _finite(value) is None:
            row["state"] = "failed"
        else:
            row["value"] = _finite(value)
        self.client.add_trials(study, [row])

    # ------------------------------------------------------------ checkpoints
    def save(self, checkpoint_path: str) -> None:
        """Write the study, the trial map and the trials asked ahead to ``checkpoint_path`` (after
        sending every queued report and tell). No token: a restored searcher takes its own."""
        if not self._sender.flush(SAVE_FLUSH_TIMEOUT):
            logger.warning("calibo.ray: %d reports / tells still unsent at save", self._sender.pending())
        with self._lock:
            state = {
                "format": 1,
                "url": self._url if self._client is None else self._client.base_url,
                "study_id": self._study_id,
                "study_name": self._study_name,
                "trials": dict(self._trials),
                "queued": [t.id for t in self._queue],
                "metric": self._metric,
                "mode": self._mode,
                "max_trials": self._max_trials,
                "max_t": self._max_t,
                # how the study's values become Tune's config (flat names, constants, rounding, labels)
                "space": self._space,
            }
        tmp = f"{checkpoint_path}.tmp-{uuid.uuid4().hex[:6]}"
        with open(tmp, "wb") as f:
            pickle.dump(state, f)
        os.replace(tmp, checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        """Continue the study a checkpoint names, with its trial map: a trial Tune runs again is told
        when it ends, and a suggestion asked again is the same. The trials the checkpoint had asked
        ahead are told ``failed`` (``{"ray": "unused"}``, as the searcher that asked them tells them
        when it ends: the same tell twice changes nothing), never handed out again: the searcher that
        saved may still be alive and holding them. The server is the constructor's (``url``,
        ``client``) when given, else the checkpoint's; the token the constructor's, else
        ``$CALIBO_TOKEN`` (checkpoints hold none)."""
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        if state.get("format") != 1:
            raise ValueError(f"{checkpoint_path}: not a CaliboSearch checkpoint")
        if self._client is None and self._url is None:
            self._url = state["url"]
        self._metric = self._metric or state["metric"]
        self._mode = self._mode or state["mode"]
        if self._max_t is None:
            self._max_t = state.get("max_t")
        if self._max_trials is None:
            self._max_trials = state.get("max_trials")
        if state.get("space") is not None:
            self._space = state["space"]
        with self._lock:
            self._release_locked("replaced by a restore")  # asked ahead by this searcher before
            self._trials.update(state["trials"])
            self._study_name = state["study_name"]
            self._study_id = None
            self._finished = self._hold = False
        self._points = []
        if state["study_id"] is not None:
            self._adopt(self.client.load_study(state["study_id"]).view)
            for tid in state["queued"]:
                self.stats["unused"] += 1
                self._sender.put(self._send_tell, self._study_id, tid, "failed", None, dict(UNUSED))

    # ------------------------------------------------------------ ending
    def shutdown(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Tell the trials asked ahead and never handed out ``failed`` (``{"ray": "unused"}``) and
        send everything queued. Runs at interpreter exit; Tune's experiment ending at its
        ``num_samples`` or this searcher's ``max_trials`` does it as well."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._release_locked("shutdown")
            self._job = None
            asker = self._asker
            self._lock.notify_all()
        if asker is not None:  # an ask it is making: its trials are told unused as they arrive (closed)
            asker.join(timeout)
        if not self._sender.flush(timeout):
            logger.warning("calibo.ray: %d reports / tells unsent at shutdown", self._sender.pending())
        self._sender.close()

    def _release_locked(self, why: str) -> None:
        """Tell every trial asked ahead and not handed out failed."""
        if self._queue:
            logger.debug("calibo.ray: %d trials asked ahead, unused (%s)", len(self._queue), why)
        while self._queue:
            trial = self._queue.popleft()
            self.stats["unused"] += 1
            self._sender.put(self._send_tell, trial.study_id, trial.id, "failed", None, dict(UNUSED))

    # ------------------------------------------------------------ helpers
    def _space_or_fail(self) -> TuneSpace:
        if self._space is None:
            raise RuntimeError("CaliboSearch has no search space: pass space= or the Tuner's param_space")
        return self._space

    def _values_of(self, trial_id: str) -> dict[str, Any]:
        with self._lock:
            values = self._params.get(trial_id)
            cid = self._trials[trial_id]
        if values is None:
            values = self.client.get_trial(self._ensure_study(), cid)["params"]
            with self._lock:
                self._params[trial_id] = values
        return values

    def _budget_spent(self) -> bool:
        return self._finished or (self._max_trials is not None and len(self._trials) >= self._max_trials)

    def _full_iterations(self) -> int:
        if self._max_t is not None:
            return self._max_t
        if self._stop_iterations is not None:
            return self._stop_iterations
        return self._reached

    def _maybe_fetch_locked(self) -> None:
        """Have the asker ask for more when half the batch is handed out (never past the budget)."""
        if self._job is not None or self._asking or self._finished or self._hold or self._closed:
            return
        if time.monotonic() < self._retry_at:
            return
        batch = self.batch
        if len(self._queue) > batch // 2:
            return
        want = batch - len(self._queue)
        if self._max_trials is not None:
            want = min(want, self._max_trials - len(self._trials) - len(self._queue))
        if self._num_samples is not None:  # Tune's num_samples: what it will ask for in this run
            left = self._num_samples - self._handed - len(self._queue)
            if left <= 0 and self._queue:
                return
            want = min(want, left) if left > 0 else 1  # asked past it: a restored run counts its earlier trials
        if want <= 0:
            return
        self._job = (want, f"ray-{self._session}-{self._fetch_no}")
        if self._asker is None or not self._asker.is_alive():
            self._asker = threading.Thread(target=self._ask_loop, name="calibo-ray-ask", daemon=True)
            self._asker.start()
        self._lock.notify_all()

    def _ask_loop(self) -> None:
        """The asker: creates the study when there is none yet, then makes the asks it is given."""
        while True:
            with self._lock:
                while self._job is None:
                    if self._closed:
                        return
                    self._lock.wait(1.0)
                (count, key), self._job = self._job, None
                self._asking = True
            try:
                study = self._ensure_study()
                trials = self.client.ask(study, count, self._worker_id, key)
            except BaseException as e:  # noqa: BLE001 - handed to the driver's next suggest
                logger.warning("calibo.ray: ask failed: %r", e)
                with self._lock:
                    self._fetch_error = e
                    self._asking = False
                    self._retry_at = time.monotonic() + 1.0
                    self._lock.notify_all()
                continue
            with self._lock:
                self._fetch_no += 1  # a failed ask is retried with the same key: the same trials
                self._fetch_error = None
                self._asking = False
                self.stats["asks"] += 1
                self.stats["asked"] += len(trials)
                self._queue.extend(trials)
                self._sender.start()  # the heartbeats of the trials asked ahead and handed out
                if self._finished or self._hold or self._closed or study != self._study_id:
                    self._release_locked("asked after the end, or for a study replaced by a restore")
                self.stats["max_in_flight"] = max(self.stats["max_in_flight"], len(self._live) + len(self._queue))
                self._lock.notify_all()

    def _heartbeats(self) -> None:
        with self._lock:
            study = self._study_id
            ids = [self._trials[t] for t in self._live if t in self._trials] + [t.id for t in self._queue]
        if study is None:
            return
        for tid in ids:
            try:
                self.client.heartbeat(study, tid)
            except Conflict:
                pass  # told meanwhile, or expired (its tell is still recorded)

    def _send_report(self, study: int, cid: int, step: int, value: float) -> None:
        try:
            self.client.report(study, cid, step, value)
            self.stats["reported"] += 1
        except Conflict as e:  # a step told again with another value (a trial Tune restarted), or told
            logger.debug("calibo.ray: report of trial %s step %s: %s", cid, step, e)
        except CaliboError as e:
            logger.warning("calibo.ray: report of trial %s step %s failed: %s", cid, step, e)

    def _send_tell(self, study: int, cid: int, state: str, value: float | None, attrs: dict[str, Any]) -> None:
        deadline = time.monotonic() + RETRY_FOR
        delay = 1.0
        while True:
            try:
                if state == "complete":
                    self.client.tell(study, cid, value, user_attrs=attrs)
                else:
                    self.client.tell(study, cid, value, state=state, user_attrs=attrs)
                return
            except Conflict as e:  # told otherwise already (expired trials still take their tell)
                logger.warning("calibo.ray: trial %s was not told %s: %s", cid, state, e)
                return
            except InvalidRequest as e:
                if state == "failed":
                    logger.error("calibo.ray: trial %s could not be told failed: %s", cid, e)
                    return
                logger.warning("calibo.ray: trial %s: the server refused %s (%s); told failed", cid, state, e)
                state, value = "failed", None
                attrs = {**attrs, "fail_reason": f"refused: {e.message}"[:200]}
            except (ConnectionFailed, ServerError) as e:
                if time.monotonic() > deadline:
                    logger.error("calibo.ray: trial %s not told (%s) after %.0f s: %s", cid, state, RETRY_FOR, e)
                    return
                logger.warning("calibo.ray: telling trial %s: %s; retrying", cid, e)
                time.sleep(delay)
                delay = min(2 * delay, 30.0)


UNUSED = {"ray": "unused", "fail_reason": "asked ahead by calibo.ray, never handed to Tune"}
_PICKLED = {"_metric", "_mode", "_space", "_url", "_study_name", "_study_options", "_batch", "_max_trials",
            "_max_t", "_points", "_report", "_heartbeat_interval", "_worker_id", "_study_id", "_trials",
            "_num_samples", "_stop_iterations"}


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
