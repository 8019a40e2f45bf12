"""``calibo.ray.CaliboSearch``: the Tune search space as a study's, the searcher's bookkeeping against
a stand-in client, and Tune's ``Tuner.fit`` on a real local Ray against a live server (every trial
told once, errors failed, early stops pruned, a restore continuing the same study)."""

from __future__ import annotations

import itertools
import math
import os
import pickle
import secrets
import subprocess
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import LiveServer, unique
from test_api import FAST

# Ray >= 2.5x turns token auth on for a new local cluster and, given no token, writes one to
# ~/.ray/auth_token: two test processes starting clusters at once overwrite each other's file, and a GCS
# then refuses its own driver. Each test process gives its cluster a token of its own through the
# environment, set before Ray reads its configuration (at import) and inherited by the cluster's
# processes; a token the environment already holds is kept.
if "RAY_AUTH_TOKEN" not in os.environ:
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")

from ray.tune.schedulers import ASHAScheduler  # noqa: E402
from ray.tune.search import Searcher  # noqa: E402

from calibo import Client, Trial  # noqa: E402
from calibo.ray import UNUSED, CaliboSearch, convert_search_space, read_space  # noqa: E402


# ------------------------------------------------------------------ the search space
def test_import_calibo_never_imports_ray_and_a_missing_ray_names_the_extra() -> None:
    code = ("import sys, calibo; assert 'ray' not in sys.modules, 'import calibo imported ray'\n"
            "sys.modules['ray'] = None\n"
            "try:\n    import calibo.ray\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'pip install "calibo[ray]"' in out.stdout


def test_tune_domains_become_the_study_space() -> None:
    space = {
        "a": tune.uniform(-1, 2), "b": tune.loguniform(1e-4, 1e-1), "c": tune.quniform(0, 1, 0.25),
        "d": tune.qloguniform(1e-2, 10, 0.01), "e": tune.randint(1, 10), "f": tune.qrandint(0, 100, 5),
        "g": tune.lograndint(1, 1000), "h": tune.qlograndint(10, 1000, 10),
        "i": tune.choice(["x", 3, 2.5, None]), "j": tune.choice([[16, 16], [32]]), "k": tune.choice([1, True]),
        "model": {"depth": tune.randint(2, 5), "name": "mlp", "layers": [tune.choice([8, 16]), "relu"]},
        "epochs": 7,
    }
    assert convert_search_space(space) == {
        "a": {"type": "float", "low": -1.0, "high": 2.0, "log": False},
        "b": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "c": {"type": "float", "low": 0.0, "high": 1.0, "log": False},
        "d": {"type": "float", "low": 1e-2, "high": 10.0, "log": True},
        "e": {"type": "int", "low": 1, "high": 9, "log": False},  # randint excludes its upper bound
        "f": {"type": "int", "low": 0, "high": 100, "log": False},  # qrandint includes it
        "g": {"type": "int", "low": 1, "high": 999, "log": True},
        "h": {"type": "int", "low": 10, "high": 1000, "log": True},
        "i": {"type": "categorical", "choices": ["x", 3, 2.5, None]},
        "j": {"type": "categorical", "choices": ["[16, 16]", "[32]"]},  # not JSON scalars: by label
        "k": {"type": "categorical", "choices": ["1", "True"]},  # equal in Python (1 == True): by label
        "model/depth": {"type": "int", "low": 2, "high": 4, "log": False},
        "model/layers/0": {"type": "categorical", "choices": [8, 16]},
    }
    ts = read_space(space)
    values = {"a": 0.5, "b": 0.01, "c": 0.6, "d": 0.1234, "e": 9, "f": 52, "g": 10, "h": 996, "i": None,
              "j": "[32]", "k": "True", "model/depth": 3, "model/layers/0": 16}
    config = ts.config(values)
    assert config == {"a": 0.5, "b": 0.01, "c": 0.5, "d": pytest.approx(0.12), "e": 9, "f": 50, "g": 10, "h": 1000,
                      "i": None, "j": [32], "k": True, "epochs": 7,
                      "model": {"depth": 3, "name": "mlp", "layers": [16, "relu"]}}
    assert isinstance(config["f"], int) and isinstance(config["k"], bool)
    assert ts.flat(config) == {**values, "c": 0.5, "d": pytest.approx(0.12), "f": 50, "h": 1000}
    assert ts.flat({"a": 1.5}) == {"a": 1.5}  # a partial point (points_to_evaluate): the rest is the server's


@pytest.mark.parametrize(("space", "name", "what"), [
    ({"opt": {"lr": tune.grid_search([0.1, 0.01])}}, "opt/lr", "grid_search"),
    ({"x": tune.sample_from(lambda spec: 1)}, "x", "sample_from"),
    ({"model": {"w": tune.randn(0, 1)}}, "model/w", "randn"),
    ({"a/b": tune.uniform(0, 1)}, "a/b", "holding '/'"),
    ({"c": 1}, "", "no parameter"),
])
def test_what_calibo_cannot_search_is_refused_by_name(space: dict, name: str, what: str) -> None:
    with pytest.raises(ValueError) as e:
        CaliboSearch(space, "loss", "min", url="http://127.0.0.1:9")
    assert f"'{name}'" in str(e.value) or not name
    assert what in str(e.value)


# ------------------------------------------------------------------ the searcher, on a stand-in client
class FakeClient:
    """What CaliboSearch calls of a :class:`calibo.Client`, in memory; ``gate`` holds asks back."""

    base_url = "http://fake:8000"

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.asks: list[int] = []
        self.running: dict[int, Trial] = {}
        self.told: dict[int, tuple[str, float | None, dict]] = {}
        self.reports: list[tuple[int, int, float]] = []
        self.beats: list[int] = []
        self.twice: list[int] = []
        self.attrs: dict[str, Any] = {}
        self.gate = threading.Event()  # asks after the first hold_after wait for it
        self.gate.set()
        self.hold_after = 0
        self.lock = threading.Lock()

    def create_study(self, name: str, space: dict, direction: str, *, user_attrs: dict | None = None,
                     **kw: Any) -> SimpleNamespace:
        self.attrs.update(user_attrs or {})
        self.space, self.direction = space, direction
        return SimpleNamespace(id=7, view={"id": 7, "name": name, "user_attrs": dict(self.attrs)})

    def load_study(self, study: int) -> SimpleNamespace:
        return SimpleNamespace(id=7, view={"id": 7, "name": "fake", "user_attrs": dict(self.attrs)})

    def ask(self, study: int, count: int, worker_id: str | None = None, key: str | None = None) -> list[Trial]:
        if len(self.asks) >= self.hold_after:
            self.gate.wait(10)
        with self.lock:
            self.asks.append(count)
            out = []
            for _ in range(count):
                i = next(self.ids)
                out.append(Trial(id=i, number=i - 1, params={"x": i / 100}, prediction=None, study_id=study))
                self.running[i] = out[-1]
            return out

    def tell(self, study: int, trial: int, value: float | None = None, *, state: str | None = None,
             user_attrs: dict | None = None) -> dict:
        with self.lock:
            if trial in self.told:  # the searcher's sender thread calls this: recorded, checked by the test
                self.twice.append(trial)
                return {}
            self.running.pop(trial)
            self.told[trial] = (state or "complete", value, user_attrs or {})
        return {}

    def report(self, study: int, trial: int, step: int, value: float) -> bool:
        self.reports.append((trial, step, value))
        return False

    def heartbeat(self, study: int, trial: int) -> None:
        self.beats.append(trial)

    def get_trial(self, study: int, trial: int) -> dict:
        t = self.running.get(trial)
        return {"id": trial, "params": {"x": trial / 100}, "state": "running" if t else "complete"}


def _searcher(fake: FakeClient, **kw: Any) -> CaliboSearch:
    return CaliboSearch({"x": tune.uniform(0, 1), "c": "const"}, "loss", "min", client=fake, **kw)


def _suggest(s: CaliboSearch, trial_id: str) -> Any:
    """As Tune does: ask again (next driver step) while the searcher answers None."""
    deadline = time.monotonic() + 10
    while (config := s.suggest(trial_id)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return config


def test_suggestions_come_from_batches_asked_ahead_and_each_end_is_told_once() -> None:
    fake = FakeClient()
    s = _searcher(fake, batch=4, max_trials=6)
    configs = {t: _suggest(s, t) for t in ("t1", "t2", "t3")}
    assert configs["t1"] == {"x": 0.01, "c": "const"} and fake.direction == "minimize"
    assert fake.attrs["ray_max_trials"] == 6
    # t1 ran to its end on its own (every result passed on); t2 was stopped by a scheduler at step 2
    # (Tune withholds the result it stops on); t3 was stopped on step 3, the most any trial reached
    for step in (1, 2, 3):
        s.on_trial_result("t1", {"loss": 1.0 / step, "training_iteration": step})
    s.on_trial_complete("t1", {"loss": 1 / 3, "training_iteration": 3})
    s.on_trial_result("t2", {"loss": 2.0, "training_iteration": 1})
    s.on_trial_complete("t2", {"loss": 1.5, "training_iteration": 2})
    s.on_trial_result("t3", {"loss": 0.9, "training_iteration": 2})
    s.on_trial_complete("t3", {"loss": 0.2, "training_iteration": 3})
    s.on_trial_complete("t3", {"loss": 0.2, "training_iteration": 3})  # again: told once
    configs.update({t: _suggest(s, t) for t in ("t4", "t5", "t6")})
    s.on_trial_complete("t4", None, error=True)
    s.on_trial_complete("t5", {"loss": math.nan, "training_iteration": 1})
    s.on_trial_result("t6", {"loss": 0.05, "training_iteration": 1})
    s.on_trial_complete("t6", {"loss": 0.05, "training_iteration": 1})  # one result, then returned
    assert _suggest(s, "t7") == Searcher.FINISHED  # max_trials handed out
    assert s.suggest("t2") == configs["t2"]  # a trial it knows: the same configuration again
    s.shutdown()
    assert sum(fake.asks) == 6 and fake.asks[0] == 4  # never asked past the budget
    ids = s.trial_map
    told = {t: fake.told[ids[t]] for t in ids}
    assert {t: st for t, (st, _, _) in told.items()} == {
        "t1": "complete", "t2": "pruned", "t3": "complete", "t4": "failed", "t5": "failed", "t6": "complete"}
    assert told["t2"][1] == 1.5 and told["t3"][1] == 0.2 and told["t1"][1] == pytest.approx(1 / 3)
    assert all(a["ray_trial_id"] == t for t, (_, _, a) in told.items())
    assert (ids["t2"], 2, 1.5) in fake.reports and (ids["t1"], 3, pytest.approx(1 / 3)) in fake.reports
    assert not fake.running and not fake.twice


def test_while_trials_run_suggest_waits_for_the_ask_out_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import calibo.ray.asking as asking

    monkeypatch.setattr(asking, "ASK_OUT_WAIT", 0.3)
    fake = FakeClient()
    s = _searcher(fake, batch=1)
    fake.gate.clear()
    fake.hold_after = 1  # the second ask (asked ahead as t1 is handed out) hangs
    assert s.suggest("t1") is not None  # nothing runs yet: it waits for the first ask
    t0 = time.perf_counter()
    assert s.suggest("t2") is None  # t1 runs and the ask out does not answer: None, once the wait is over
    assert 0.3 <= time.perf_counter() - t0 < 5.0
    assert s.stats["suggest_none"] == 1
    monkeypatch.setattr(asking, "ASK_OUT_WAIT", 30.0)  # however loaded the machine, the ask lands first
    threading.Timer(0.1, fake.gate.set).start()  # the ask answers while suggest waits: Tune gets it now
    assert s.suggest("t2") is not None
    assert s.stats["suggest_none"] == 1
    s.shutdown()


def _settled(s: CaliboSearch) -> int:
    """The trials the searcher holds once no ask is in flight."""
    deadline = time.monotonic() + 10
    while (s._asking or s._job is not None) and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(s._queue)


def test_with_tunes_concurrency_known_one_ask_covers_every_free_slot() -> None:
    fake = FakeClient()
    s = _searcher(fake, batch=2)
    assert s.set_max_concurrency(8) is False  # Tune's ConcurrencyLimiter still limits
    for i in range(8):  # Tune fills its 8 slots: the first ask covers them
        assert _suggest(s, f"t{i}") is not None
    assert fake.asks[0] == 8
    held = _settled(s)
    assert 1 <= held <= 2  # then the batch is asked ahead, as without it
    asks = len(fake.asks)
    for i in range(5):  # five end at once: the held trials cover some of the free slots
        s.on_trial_complete(f"t{i}", {"loss": 1.0, "training_iteration": 1})
    for i in range(5):  # Tune fills them
        assert _suggest(s, f"u{i}") is not None
    # the first of them left 4 running and held - 1: one ask covered the other free slots
    assert fake.asks[asks] == 8 - 4 - (held - 1)
    s.shutdown()


def test_an_ask_for_tunes_free_slots_stays_within_what_the_server_takes() -> None:
    from calibo.ray.asking import ASK_MOST
    from calibo.server.api.schemas.trials import MAX_COUNT
    assert ASK_MOST == MAX_COUNT
    fake = FakeClient()
    s = _searcher(fake, batch=2)
    s.set_max_concurrency(1000)  # a cluster's worth of slots
    assert _suggest(s, "t0") is not None
    s.shutdown()
    assert fake.asks[0] == MAX_COUNT


def test_without_tunes_concurrency_an_ask_tops_up_the_batch() -> None:
    fake = FakeClient()
    s = _searcher(fake, batch=2)
    for i in range(4):
        assert _suggest(s, f"t{i}") is not None
    s.shutdown()
    assert max(fake.asks) <= 2


def test_trials_asked_ahead_and_never_used_are_told_failed() -> None:
    fake = FakeClient()
    s = _searcher(fake, batch=4)
    _suggest(s, "t1")
    _suggest(s, "t2")  # two left of four: two more asked for
    s.on_trial_complete("t1", {"loss": 1.0, "training_iteration": 1})
    s.shutdown()
    unused = {i: v for i, v in fake.told.items() if v[2].get("ray") == "unused"}
    assert len(unused) == sum(fake.asks) - 2 > 0 and all(v[0] == "failed" for v in unused.values())
    assert list(fake.running) == [s.trial_map["t2"]]  # the one Tune still runs


def test_running_and_asked_ahead_trials_get_heartbeats() -> None:
    fake = FakeClient()
    s = _searcher(fake, batch=2, heartbeat_interval=0.05)
    _suggest(s, "t1")
    time.sleep(0.3)
    s.on_trial_complete("t1", {"loss": 1.0, "training_iteration": 1})
    s.shutdown()
    assert s.trial_map["t1"] in fake.beats and set(fake.beats) - {s.trial_map["t1"]}  # and the one asked ahead


def test_num_samples_bounds_what_is_asked_ahead() -> None:
    fake = FakeClient()
    s = _searcher(fake, batch=4)
    s.set_search_properties("loss", "min", {}, num_samples=5)
    for i in range(5):
        assert _suggest(s, f"t{i}") is not None
    assert sum(fake.asks) == 5 and not s.stats["unused"]


def test_pickles_and_checkpoints_hold_no_token(tmp_path: Any) -> None:
    s = CaliboSearch({"x": tune.uniform(0, 1)}, "loss", "min", url="http://127.0.0.1:9", token="s3cret-token",
                     study_name="kept", max_trials=9)
    s.set_max_concurrency(4)  # Tune's ConcurrencyLimiter said so before the experiment was pickled
    blob = pickle.dumps(s)
    assert b"s3cret-token" not in blob
    copy = pickle.loads(blob)
    assert copy._token is None and copy.client.base_url == "http://127.0.0.1:9"
    assert copy._max_concurrent == 4
    older = CaliboSearch.__new__(CaliboSearch)  # pickled before the searcher kept it
    older.__setstate__({k: v for k, v in s.__getstate__().items() if k != "_max_concurrent"})
    assert older._max_concurrent is None
    s.save(str(tmp_path / "ckpt.pkl"))
    assert b"s3cret-token" not in (tmp_path / "ckpt.pkl").read_bytes()
    fresh = CaliboSearch()
    fresh.restore(str(tmp_path / "ckpt.pkl"))  # no study yet: nothing to ask the server
    assert (fresh.metric, fresh.mode, fresh._max_trials, fresh._study_name) == ("loss", "min", 9, "kept")
    assert fresh.client.base_url == "http://127.0.0.1:9"


# ------------------------------------------------------------------ Tune on a real local Ray
@pytest.fixture(scope="module")
def local_ray() -> Any:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _train(config: dict) -> None:
    x, lr = config["x"], config["opt"]["lr"]
    if x > 1.8:
        raise ValueError("diverged")
    for step in range(1, config["steps"] + 1):
        time.sleep(0.02)
        tune.report({"loss": (x - 0.5) ** 2 + lr + (0.1 if config["opt"]["kind"] == "b" else 0.0) + 1.0 / step})


def _train_once(config: dict) -> None:
    tune.report({"loss": (config["x"] - 0.3) ** 2 + 0.1 * config["y"]})


class Record(tune.Callback):
    """What Tune did: each trial's end, its config, and how many ran at once."""

    def __init__(self) -> None:
        self.ends: dict[str, tuple[str, int | None, float | None]] = {}
        self.configs: dict[str, dict] = {}
        self.running: set[str] = set()
        self.most = 0

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.running.add(trial.trial_id)
        self.most = max(self.most, len(self.running))
        self.configs[trial.trial_id] = trial.config

    def _end(self, trial: Any, how: str) -> None:
        self.running.discard(trial.trial_id)
        r = trial.last_result or {}
        self.ends[trial.trial_id] = (how, r.get("training_iteration"), r.get("loss"))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial, "done")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial, "error")


def _study_trials(url: str, study_id: int) -> list:
    with Client(url) as c:
        return c.load_study(study_id).trials()


def test_tuner_fit_tells_every_trial_once(live_server: LiveServer, local_ray: Any, tmp_path: Any) -> None:
    steps = 4
    search = CaliboSearch(url=live_server.url, study_name=unique("ray"), seed=3, settings=FAST, max_t=steps,
                          points_to_evaluate=[{"x": 1.9}])  # enqueued, handed out first: it raises
    record = Record()
    space = {"x": tune.uniform(-2.0, 2.0), "steps": steps,
             "opt": {"lr": tune.loguniform(1e-3, 1.0), "kind": tune.choice(["a", "b"])}}
    tuner = tune.Tuner(
        tune.with_resources(_train, {"cpu": 0.25}), param_space=space,
        tune_config=tune.TuneConfig(search_alg=search, metric="loss", mode="min", num_samples=24,
                                    max_concurrent_trials=8,
                                    scheduler=ASHAScheduler(max_t=steps, grace_period=1, reduction_factor=2)),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="fit", verbose=0, callbacks=[record]),
    )
    tuner.fit()
    search.shutdown()
    assert len(record.ends) == 24 and 1 < record.most <= 8
    trials = _study_trials(live_server.url, search.study_id)
    by_ray = {t.user_attrs["ray_trial_id"]: t for t in trials}
    assert len(trials) == len(by_ray) == 24  # each Tune trial is one study trial; nothing asked unused
    assert set(by_ray) == set(record.ends) and not [t for t in trials if t.state == "running"]
    for tid, (how, last_step, loss) in record.ends.items():
        t = by_ray[tid]
        assert t.params == {"x": record.configs[tid]["x"], "opt/lr": record.configs[tid]["opt"]["lr"],
                            "opt/kind": record.configs[tid]["opt"]["kind"]}
        if how == "error":
            assert t.state == "failed" and t.params["x"] > 1.8, (tid, t)
        elif last_step == steps:
            assert t.state == "complete" and t.value == pytest.approx(loss), (tid, t)
        else:  # ASHA stopped it early
            assert t.state == "pruned" and t.value == pytest.approx(loss), (tid, last_step, t)
    states = [t.state for t in trials]
    errors = [tid for tid, (how, _, _) in record.ends.items() if how == "error"]
    assert states.count("failed") == len(errors) >= 1 and states.count("pruned") >= 1
    assert by_ray[next(iter(search.trial_map))].params["x"] == 1.9  # the point to evaluate came first
    assert search.stats["max_in_flight"] <= 8 + search.batch and search.batch == 2  # the default
    assert search._max_concurrent == 8  # Tune's ConcurrencyLimiter told it: its asks cover the free slots
    assert search.stats["reported"] >= sum(1 for t in trials if t.state == "complete") * steps


def test_a_restored_searcher_continues_the_same_study(live_server: LiveServer, local_ray: Any,
                                                      tmp_path: Any) -> None:
    space = {"x": tune.uniform(-1.0, 1.0), "y": tune.randint(0, 4)}
    first = CaliboSearch(space, metric="loss", mode="min", url=live_server.url, study_name=unique("ray-restore"),
                         seed=5, settings=FAST, max_trials=14, batch=4)
    record1, record2 = Record(), Record()

    def run(search: CaliboSearch, name: str, record: Record, samples: int) -> None:
        tune.Tuner(tune.with_resources(_train_once, {"cpu": 0.25}),
                   tune_config=tune.TuneConfig(search_alg=search, num_samples=samples, max_concurrent_trials=4),
                   run_config=tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0,
                                             callbacks=[record])).fit()

    run(first, "first", record1, 8)  # the space is the searcher's: Tune does not say num_samples
    assert len(record1.ends) == 8
    second = CaliboSearch(url=live_server.url)  # a new process would build it like this
    second.restore_from_dir(str(tmp_path / "first"))  # Tune's own checkpoint of the searcher
    assert second.study_id == first.study_id and second._max_trials == 14
    some = next(iter(record1.configs))
    assert second.suggest(some) == record1.configs[some]  # a trial it knows: the same configuration
    run(second, "second", record2, 100)  # ends at the study's budget: 14 trials handed out in all
    first.shutdown()
    second.shutdown()
    assert len(record2.ends) == 6 and not set(record1.ends) & set(record2.ends)
    trials = _study_trials(live_server.url, first.study_id)
    ran = [t for t in trials if "ray_trial_id" in t.user_attrs]
    unused = [t for t in trials if t.user_attrs.get("ray") == "unused"]
    assert sorted(t.user_attrs["ray_trial_id"] for t in ran) == sorted({**record1.ends, **record2.ends})
    assert all(t.state == "complete" for t in ran)
    assert unused and len(trials) == len(ran) + len(unused) and all(t.state == "failed" for t in unused)
    assert all(t.user_attrs == UNUSED for t in unused)
