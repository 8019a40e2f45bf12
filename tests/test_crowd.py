"""Selection with trials in flight (``engine.crowd``): in-process, and the service against the Optimizer."""

from __future__ import annotations

import importlib
import json
import math
import time

import httpx
import numpy as np
import pytest
from conftest import LiveServer, unique
from test_api import BRANIN, MIXED, branin, wait_fitted

from calibo.engine import EngineConfig, Optimizer, SearchSpace, StudyState, fit, select
from calibo.engine.crowd import Believer, Crowd, lipschitz, penalty
from calibo.engine.state import initial_states

LINE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
FAST = {"n_warmup": 6, "conformalize_from": 10, "split_from": 16, "n_candidates": 300}


def mixed(p: dict) -> float:
    return (math.log10(p["lr"]) + 2) ** 2 + 0.3 * (p["depth"] - 5) ** 2 + {"a": 0, "b": 0.5, "c": 1.5}[p["kind"]]


def crowd_run(space: dict, f, seed: int, told: int = 16, in_flight: int = 4,
              surrogate: str = "qgp") -> tuple[Optimizer, list[dict]]:
    """``told`` sequential trials, then ``in_flight`` asked one at a time and left running (a GP
    surrogate conditions on them as the believer, any other penalises)."""
    opt = Optimizer(space, seed=seed, config=FAST | {"surrogate": surrogate})
    for _ in range(told):
        s = opt.ask()[0]
        opt.tell(s.params, f(s.params))
    return opt, [opt.ask()[0].params for _ in range(in_flight)]


@pytest.mark.parametrize(("space", "f", "surrogate"),
                         [(BRANIN, branin, "qgp"), (MIXED, mixed, "qgp"), (BRANIN, branin, "qrf")])
def test_a_crowd_never_gets_a_running_or_observed_configuration(space, f, surrogate) -> None:
    opt, running = crowd_run(space, f, seed=3, surrogate=surrogate)
    batch = [s.params for s in opt.ask(8)]
    sp = opt.space
    keys = sp.keys(sp.to_unit(running + batch))
    observed = set(sp.keys(sp.to_unit([p for p, _ in opt.observations])))
    assert len(set(keys)) == len(keys), "a running configuration was suggested again"
    assert not observed & set(keys), "an observed configuration was suggested"
    assert all(pred is not None for _, pred in opt.pending[-8:])


@pytest.mark.parametrize("surrogate", ["qgp", "qrf"])  # the believer, and penalisation
def test_a_crowd_is_reproducible_under_a_seed(surrogate) -> None:
    a = crowd_run(BRANIN, branin, seed=5, surrogate=surrogate)[1]
    b = crowd_run(BRANIN, branin, seed=5, surrogate=surrogate)[1]
    c = crowd_run(BRANIN, branin, seed=6, surrogate=surrogate)[1]
    assert a == b
    assert a != c


def _line_snapshot(seed: int = 0):
    space = SearchSpace.from_dict(LINE)
    xs = np.linspace(0.02, 0.98, 30)
    obs = [({"x": float(x)}, float(np.sin(18 * x) + 0.3 * x)) for x in xs]  # wiggly: short length scale
    cfg = EngineConfig(**FAST)
    return space, cfg, fit(obs, space, cfg, seed=seed)


def test_the_believer_shrinks_toward_a_running_point_only_as_far_as_the_kernel_reaches() -> None:
    space, cfg, snap = _line_snapshot()
    kernel = snap.meta.crowd["kernel"]
    ls = kernel["lengthscale"][0]
    b = Believer(kernel, space.features(snap.candidates), snap.raw, snap.levels)
    x = snap.candidates[:, 0]
    row = int(np.argmin(np.abs(x - 0.05)))
    b.add([row])
    f = b.shrink()
    d = np.abs(x - x[row])
    assert (d > 3 * ls).sum() > 20 and ((d > ls) & (d < 3 * ls)).sum() > 5  # the checks below bite
    assert f.max() <= 1.0 + 1e-12 and f.min() > 0.0
    # at the running point what is left is the noise (and the latent variance one noisy look leaves)
    v, noise = b.v[row], b.noise
    assert f[row] == pytest.approx(math.sqrt((v * noise / (v + noise) + noise) / (v + noise)), rel=1e-6)
    assert np.all(f[d > 3 * ls] > 0.999), "the shrink reaches beyond the kernel's length scale"

    def reach(bel: Believer) -> np.ndarray:  # share of each candidate's latent variance taken away
        return (bel.total - bel.shrink() ** 2 * bel.total) / bel.v

    order = np.argsort(d)
    assert np.all(np.diff(reach(b)[order]) <= 1e-9), "the shrink must fade with the distance"
    # a longer length scale conditions farther
    wide = Believer(kernel | {"lengthscale": [4 * ls]}, space.features(snap.candidates), snap.raw, snap.levels)
    wide.add([row])
    mid = (d > ls) & (d < 3 * ls)
    assert np.all(reach(wide)[mid] >= reach(b)[mid] - 1e-12) and np.any(reach(wide)[mid] > reach(b)[mid] + 1e-3)


def test_the_believer_keeps_its_answer_when_its_column_cache_fills(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full cache is cleared while a block is added (a crowd of 32 running points on a snapshot
    whose cache was nearly full answered 500 with a KeyError): the fantasies are the same as with
    room to spare, and the rows added before the clear are still found."""
    import calibo.engine.crowd as crowd

    space, cfg, snap = _line_snapshot()
    kernel = snap.meta.crowd["kernel"]
    feats = space.features(snap.candidates)
    rows = [3, 17, 40, 41, 90, 3]
    roomy = Believer(kernel, feats, snap.raw, snap.levels)
    roomy.add(rows[:2])
    roomy.add(rows)
    monkeypatch.setattr(crowd, "MAX_COLUMNS", 4)
    shared: dict = {}
    tight = Believer(kernel, feats, snap.raw, snap.levels, columns=shared)
    tight.add(rows[:2])  # cached: 3 and 17
    tight.add(rows)  # 40, 41, 90 are new: the cache overflows and is cleared while 3 and 17 are needed
    assert np.allclose(tight.shrink(), roomy.shrink(), rtol=1e-12, atol=1e-14)
    assert len(shared) <= 4 + 3


def test_local_penalisation_excludes_the_ball_the_model_rules_out() -> None:
    space, cfg, snap = _line_snapshot()
    Q = snap.bounds.at(np.array([s.alpha for s in initial_states(cfg)]))
    L = lipschitz(snap.candidates, 0.5 * (snap.raw[:, 4] + snap.raw[:, 5]))
    assert L > 0
    x = snap.candidates[:, 0]
    row = int(np.argmin(np.abs(x - 0.9)))  # a poor region: its predicted gap to the best is large
    phi = penalty(snap.candidates, Q, snap.levels, L, snap.best, [row])
    assert phi[row] < 0.5 and np.all((phi >= 0) & (phi <= 1))
    far = np.abs(x - x[row]) > 0.5
    assert np.all(phi[far] > 0.99)
    # twice the Lipschitz constant: the same gap rules out half the radius, so more survives near p
    phi2 = penalty(snap.candidates, Q, snap.levels, 2 * L, snap.best, [row])
    assert np.all(phi2 >= phi - 1e-12)


def test_a_running_point_the_snapshot_lacks_stands_in_as_its_nearest_candidate() -> None:
    space, cfg, snap = _line_snapshot()
    Q = snap.bounds.at(np.array([s.alpha for s in initial_states(cfg)]))
    view = Crowd(snap, space, Q)
    assert view.mode == "believer"  # a GP: its kernel conditions the choice
    u = np.array([[0.123456]])
    rows = view.rows_of(u, space.keys(u), {})
    assert rows == [int(np.argmin(np.abs(snap.candidates[:, 0] - 0.123456)))]


def test_fit_scores_the_running_configurations_as_candidates() -> None:
    space, cfg, _ = _line_snapshot()
    obs = [({"x": float(x)}, float(np.sin(6 * x))) for x in np.linspace(0.02, 0.98, 14)]
    running = [{"x": 0.3141}, {"x": 0.2718}]
    snap = fit(obs, space, cfg, seed=0, pending=running)
    keys = set(snap.candidate_keys())
    assert set(space.keys(space.to_unit(running))) <= keys


def test_believer_falls_back_to_penalisation_without_a_gp() -> None:
    space = SearchSpace.from_dict(BRANIN)
    cfg = EngineConfig(**FAST, surrogate="qrf")
    rng = np.random.default_rng(0)
    obs = [(p, branin(p)) for p in space.from_unit(space.sample_uniform(20, rng))]
    snap = fit(obs, space, cfg, seed=0)
    assert "kernel" not in snap.meta.crowd
    Q = snap.bounds.at(np.array([s.alpha for s in initial_states(cfg)]))
    assert Crowd(snap, space, Q).mode == "penalize"


# ------------------------------------------------------- service == Optimizer
def _ask(http: httpx.Client, sid: int) -> dict:
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": 1})
    assert r.status_code == 200, r.text
    return r.json()["trials"][0]


def test_the_service_and_the_optimizer_suggest_the_same_to_a_crowd(server: LiveServer) -> None:
    """Same tells, same snapshot, same adaptive state, same running trials: same suggestions."""
    settings = FAST | {"ask_wait_seconds": 60}
    told, in_flight = 18, 4
    opt = Optimizer(BRANIN, seed=11, config={k: v for k, v in settings.items() if k != "ask_wait_seconds"})
    with server.client() as http:
        r = http.post("/v1/studies", json={"name": unique("crowd"), "space": BRANIN, "seed": 11,
                                           "settings": settings})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        for _ in range(told):  # a sequential user: each ask waits for the fit on every tell
            t = _ask(http, sid)
            s = opt.ask()[0]
            assert t["params"] == s.params
            value = branin(t["params"])
            assert http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": value}).status_code == 200
            opt.tell(s.params, value)
        served = [_ask(http, sid) for _ in range(in_flight)]  # then a crowd: these stay running
        mine = [opt.ask()[0] for _ in range(in_flight)]
    assert [t["params"] for t in served] == [s.params for s in mine]
    assert all(t["prediction"] is not None for t in served)
    for t, s in zip(served, mine, strict=True):
        for a, b in zip(t["prediction"]["intervals"], s.prediction["intervals"], strict=True):
            assert a["alpha"] == pytest.approx(b["alpha"])
            # None: unbounded
            assert a["lower"] == (None if b["lower"] is None else pytest.approx(b["lower"], rel=1e-9))


def test_a_crowd_waits_for_fits_quick_against_its_trials() -> None:
    """A twentieth of a trial at most, and only when the newest fit took no longer than that."""
    from calibo.server.studies.service import CROWD_WAIT_SHARE, crowd_wait

    assert CROWD_WAIT_SHARE == 0.05
    assert crowd_wait(60.0, 0.2, 5.0) == pytest.approx(3.0)  # 1-minute trials, 0.2 s fits: up to 3 s
    assert crowd_wait(600.0, 0.2, 5.0) == 5.0  # within the study's bound
    assert crowd_wait(2.0, 0.2, 5.0) == 0.0  # 2 s trials: a 0.2 s fit is a tenth of one, too long
    assert crowd_wait(0.01, 0.05, 5.0) == 0.0  # a load test's instant trials
    assert crowd_wait(None, 0.1, 5.0) == 0.0 and crowd_wait(60.0, None, 5.0) == 0.0  # nothing known yet


@pytest.mark.slow  # trials that run 3 s
def test_a_crowd_ask_gets_the_fit_on_every_result_told(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten trials run for 3 s each and eight are told, two still running: a crowd. With the share
    of a trial an ask may wait raised to all of it (so that a fit on a loaded test machine is
    quick against these short trials), the next ask waits for the fit on all eight results. Before,
    a crowd's ask never waited: it was served from the fit on seven."""
    monkeypatch.setattr("calibo.server.studies.service.CROWD_WAIT_SHARE", 1.0)
    with server.client() as http:
        r = http.post("/v1/studies", json={"name": unique("crowd-wait"), "space": BRANIN, "seed": 3,
                                           "settings": FAST | {"ask_wait_seconds": 60}})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]

        def tell_all(trials: list[dict]) -> None:
            for t in trials:
                r = http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": branin(t["params"])})
                assert r.status_code == 200, r.text

        first = http.post(f"/v1/studies/{sid}/ask", json={"count": 10}).json()["trials"]
        time.sleep(3.0)
        tell_all(first[:7])
        wait_fitted(http, sid, 7)  # a fit: before the first, how long a fit takes is unknown
        tell_all(first[7:8])
        nxt = _ask(http, sid)
        assert nxt["prediction"] is not None and nxt["prediction"]["fitted_on"] == 8


def test_each_objective_is_conditioned_with_its_own_kernel() -> None:
    """Two objectives, the first a function of x0 only and the second of x1 only: a running point
    narrows the first objective where x0 is the same and the second where x1 is."""
    space = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(2)})

    def f(p: dict) -> list[float]:
        return [float(np.sin(6 * p["x0"]) + p["x0"]), float(np.cos(5 * p["x1"]) + 0.5 * p["x1"])]

    obs = [(p, f(p)) for p in space.from_unit(space.sample(10, 3))]
    cfg = EngineConfig(n_candidates=400)
    snap = fit(obs, space, cfg, seed=0, directions=["minimize", "minimize"])
    (ls1,), (ls2,) = ([k["lengthscale"]] for k in [snap.meta.crowd["kernel"],
                                                    *snap.meta.crowd["objective_kernels"]])
    assert ls1[1] > 10 * ls1[0] and ls2[0] > 10 * ls2[1], "each fit finds its own relevant input"
    Q = snap.bounds.at(np.array([s.alpha for s in initial_states(cfg)]))
    view = Crowd(snap, space, Q)
    c = snap.candidates
    row = int(np.argmin(((c - 0.5) ** 2).sum(1)))
    view.add([row])
    s1, s2 = view.shrinks()
    same_x0 = (np.abs(c[:, 0] - c[row, 0]) < 0.03) & (np.abs(c[:, 1] - c[row, 1]) > 0.4)
    same_x1 = (np.abs(c[:, 1] - c[row, 1]) < 0.03) & (np.abs(c[:, 0] - c[row, 0]) > 0.4)
    assert same_x0.any() and same_x1.any()
    assert s1[same_x0].max() < 0.5 < s2[same_x0].min()
    assert s2[same_x1].max() < 0.5 < s1[same_x1].min()


def test_fits_acquisition_search_is_conditioned_on_the_running_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two basins; the search climbs into the better one. With the crowd already there (four trials
    running at its best point), the search of the same fit looks elsewhere too."""
    space = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(2)})
    a, b = np.array([0.25, 0.3]), np.array([0.75, 0.7])

    def f(p: dict) -> float:
        x = np.array([p["x0"], p["x1"]])
        return float(min(((x - a) ** 2).sum(), ((x - b) ** 2).sum() + 0.01))

    obs = [(p, f(p)) for p in space.from_unit(space.sample(24, 3))]
    cfg = EngineConfig(n_candidates=300)
    fitting = importlib.import_module("calibo.engine.fit")  # the module (the package's ``fit`` is the function)

    def searched(pending: list[dict]) -> np.ndarray:
        s = fit(obs, space, cfg, seed=0, pending=pending)
        with monkeypatch.context() as m:  # the drawn candidates alone
            m.setattr(fitting, "_searched", lambda space, *a, **kw: np.empty((0, space.dim)))
            drawn = set(space.keys(fit(obs, space, cfg, seed=0, pending=pending).candidates))
        return np.array([r for r, k in zip(s.candidates, space.keys(s.candidates), strict=True) if k not in drawn])

    snap = fit(obs, space, cfg, seed=0)
    running: list[dict] = []
    for i in range(4):
        running += [select(snap, StudyState(0, initial_states(cfg)), space, cfg, asked=24 + i,
                           pending=running)[0].params]
    P = space.to_unit(running)

    def reach(rows: np.ndarray) -> np.ndarray:  # each searched point's distance to the nearest running one
        return np.sqrt(((rows[:, None, :] - P[None]) ** 2).sum(2)).min(1)

    alone, crowded = searched([]), searched(running)
    assert alone.shape[0] and crowded.shape[0]
    # unconditioned, the starts climb to where the crowd is (all but those in the other basin)
    assert np.mean(reach(alone) < 0.05) > 0.8, np.round(reach(alone), 3)
    far = [int(np.sum(reach(rows) > 0.25)) for rows in (alone, crowded)]
    assert far[1] >= far[0] + 3, far  # conditioned, several look elsewhere


@pytest.mark.parametrize("directions", [None, ["minimize", "minimize"]])
def test_a_restored_optimizer_in_a_crowd_asks_what_the_original_would(directions) -> None:
    """fit conditions on the trials running when it fits: the state carries them, so a restored
    optimizer refits the same snapshot although more trials have been asked since."""
    space = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(2)})

    def f(p: dict):
        a = (p["x0"] - 0.3) ** 2 + (p["x1"] - 0.6) ** 2
        return a if directions is None else [a, (p["x0"] - 0.8) ** 2 + p["x1"] ** 2]

    opt = Optimizer(space, seed=4, config=FAST, directions=directions)
    for _ in range(10):
        s = opt.ask()[0]
        opt.tell(s.params, f(s.params))
    opt.ask(2)  # fitted with none running
    opt.ask(2)  # the same snapshot, two running
    again = Optimizer.from_state_dict(json.loads(json.dumps(opt.state_dict())))
    assert again.ask()[0].params == opt.ask()[0].params


def test_a_restored_optimizer_refits_with_what_runs_once_a_trial_finishes() -> None:
    """The state's running configurations belong to its snapshot: after a further tell, the restored
    optimizer refits with the trials running then, as the original does."""
    space = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(2)})

    def f(p: dict) -> float:
        return (p["x0"] - 0.3) ** 2 + (p["x1"] - 0.6) ** 2

    opt = Optimizer(space, seed=0, config=FAST)
    for _ in range(10):
        s = opt.ask()[0]
        opt.tell(s.params, f(s.params))
    opt.ask(2)  # fitted with none running
    first, _ = opt.ask(2)
    state = json.loads(json.dumps(opt.state_dict()))
    # restored and saved again before it refits: the state still says what the snapshot was fitted with
    twice = Optimizer.from_state_dict(json.loads(json.dumps(Optimizer.from_state_dict(state).state_dict())))
    assert [s.params for s in twice.ask(3)] == [s.params for s in Optimizer.from_state_dict(state).ask(3)]
    again = Optimizer.from_state_dict(state)
    for o in (opt, again):
        o.tell(first.params, f(first.params))
    assert [s.params for s in again.ask(3)] == [s.params for s in opt.ask(3)]
