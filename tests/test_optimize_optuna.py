"""``Study.optimize``'s Optuna arguments, side by side with Optuna on the same objective.

Each test runs one objective, written for Optuna (``trial.suggest_float(...)``), through
``optuna.create_study().optimize(...)`` and through a calibo study on a live server, and
checks the same observable behaviour: how many trials, their states, which exception comes
out, which callbacks were called with what, what the progress bar writes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import optuna
import pytest
from conftest import LiveServer, unique
from optuna.trial import TrialState

from calibo import AsyncClient, Client, Study, TrialRecord

optuna.logging.set_verbosity(optuna.logging.ERROR)

SPACE = {"x": {"type": "float", "low": -5.0, "high": 10.0}, "y": {"type": "float", "low": 0.0, "high": 15.0}}
QUICK = {"n_warmup": 100}  # quasi-random asks: no fit to wait for
STATE = {TrialState.COMPLETE: "complete", TrialState.FAIL: "failed", TrialState.PRUNED: "pruned",
         TrialState.RUNNING: "running"}


def quadratic(trial: Any) -> float:
    x = trial.suggest_float("x", -5.0, 10.0)
    y = trial.suggest_float("y", 0.0, 15.0)
    return (x - 1.0) ** 2 + (y - 2.0) ** 2


def sleeping(seconds: float) -> Callable[[Any], float]:
    def objective(trial: Any) -> float:
        time.sleep(seconds)
        return quadratic(trial)

    return objective


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[Client]:
    with Client(live_server.url) as c:
        yield c


def ours(client: Client, **kw: Any) -> Study:
    return client.create_study(unique("optuna-args"), SPACE, seed=0, settings=QUICK, **kw)


def theirs() -> optuna.Study:
    return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))


def their_states(study: optuna.Study) -> list[str]:
    return [STATE[t.state] for t in study.trials]


def our_states(study: Study) -> list[str]:
    return [t.state for t in study.trials()]


def timed(run: Callable[[], Any]) -> float:
    start = time.monotonic()
    run()
    return time.monotonic() - start


# ----------------------------------------------------------------------------- n_trials, timeout
def test_timeout_alone_runs_until_it_passes_and_lets_the_running_trial_finish(client: Client) -> None:
    objective = sleeping(0.15)
    mine, other = ours(client), theirs()
    elapsed = {
        "optuna": timed(lambda: other.optimize(objective, n_trials=None, timeout=1.0)),
        "calibo": timed(lambda: mine.optimize(objective, n_trials=None, timeout=1.0)),
    }
    counts = {"optuna": len(other.trials), "calibo": len(mine.trials())}
    for name in ("optuna", "calibo"):
        # trials start until 1 s has passed (the run lasts at least that), and none after: trial k
        # starts 0.15 k s in at the earliest, so at most 7 start before 1 s, however slow the machine
        # (a busy one starts fewer); the last one started runs to its end (every trial completes)
        assert elapsed[name] >= 1.0, (name, elapsed)
        assert 1 <= counts[name] <= 7, (name, counts)
    assert set(their_states(other)) == set(our_states(mine)) == {"complete"}


def test_n_trials_and_timeout_whichever_comes_first(client: Client) -> None:
    objective = sleeping(0.1)
    mine, other = ours(client), theirs()
    other.optimize(objective, n_trials=3, timeout=30)
    mine.optimize(objective, n_trials=3, timeout=30)
    assert their_states(other) == our_states(mine) == ["complete"] * 3  # n_trials first

    mine, other = ours(client), theirs()
    elapsed = {"optuna": timed(lambda: other.optimize(objective, n_trials=50, timeout=0.5)),
               "calibo": timed(lambda: mine.optimize(objective, n_trials=50, timeout=0.5))}
    for name, count in (("optuna", len(other.trials)), ("calibo", len(mine.trials()))):
        # the timeout first: trial k starts 0.1 k s in at the earliest, so at most 5 of the 50 start
        # before 0.5 s (fewer on a busy machine), and the run lasts until the timeout has passed
        assert 1 <= count <= 5, (name, count)
        assert elapsed[name] >= 0.5, (name, elapsed)


def test_n_trials_counts_per_call(client: Client) -> None:
    mine, other = ours(client), theirs()
    for _ in range(2):
        other.optimize(quadratic, n_trials=2)
        mine.optimize(quadratic, n_trials=2)
    assert len(other.trials) == len(mine.trials()) == 4


def test_neither_limit_runs_until_stopped(client: Client) -> None:
    def objective(trial: Any) -> float:
        if trial.number == 6:
            trial.study.stop()
        return quadratic(trial)

    mine, other = ours(client), theirs()
    other.optimize(objective)  # n_trials=None, timeout=None
    mine.optimize(objective)
    assert their_states(other) == our_states(mine) == ["complete"] * 7


# ----------------------------------------------------------------------------- callbacks, stop
def failing_and_pruned(trial: Any) -> float:
    value = quadratic(trial)
    if trial.number == 1:
        raise ValueError("diverged")
    if trial.number == 2:
        raise optuna.TrialPruned()
    return value


def test_callbacks_are_called_in_order_with_the_study_and_the_finished_trial(client: Client) -> None:
    def record(into: list, name: str) -> Callable[[Any, Any], None]:
        def callback(study: Any, trial: Any) -> None:
            state = trial.state if isinstance(trial, TrialRecord) else STATE[trial.state]
            into.append((name, study, trial.number, state))

        return callback

    seen: dict[str, list] = {"optuna": [], "calibo": []}
    mine, other = ours(client), theirs()
    other.optimize(failing_and_pruned, n_trials=4, catch=(ValueError,),
                   callbacks=[record(seen["optuna"], "a"), record(seen["optuna"], "b")])
    mine.optimize(failing_and_pruned, n_trials=4, catch=(ValueError,),
                  callbacks=[record(seen["calibo"], "a"), record(seen["calibo"], "b")])
    expected = [(name, number, state) for number, state in enumerate(["complete", "failed", "pruned", "complete"])
                for name in "ab"]
    for name, study in (("optuna", other), ("calibo", mine)):
        assert [(n, number, state) for n, _, number, state in seen[name]] == expected, name
        assert all(s is study for _, s, _, _ in seen[name])  # the study optimize was called on
    # the callbacks saw the trials as stored: a complete trial with its value
    first = mine.trials()[0]
    assert first.value == pytest.approx((first.params["x"] - 1.0) ** 2 + (first.params["y"] - 2.0) ** 2)


def test_the_single_callback_form_still_works_beside_the_list(client: Client) -> None:
    order: list[str] = []
    mine = ours(client)
    mine.optimize(quadratic, n_trials=2, callback=lambda t: order.append(f"one:{t.number}"),
                  callbacks=[lambda s, t: order.append(f"list:{t.number}")])
    assert order == ["one:0", "list:0", "one:1", "list:1"]
    views: list[dict] = []
    client.optimize(mine.id, quadratic, n_trials=1, callback=views.append)
    assert views[0]["state"] == "complete" and views[0]["number"] == 2


def test_stop_from_a_callback_or_the_objective_as_optuna(client: Client) -> None:
    def stop_at_two(study: Any, trial: Any) -> None:
        if trial.number == 2:
            study.stop()

    def objective(trial: Any) -> float:  # Optuna's docstring example for Study.stop
        if trial.number == 4:
            trial.study.stop()
        return quadratic(trial)

    mine, other = ours(client), theirs()
    other.optimize(quadratic, n_trials=10, callbacks=[stop_at_two])
    mine.optimize(quadratic, n_trials=10, callbacks=[stop_at_two])
    assert len(other.trials) == len(mine.trials()) == 3

    def stop_after(count: int) -> Callable[[Any, Any], None]:
        seen: list[int] = []

        def callback(study: Any, trial: Any) -> None:
            seen.append(trial.number)
            if len(seen) == count:
                study.stop()

        return callback

    mine, other = ours(client), theirs()
    other.optimize(quadratic, n_trials=20, n_jobs=2, callbacks=[stop_after(3)])
    mine.optimize(quadratic, n_trials=20, n_jobs=2, callbacks=[stop_after(3)])
    # the trial the other job runs when stop() is called finishes and is told
    assert 3 <= len(other.trials) <= 4 and 3 <= len(mine.trials()) <= 4
    assert "running" not in our_states(mine)
    mine, other = ours(client), theirs()
    other.optimize(objective, n_trials=10)
    mine.optimize(objective, n_trials=10)
    assert len(other.trials) == len(mine.trials()) == 5
    with pytest.raises(RuntimeError):
        other.stop()
    with pytest.raises(RuntimeError, match="running optimize"):
        mine.stop()


def test_a_callback_that_raises_stops_the_run(client: Client) -> None:
    def callback(study: Any, trial: Any) -> None:
        if trial.number == 1:
            raise LookupError("enough")

    mine, other = ours(client), theirs()
    with pytest.raises(LookupError, match="enough"):
        other.optimize(quadratic, n_trials=10, callbacks=[callback])
    with pytest.raises(LookupError, match="enough"):
        mine.optimize(quadratic, n_trials=10, callbacks=[callback])
    assert their_states(other) == our_states(mine) == ["complete", "complete"]


# ----------------------------------------------------------------------------- catch
def two_errors(trial: Any) -> float:
    value = quadratic(trial)
    if trial.number == 1:
        raise ValueError("diverged")
    if trial.number == 3:
        raise KeyError("broken")
    return value


@pytest.mark.parametrize("catch", [ValueError, (ValueError,)], ids=["single-type", "tuple"])
def test_catch_a_type_goes_on_and_another_error_is_told_failed_and_raised(client: Client, catch: Any) -> None:
    mine, other = ours(client), theirs()
    with pytest.raises(KeyError, match="broken"):
        other.optimize(two_errors, n_trials=6, catch=catch)
    with pytest.raises(KeyError, match="broken"):
        mine.optimize(two_errors, n_trials=6, catch=catch)
    assert their_states(other) == our_states(mine) == ["complete", "failed", "complete", "failed"]
    reasons = [t.user_attrs.get("fail_reason") for t in mine.trials(state="failed")]
    assert reasons == ["ValueError: diverged", "KeyError: 'broken'"]


def test_catch_a_tuple_of_both_runs_every_trial(client: Client) -> None:
    mine, other = ours(client), theirs()
    other.optimize(two_errors, n_trials=6, catch=(ValueError, KeyError))
    mine.optimize(two_errors, n_trials=6, catch=(ValueError, KeyError))
    expected = ["complete", "failed", "complete", "failed", "complete", "complete"]
    assert their_states(other) == our_states(mine) == expected


def test_an_uncaught_error_with_several_jobs_leaves_nothing_running(client: Client) -> None:
    def objective(trial: Any) -> float:
        time.sleep(0.05)
        if trial.number == 2:
            raise KeyError("broken")
        return quadratic(trial)

    mine, other = ours(client), theirs()
    with pytest.raises(KeyError):
        other.optimize(objective, n_trials=20, n_jobs=2)
    with pytest.raises(KeyError):
        mine.optimize(objective, n_trials=20, n_jobs=2)
    for states in (their_states(other), our_states(mine)):
        assert "running" not in states and states.count("failed") == 1 and len(states) < 20


# ----------------------------------------------------------------------------- progress bar
def test_progress_bar_shows_the_best_value_on_stderr(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    def objective(trial: Any) -> float:
        quadratic(trial)
        return 1.0 + abs(trial.number - 1)  # the best: trial 1, value 1

    mine, other = ours(client), theirs()
    other.optimize(objective, n_trials=4, show_progress_bar=True)
    their_bar = capsys.readouterr().err
    mine.optimize(objective, n_trials=4, show_progress_bar=True)
    our_bar = capsys.readouterr().err
    for bar in (their_bar, our_bar):
        assert "Best trial: 1. Best value: 1" in bar and "4/4" in bar
    assert "trials/s" in our_bar
    # the study's best so far, from before this call
    other.optimize(lambda t: quadratic(t) + 50.0, n_trials=1, show_progress_bar=True)
    their_bar = capsys.readouterr().err
    mine.optimize(lambda t: quadratic(t) + 50.0, n_trials=1, show_progress_bar=True)
    our_bar = capsys.readouterr().err
    for bar in (their_bar, our_bar):
        assert "Best trial: 1. Best value: 1" in bar and "1/1" in bar

    # a timeout alone: a time bar up to the timeout, as Optuna's
    theirs().optimize(sleeping(0.1), timeout=1.0, show_progress_bar=True)
    their_bar = capsys.readouterr().err
    ours(client).optimize(sleeping(0.1), timeout=1.0, show_progress_bar=True)
    our_bar = capsys.readouterr().err
    for bar in (their_bar, our_bar):
        assert "/00:01" in bar and "Best trial: " in bar
    assert "100%" in our_bar  # closed at the timeout


def test_progress_bar_of_a_maximized_study_keeps_the_highest(
        client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    def objective(trial: Any) -> float:
        quadratic(trial)
        return [3.0, 7.5, 2.0][trial.number]

    optuna.create_study(direction="maximize").optimize(objective, n_trials=3, show_progress_bar=True)
    their_bar = capsys.readouterr().err
    ours(client, direction="maximize").optimize(objective, n_trials=3, show_progress_bar=True)
    our_bar = capsys.readouterr().err
    for bar in (their_bar, our_bar):
        assert "Best trial: 1. Best value: 7.5" in bar


def test_progress_bar_is_closed_when_the_run_raises(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    from tqdm.auto import tqdm

    def objective(trial: Any) -> float:
        if trial.number == 1:
            raise KeyError("broken")
        return quadratic(trial)

    mine, other = ours(client), theirs()
    with pytest.raises(KeyError):
        other.optimize(objective, n_trials=3, show_progress_bar=True)
    their_bar = capsys.readouterr().err
    with pytest.raises(KeyError):
        mine.optimize(objective, n_trials=3, show_progress_bar=True)
    our_bar = capsys.readouterr().err
    assert not tqdm._instances  # both bars closed
    for bar in (their_bar, our_bar):  # the last line drawn: one trial done, then the error
        assert bar.endswith("\n") and "1/3" in bar.rsplit("\r", 1)[-1]


def test_progress_bar_without_tqdm_says_what_to_install(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import tqdm.auto -> ImportError
    mine = ours(client)
    with pytest.raises(ImportError, match=r"pip install 'calibo\[progress\]'"):
        mine.optimize(quadratic, n_trials=2, show_progress_bar=True)
    assert mine.trials() == []  # nothing asked
    assert len(mine.optimize(quadratic, n_trials=1)) == 1  # no bar asked: no tqdm needed


# ----------------------------------------------------------------------------- n_jobs
def peak_of(seconds: float) -> tuple[Callable[[Any], float], Callable[[], int]]:
    lock = threading.Lock()
    now = [0, 0]  # running, peak

    def objective(trial: Any) -> float:
        with lock:
            now[0] += 1
            now[1] = max(now)
        time.sleep(seconds)
        with lock:
            now[0] -= 1
        return quadratic(trial)

    return objective, lambda: now[1]


@pytest.mark.parametrize("n_jobs", [2, -1])
def test_n_jobs_runs_that_many_trials_at_once(client: Client, n_jobs: int) -> None:
    jobs = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
    mine, other = ours(client), theirs()
    their_objective, their_peak = peak_of(0.3)
    other.optimize(their_objective, n_trials=4, n_jobs=n_jobs)
    our_objective, our_peak = peak_of(0.3)
    mine.optimize(our_objective, n_trials=4, n_jobs=n_jobs)
    assert their_states(other) == our_states(mine) == ["complete"] * 4
    assert their_peak() == our_peak() == min(jobs, 4)


def test_bad_arguments_are_clear_errors_before_any_trial(client: Client) -> None:
    mine = ours(client)
    for kw, error, words in [
        ({"n_trials": -1}, ValueError, "n_trials"),
        ({"n_trials": 2.5}, TypeError, "n_trials"),
        ({"n_trials": 1, "timeout": 0}, ValueError, "timeout"),
        ({"n_trials": 1, "timeout": -3.0}, ValueError, "timeout"),
        ({"n_trials": 1, "n_jobs": 0}, ValueError, "n_jobs"),
        ({"n_trials": 1, "n_jobs": -2}, ValueError, "n_jobs"),
        ({"n_trials": 1, "n_workers": 2, "n_jobs": 3}, ValueError, "not both"),
        ({"n_trials": 1, "catch": "ValueError"}, TypeError, "catch"),
        ({"n_trials": 1, "callbacks": lambda s, t: None}, TypeError, "callbacks"),
    ]:
        with pytest.raises(error, match=words):
            mine.optimize(quadratic, **kw)
    assert mine.trials() == []


# ----------------------------------------------------------------------------- async
def test_async_study_timeout_callbacks_stop_and_progress(live_server: LiveServer,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[tuple[int, str]] = []

    async def objective(trial: Any) -> float:
        await asyncio.sleep(0.05)
        return quadratic(trial)

    async def main() -> None:
        async with AsyncClient(live_server.url) as c:
            study = await c.create_study(unique("optuna-async"), SPACE, seed=0, settings=QUICK)

            def callback(s: Any, trial: TrialRecord) -> None:
                assert s is study
                seen.append((trial.number, trial.state))
                if trial.number == 3:
                    s.stop()

            done = await study.optimize(objective, callbacks=[callback], show_progress_bar=True)
            assert [t.number for t in done] == [0, 1, 2, 3]
            start = time.monotonic()
            more = await study.optimize(objective, timeout=0.5, n_jobs=2)
            # it stops starting trials at 0.5 s and waits for those in flight (an ask, a fit, 0.05 s of
            # objective each): a bound on a hang, not on speed, which a loaded machine stretches
            assert 0.5 <= time.monotonic() - start < 0.5 + 10.0
            assert len(more) >= 4 and {t.state for t in more} == {"complete"}
            with pytest.raises(RuntimeError):
                study.stop()

    asyncio.run(main())
    assert seen == [(n, "complete") for n in range(4)]
    assert "4 trials" in capsys.readouterr().err  # neither limit: a counter
