"""fit's acquisition local search (engine.candidates.local_search): neighbourhoods and descent."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from calibo.engine import EngineConfig, SearchSpace, StudyState, fit, select
from calibo.engine.candidates import local_search, neighbours

SPACE = SearchSpace.from_dict({
    "x": {"type": "float", "low": 0.0, "high": 1.0},
    "n": {"type": "int", "low": 1, "high": 64, "log": True},
    "k": {"type": "int", "low": 0, "high": 9},
    "c": {"type": "categorical", "choices": ["a", "b", "c", "d"]},
    "o": {"type": "ordinal", "choices": [1, 2, 4, 8]},
})


def test_neighbours_move_one_coordinate_to_valid_adjacent_values() -> None:
    start = SPACE.to_unit([{"x": 0.5, "n": 8, "k": 0, "c": "b", "o": 4}])[0]
    rows, owner = neighbours(SPACE, start, 0.1)
    assert set(owner.tolist()) == {0}
    params = SPACE.from_unit(rows)
    assert np.all((rows != start).sum(axis=1) == 1)  # one coordinate each
    moved = {}
    for p in params:
        for key in p:
            if p[key] != {"x": 0.5, "n": 8, "k": 0, "c": "b", "o": 4}[key]:
                moved.setdefault(key, set()).add(p[key])
    assert len(moved["x"]) == 2 and all(abs(abs(v - 0.5) - 0.1) < 1e-6 for v in moved["x"])
    assert moved["n"] == {7, 9} and moved["k"] == {1}  # integers step to the adjacent value; 0 is the low end
    assert moved["c"] == {"a", "c", "d"} and moved["o"] == {2, 8}


def test_a_float_step_past_a_bound_stops_on_it() -> None:
    def x_moves(x: float) -> list[float]:
        start = SPACE.to_unit([{"x": x, "n": 8, "k": 5, "c": "b", "o": 4}])[0]
        rows, _ = neighbours(SPACE, start, 0.1)
        return sorted(p["x"] for p in SPACE.from_unit(rows[rows[:, 0] != start[0]]))

    low, high = x_moves(0.96)
    assert abs(low - 0.86) < 1e-6 and high == 1.0  # exactly the bound, not a point short of it
    (away,) = x_moves(1.0)  # on the bound: only the move away from it
    assert abs(away - 0.9) < 1e-6
    assert np.allclose(x_moves(0.5), [0.4, 0.6])


def test_descent_reaches_an_optimum_on_a_face_of_the_box() -> None:
    """Tuning optima often lie on a bound (all features: a fraction of 1.0). A descent that can only
    move inside the box stops just short of the face, at a different configuration."""
    target = {"x": 1.0, "n": 16, "k": 0, "c": "a", "o": 8}
    goal = SPACE.to_unit([target])[0]

    def score(rows: np.ndarray) -> np.ndarray:  # a linear slope down to the corner
        return np.abs(rows - goal).sum(axis=1)

    starts = SPACE.sample(4, 1)
    for p in SPACE.from_unit(local_search(SPACE, score, starts, max_iter=60)):
        assert p == target


def test_descent_reaches_the_minimum_of_a_mixed_objective() -> None:
    target = {"x": 0.3137, "n": 23, "k": 7, "c": "d", "o": 2}
    goal = SPACE.to_unit([target])[0]

    def score(rows: np.ndarray) -> np.ndarray:  # a separable bowl around the target
        return ((rows - goal) ** 2).sum(axis=1)

    starts = SPACE.sample(4, 0)
    ends = SPACE.from_unit(local_search(SPACE, score, starts, max_iter=60))
    for p in ends:
        assert abs(p["x"] - target["x"]) < 0.003
        assert (p["n"], p["k"], p["c"], p["o"]) == (target["n"], target["k"], target["c"], target["o"])


def test_fit_adds_the_searched_points_and_select_can_pick_them(monkeypatch: pytest.MonkeyPatch) -> None:
    space = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(4)})

    def f(p: dict) -> float:  # a narrow valley the drawn candidates rarely land in
        return float(sum((p[f"x{i}"] - 0.2 - 0.15 * i) ** 2 for i in range(4)) ** 0.5)

    obs = [(p, f(p)) for p in space.from_unit(space.sample(30, 5))]
    cfg = EngineConfig(n_candidates=300)
    snap = fit(obs, space, cfg, seed=0)
    fitting = importlib.import_module("calibo.engine.fit")  # the module (the package's ``fit`` is the function)
    monkeypatch.setattr(fitting, "_searched", lambda space, *a, **kw: np.empty((0, space.dim)))
    plain = fit(obs, space, cfg, seed=0)  # the drawn candidates alone
    extra = snap.candidates.shape[0] - plain.candidates.shape[0]
    assert 1 <= extra <= fitting.LOCAL_SEARCH + 2
    np.testing.assert_array_equal(snap.candidates[: plain.candidates.shape[0]], plain.candidates)
    (pick,) = select(snap, StudyState.initial(cfg, 0), space, cfg, asked=30)
    (drawn,) = select(plain, StudyState.initial(cfg, 0), space, cfg, asked=30)
    # the searched candidates hold the acquisition's best: the pick is one of them, and it is better
    assert any(space.key(pick.params) == k for k in space.keys(snap.candidates[plain.candidates.shape[0]:]))
    assert pick.prediction.score < drawn.prediction.score
    assert not set(space.keys(snap.candidates)) & set(space.keys(snap.observed))


def test_an_inactive_float_does_not_move() -> None:
    """A conditional float its parent switches off sits at INACTIVE, outside [0, 1]: a step towards
    the box must not count as a move of it (it would snap back to the same configuration)."""
    space = SearchSpace.from_dict({
        "kernel": {"type": "categorical", "choices": ["linear", "rbf"]},
        "gamma": {"type": "float", "low": 0.0, "high": 1.0, "condition": {"parent": "kernel", "values": ["rbf"]}},
        "C": {"type": "float", "low": 0.0, "high": 1.0},
    })
    start = space.to_unit([{"kernel": "linear", "C": 0.5}])[0]
    rows, _ = neighbours(space, start, 0.1)
    assert not any((row == start).all() for row in rows)  # every neighbour is another configuration
    params = space.from_unit(rows)
    assert sorted(p["C"] for p in params if p["kernel"] == "linear") == pytest.approx([0.4, 0.6])


def test_an_inactive_coordinate_of_any_type_does_not_move() -> None:
    """Ints, ordinals and categoricals switched off by their parent stay put too: snapped, a move of
    one is its row again, scored for nothing."""
    space = SearchSpace.from_dict({
        "kernel": {"type": "categorical", "choices": ["linear", "poly"]},
        "degree": {"type": "int", "low": 2, "high": 5, "condition": {"parent": "kernel", "values": ["poly"]}},
        "order": {"type": "ordinal", "choices": [1, 2, 4], "condition": {"parent": "kernel", "values": ["poly"]}},
        "basis": {"type": "categorical", "choices": ["a", "b", "c"],
                  "condition": {"parent": "kernel", "values": ["poly"]}},
        "C": {"type": "float", "low": 0.0, "high": 1.0},
    })
    starts = space.to_unit([{"kernel": "linear", "C": 0.5}, {"kernel": "poly", "degree": 3, "order": 2,
                                                            "basis": "b", "C": 0.5}])
    rows, owner = neighbours(space, starts, 0.1)
    assert not any((row == starts[o]).all() for row, o in zip(rows, owner, strict=True))
    on = [p for p in space.from_unit(rows[owner == 1]) if p["kernel"] == "poly"]
    moved = {k for p in on for k in ("degree", "order", "basis") if p[k] != {"degree": 3, "order": 2, "basis": "b"}[k]}
    assert moved == {"degree", "order", "basis"}  # switched on, they move as before
