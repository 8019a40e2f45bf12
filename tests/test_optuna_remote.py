"""CaliboSampler's remote mode: Optuna processes on one RDB study share one calibo server.

Separate processes run unchanged Optuna code (``optuna.load_study(...).optimize``) whose only
calibo line is ``sampler=CaliboSampler(url=...)``; the server suggests every modelled trial, fits
once per result at most, and the processes fit nothing (the engine's fit and select are made to
raise in them). One Optuna study is one server study, named after it, whose space grows as the
define-by-run objective reveals parameters.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

optuna = pytest.importorskip("optuna")

from calibo.optuna import CaliboSampler  # noqa: E402

WORKER = textwrap.dedent('''
    import math, sys
    import optuna
    import calibo.optuna._sampler as local
    from calibo.optuna import CaliboSampler

    def refuse(*a, **k):
        raise AssertionError("the engine ran in a remote-mode worker")
    local.fit = local.select = refuse  # the remote mode must not fit or select here

    def objective(trial):
        kind = trial.suggest_categorical("kind", ["a", "b"])
        x = trial.suggest_float("x", -3.0, 3.0)
        loss = (x - 1.0) ** 2
        if kind == "b":
            loss += trial.suggest_int("k", 0, 5) / 5
        if trial.number % 17 == 5:
            raise optuna.TrialPruned()
        return loss

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = optuna.storages.RDBStorage(sys.argv[1], engine_kwargs={"connect_args": {"timeout": 60}})
    study = optuna.load_study(study_name="shared", storage=storage,
                              sampler=CaliboSampler(url=sys.argv[2], n_startup_trials=6, seed=1))
    study.optimize(objective, n_trials=int(sys.argv[3]))
''')


def _server_trials(url: str, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The views of the server's studies named ``name`` (the listing's name filter) and their trials."""
    with httpx.Client(base_url=url, timeout=30) as c:
        studies = c.get("/v1/studies", params={"limit": 1000, "name": name}).json()["studies"]
        trials = []
        for s in studies:
            offset = 0
            while True:
                page = c.get(f"/v1/studies/{s['id']}/trials", params={"limit": 1000, "offset": offset}).json()
                trials += [{**t, "study": s["id"]} for t in page["trials"]]
                if len(page["trials"]) < 1000:
                    break
                offset += 1000
        views = [c.get(f"/v1/studies/{s['id']}").json() for s in studies]
    return views, trials


def test_four_processes_share_one_server_study(server, tmp_path: Path) -> None:  # noqa: ANN001
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.create_study(study_name="shared", storage=storage)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs = [subprocess.Popen([sys.executable, str(script), storage, server.url, "50"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)

    study = optuna.load_study(study_name="shared", storage=storage)
    trials = study.trials
    assert len(trials) == 200
    states = Counter(t.state for t in trials)
    assert states[optuna.trial.TrialState.RUNNING] == 0
    remote = [t for t in trials if "calibo:remote" in t.system_attrs]
    assert len(remote) >= 180  # all but the first trials, sampled before any trial completed
    # 0 duplicate suggestions: the configurations the server handed out are distinct
    suggested = [json.dumps(json.loads(t.system_attrs["calibo:remote"])["params"], sort_keys=True) for t in remote]
    assert len(set(suggested)) == len(suggested)
    # and no two Optuna trials ran the same configuration (the random first trials included: the
    # processes share a seed, their independent draws are seeded per trial)
    ran = [json.dumps(t.params, sort_keys=True) for t in trials]
    assert len(set(ran)) == len(ran)

    views, told = _server_trials(server.url, "shared")
    assert len(views) == 1  # one server study for the Optuna study, named after it
    by_id = {t["id"]: t for t in told}
    ran_otherwise = 0
    for t in remote:  # every asked trial is told on the server, in its Optuna state, with its value
        stored = json.loads(t.system_attrs["calibo:remote"])
        on_server = by_id[stored["trial"]]
        if on_server["state"] == "failed" and "ran other parameters" in (on_server.get("user_attrs") or {}).get(
                "fail_reason", ""):
            # asked while another process grew the space: the trial ran parameters the server did not
            # suggest, so the suggestion is told failed and the result added (counted below)
            ran_otherwise += 1
            continue
        want = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed"}[t.state.name]
        assert on_server["state"] == want, (t.number, on_server)
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert on_server["value"] == pytest.approx(t.value)
    # every completed Optuna trial is on the server's study, once (asked there or added)
    newest = views[0]
    numbers = Counter(t["user_attrs"].get("optuna_trial") for t in told
                      if t["study"] == newest["id"] and t["state"] == "complete")
    assert set(numbers) == {t.number for t in trials if t.state.name == "COMPLETE"}
    assert max(numbers.values()) == 1
    # one fit per result at most: fits (snapshot versions) against results the server holds
    results = sum(1 for t in told if t["study"] == newest["id"] and t["state"] == "complete")
    fits = newest["surrogate_status"]["snapshot_version"] or 0
    print(f"remote: {len(remote)} asked, {len(set(suggested))} distinct, {results} results, {fits} fits, "
          f"{ran_otherwise} ran other parameters")
    assert ran_otherwise <= 8
    assert 0 < fits <= results


def test_a_parameter_the_server_holds_unconditionally_never_makes_a_trial_repeat_another(
        server, tmp_path: Path) -> None:  # noqa: ANN001
    """The first completed trial took branch b, so the server's study holds ``k`` unconditionally and
    suggests it to branch-a trials too, where the objective does not ask for it: a suggestion that
    differs from an earlier one only there would run the same configuration. The sampler asks again
    instead, and the suggestion it set aside is told failed (interrupted: no fit, no failure learned)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="branches", storage=storage)
    study.add_trial(optuna.trial.create_trial(
        params={"kind": "b", "x": 2.0, "k": 3}, value=1.6, distributions={
            "kind": CategoricalDistribution(["a", "b"]), "x": FloatDistribution(-3.0, 3.0),
            "k": IntDistribution(0, 5)}))
    script = tmp_path / "worker.py"
    script.write_text(WORKER.replace('"shared"', '"branches"'))
    procs = [subprocess.Popen([sys.executable, str(script), storage, server.url, "40"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)

    trials = optuna.load_study(study_name="branches", storage=storage).trials
    assert len(trials) == 81
    ran = Counter(json.dumps(t.params, sort_keys=True) for t in trials)
    assert max(ran.values()) == 1, [k for k, n in ran.items() if n > 1]
    views, told = _server_trials(server.url, "branches")
    assert "condition" not in views[0]["space"]["k"]  # what makes the repeats possible
    set_aside = [t for t in told if t["state"] == "failed"
                 and "repeats the configuration of Optuna trial" in (t.get("user_attrs") or {}).get("fail_reason", "")]
    # how many repeats the server suggests depends on how the two processes interleave (none in some
    # PostgreSQL runs; 4 runs of one configuration on SQLite without the check): those it did are set aside
    assert all(t["params"]["kind"] == "a" for t in set_aside)
    # the suggestion an Optuna trial keeps (and ran) is the last one asked for it, never one set aside
    kept = {json.loads(t.system_attrs["calibo:remote"])["trial"] for t in trials if "calibo:remote" in t.system_attrs}
    assert kept and not kept & {t["id"] for t in set_aside}



def test_a_trial_the_server_did_not_suggest_is_added_though_it_lacks_a_parameter_held_unconditionally(
        server) -> None:  # noqa: ANN001
    """The server's study learned ``k`` from branch-b trials only, so it holds it unconditionally; a
    completed branch-a trial it never suggested (added to the Optuna study, or sampled before the
    server's study existed) lacks ``k``. It is still added, once, by the next process to meet the
    study: ``k`` takes a draw seeded by the trial, as an unused suggested parameter would."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    dists = {"kind": CategoricalDistribution(["a", "b"]), "x": FloatDistribution(-3.0, 3.0)}

    def objective(trial: optuna.Trial) -> float:
        kind = trial.suggest_categorical("kind", ["a", "b"])
        x = trial.suggest_float("x", -3.0, 3.0)
        return (x - 1.0) ** 2 + (trial.suggest_int("k", 0, 5) / 5 if kind == "b" else 0.0)

    study = optuna.create_study(study_name="held", sampler=CaliboSampler(url=server.url, n_startup_trials=2, seed=0))
    study.add_trial(optuna.trial.create_trial(params={"kind": "b", "x": 2.0, "k": 3}, value=1.6,
                                              distributions={**dists, "k": IntDistribution(0, 5)}))
    study.optimize(objective, n_trials=1)  # meets the server: its study holds k unconditionally
    study.add_trial(optuna.trial.create_trial(params={"kind": "a", "x": 0.5}, value=0.25, distributions=dists))
    again = optuna.load_study(study_name="held", storage=study._storage,
                              sampler=CaliboSampler(url=server.url, n_startup_trials=2, seed=0))
    again.optimize(objective, n_trials=1)  # a new process meets the study: adds what the server lacks

    views, told = _server_trials(server.url, "held")
    assert "condition" not in views[0]["space"]["k"]
    done = [t for t in told if t["state"] == "complete"]
    numbers = Counter(t["user_attrs"].get("optuna_trial") for t in done)
    assert numbers == Counter({t.number: 1 for t in again.trials if t.state.name == "COMPLETE"}), numbers
    added = next(t for t in done if t["user_attrs"].get("optuna_trial") == 2)
    assert added["params"]["kind"] == "a" and added["params"]["x"] == 0.5 and 0 <= added["params"]["k"] <= 5
    assert added["value"] == 0.25


def test_a_suggestion_that_would_take_a_completed_trials_path_with_its_values_is_a_repeat() -> None:
    """Before a process has learned that ``k`` belongs to branch b only, the server's suggestion
    {kind: a, x: 0.5, k: 3} looks new next to the completed {kind: a, x: 0.5}; but the objective,
    given kind a, never asks for k: it would run that trial again. Each of the completed trial's
    parameters having its value in the suggestion makes it a repeat; a running or failed trial's
    partial parameters do not, and a suggestion that changes one of them is no repeat."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from calibo.optuna._remote import RemoteBackend

    dists = {"kind": CategoricalDistribution(["a", "b"]), "x": FloatDistribution(-3.0, 3.0)}
    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(params={"kind": "a", "x": 0.5}, value=0.25, distributions=dists))
    study.add_trial(optuna.trial.create_trial(params={"kind": "a"}, state=optuna.trial.TrialState.FAIL,
                                              distributions={"kind": dists["kind"]}))
    running = study.ask()
    running.suggest_categorical("kind", ["a", "b"])  # partial: asked one parameter so far
    mine = study._storage.get_trial(study.ask()._trial_id)
    suggested = {"kind": "a", "x": 0.5, "k": 3}
    assert RemoteBackend._repeats(study, mine, suggested, suggested, {}) == 0
    other = {"kind": "a", "x": 0.75, "k": 3}
    assert RemoteBackend._repeats(study, mine, other, other, {}) is None  # the failed and running trials are partial

DEFINE_BY_RUN = textwrap.dedent('''
    import sys
    import optuna
    import calibo.optuna._sampler as local
    from calibo.optuna import CaliboSampler

    def refuse(*a, **k):
        raise AssertionError("the engine ran in a remote-mode worker")
    local.fit = local.select = refuse

    def objective(trial):
        model = trial.suggest_categorical("model", ["linear", "tree"])
        x = trial.suggest_float("x", -2.0, 2.0)
        loss = (x - 0.5) ** 2
        if model == "tree":  # revealed once a tree trial has run: the first trials are all linear (seed 2)
            depth = trial.suggest_int("depth", 1, 8)
            loss += abs(depth - 3) / 8
            if depth >= 5:  # deeper still: a parameter of the deep trees only
                loss += trial.suggest_float("shrink", 1e-3, 1.0, log=True)
        return loss

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = optuna.storages.RDBStorage(sys.argv[1], engine_kwargs={"connect_args": {"timeout": 60}})
    study = optuna.load_study(study_name="define-by-run", storage=storage,
                              sampler=CaliboSampler(url=sys.argv[2], n_startup_trials=4, seed=2))
    study.optimize(objective, n_trials=int(sys.argv[3]))
''')


def test_a_define_by_run_study_of_two_processes_is_one_server_study_named_after_it(server, tmp_path: Path) -> None:  # noqa: ANN001
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    # the processes' independent draws are seeded per trial: with seed 2, trials 0 to 5 (those drawn before
    # a trial completes) take the linear branch, so the server study is created without the tree's parameters
    optuna.create_study(study_name="define-by-run", storage=storage)
    script = tmp_path / "worker.py"
    script.write_text(DEFINE_BY_RUN)
    procs = [subprocess.Popen([sys.executable, str(script), storage, server.url, "15"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)

    trials = optuna.load_study(study_name="define-by-run", storage=storage).trials
    assert len(trials) == 30 and all(t.state.name == "COMPLETE" for t in trials)
    assert any("depth" in t.params for t in trials)
    # a deep tree (depth >= 5) reveals shrink: whether the surrogate proposes one in 30 trials is the model's
    # choice (it may differ with the BLAS kernel and the processes' interleaving), what follows from it is not
    assert any("shrink" in t.params for t in trials) == any(t.params.get("depth", 0) >= 5 for t in trials)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        listed = c.get("/v1/studies", params={"limit": 1000}).json()["studies"]
    views, told = _server_trials(server.url, "define-by-run")
    # exactly one server study for the Optuna study, with its name (none other made for it)
    assert len(views) == 1 and [s["id"] for s in listed if "define-by-run" in s["name"]] == [views[0]["id"]]
    view = views[0]
    sid = view["id"]
    assert view["user_attrs"].get("optuna_study") == "define-by-run"
    # every Optuna trial the server suggested was asked on that study
    remote = [t for t in trials if "calibo:remote" in t.system_attrs]
    assert remote and {json.loads(t.system_attrs["calibo:remote"])["study"] for t in remote} == {sid}
    # it holds every trial: each completed Optuna trial once, as complete (asked there, or added)
    numbers = Counter(t["user_attrs"].get("optuna_trial") for t in told if t["state"] == "complete")
    assert set(numbers) == {t.number for t in trials} and max(numbers.values()) == 1
    # its space grew as the objective revealed the tree's parameters: the trials told before keep theirs
    space = view["space"]
    assert {"model", "x", "depth"} <= set(space) and space["depth"].get("grown") is True, space
    from calibo.engine import SearchSpace

    grown = SearchSpace.from_dict(space)
    for t in told:
        assert grown.validate(t["params"]) == t["params"]


def test_a_server_study_of_that_name_is_grown_when_it_can_be_and_a_clash_is_a_clear_error(server) -> None:  # noqa: ANN001
    from conftest import unique

    name = unique("reuse")
    first = optuna.create_study(study_name=name, sampler=CaliboSampler(url=server.url, n_startup_trials=2, seed=0))
    first.optimize(lambda t: t.suggest_float("x", 0.0, 1.0) + t.suggest_int("n", 1, 3), n_trials=4)
    # another Optuna study of the same name (another storage) whose range is wider: the same server study, grown
    wider = optuna.create_study(study_name=name, sampler=CaliboSampler(url=server.url, n_startup_trials=2, seed=0))
    wider.optimize(lambda t: t.suggest_float("x", 0.0, 2.0) + t.suggest_int("n", 1, 3), n_trials=3)
    views, told = _server_trials(server.url, name)
    assert len(views) == 1 and views[0]["space"]["x"]["high"] == 2.0 and len(told) >= 6
    # one whose range is narrower cannot be that study's: a ValueError naming the parameter, and the way out
    narrow = optuna.create_study(study_name=name, sampler=CaliboSampler(url=server.url, n_startup_trials=2, seed=0))
    narrow.optimize(lambda t: t.suggest_float("x", 0.0, 0.5) + t.suggest_int("n", 1, 3), n_trials=1)
    with pytest.raises(ValueError, match="'x'.*study_name"):
        narrow.optimize(lambda t: t.suggest_float("x", 0.0, 0.5) + t.suggest_int("n", 1, 3), n_trials=1)
    # study_name= gives it a server study of its own
    own = optuna.create_study(study_name=name, sampler=CaliboSampler(url=server.url, n_startup_trials=2, seed=0,
                                                                     study_name=f"{name}-narrow"))
    own.optimize(lambda t: t.suggest_float("x", 0.0, 0.5) + t.suggest_int("n", 1, 3), n_trials=3)
    views, _ = _server_trials(server.url, f"{name}-narrow")
    assert len(views) == 1 and views[0]["space"]["x"]["high"] == 0.5


def test_enqueued_and_failed_trials_reach_the_server_as_they_ran(server, tmp_path: Path) -> None:  # noqa: ANN001
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    sampler = CaliboSampler(url=server.url, n_startup_trials=3, seed=0, study_name="enq")
    study = optuna.create_study(study_name="enq", storage=storage, sampler=sampler)

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        y = trial.suggest_int("y", 0, 9)
        if trial.number == 7:
            raise ValueError("boom")
        return x + y

    study.optimize(objective, n_trials=6)
    study.enqueue_trial({"x": 0.25, "y": 3})
    study.optimize(objective, n_trials=4, catch=(ValueError,))
    views, on = _server_trials(server.url, "enq")  # study_name= names the server's study
    assert len(views) == 1
    enqueued = [t for t in on if t["params"] == {"x": 0.25, "y": 3} and t["state"] == "complete"]
    assert len(enqueued) == 1 and enqueued[0]["value"] == pytest.approx(3.25)
    assert any(t["state"] == "failed" and t["user_attrs"].get("optuna_trial") == 7 for t in on)
    # a new sampler (a restarted process) continues the same server study
    again = optuna.load_study(study_name="enq", storage=storage,
                              sampler=CaliboSampler(url=server.url, n_startup_trials=3, seed=0, study_name="enq"))
    again.optimize(objective, n_trials=3)
    views_after, after = _server_trials(server.url, "enq")
    assert [v["id"] for v in views_after] == [views[0]["id"]]
    assert len(after) == len(on) + 3


def test_a_server_that_refuses_the_token_is_a_clear_error(tmp_path: Path) -> None:
    from calibo import Client
    from calibo.errors import CaliboError

    sampler = CaliboSampler(url="http://127.0.0.1:9", token="t", n_startup_trials=2)
    sampler._remote.client = Client("http://127.0.0.1:9", "t", retry_deadline=0.5)  # nothing listens: fail fast
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    with pytest.raises((CaliboError, httpx.HTTPError)):
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)


def test_a_wrong_token_is_a_clear_error_and_the_right_one_works(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import LiveServer

    from calibo.errors import Unauthorized

    srv = LiveServer(f"sqlite:///{tmp_path / 'calibo.db'}", api_tokens="good").start()
    try:
        def objective(trial: Any) -> float:
            return trial.suggest_float("x", 0, 1)

        wrong = optuna.create_study(sampler=CaliboSampler(url=srv.url, token="bad", n_startup_trials=2))
        wrong.optimize(objective, n_trials=1)  # nothing to model yet: no server call
        with pytest.raises(Unauthorized) as err:
            wrong.optimize(objective, n_trials=1)
        assert err.value.status == 401
        monkeypatch.setenv("CALIBO_TOKEN", "good")  # the token from the environment
        right = optuna.create_study(sampler=CaliboSampler(url=srv.url, n_startup_trials=2, study_name="tok"))
        right.optimize(objective, n_trials=3)
        assert all("calibo:remote" in t.system_attrs for t in right.trials[1:])
    finally:
        srv.stop()


def test_a_study_name_past_the_servers_bound_is_cut_with_a_hash_of_the_whole(live_server) -> None:  # noqa: ANN001
    """docs/how-to/optuna.md: a name over 255 characters is cut to 200 and suffixed with a hash of the
    whole; two such names sharing their first 200 characters are two server studies. (The cut is the
    sampler's: one backend tells it.)"""
    server = live_server
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from calibo import Client

    stem = "s" * 250
    names = []
    for tail in ("-a", "-b"):
        given = f"{stem}{tail}-{len(names)}-" + "x" * 10  # 265 characters
        study = optuna.create_study(sampler=CaliboSampler(url=server.url, study_name=given, n_startup_trials=1,
                                                          seed=0))
        study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=3)
        names.append(given)
    cut = [f"{n[:200]}-{hashlib.sha1(n.encode()).hexdigest()[:10]}" for n in names]  # as the how-to says
    assert cut[0] != cut[1] and cut[0][:200] == cut[1][:200]
    with Client(server.url) as client:
        studies = [client.load_study(n, by="name").view for n in cut]
    assert [s["trials"]["complete"] for s in studies] == [3, 3], studies
    assert studies[0]["id"] != studies[1]["id"]
