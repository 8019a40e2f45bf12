"""A study's space grows: new parameters (conditional or not), new choices, wider ranges.

The engine (``SearchSpace.grow``) decides what growth is and encodes a trial told before a parameter
existed with that parameter inactive; the service stores a grown space under the study's lock
(``PATCH /v1/studies/{study}/space``), refits on it and never serves a snapshot of the old space;
the client has ``grow_space``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from calibo.engine import EngineConfig, ParamError, SearchSpace, SpaceError, fit, select
from calibo.engine.space import INACTIVE
from calibo.engine.state import StudyState

BASE = {"x": {"type": "float", "low": 0.0, "high": 1.0},
        "kind": {"type": "categorical", "choices": ["a", "b"]}}
# a new numeric parameter, a new choice of "kind", and a new int active only under that new choice
GROWTH = {"y": {"type": "float", "low": -1.0, "high": 1.0},
          "kind": {"type": "categorical", "choices": ["a", "b", "c"]},
          "depth": {"type": "int", "low": 1, "high": 4, "condition": {"parent": "kind", "values": ["c"]}}}


def objective(p: dict[str, Any]) -> float:
    return (p["x"] - 0.3) ** 2 + 0.5 * p.get("y", 0.0) ** 2 + {"a": 0.0, "b": 0.4, "c": 0.1}[p["kind"]] \
        + 0.05 * p.get("depth", 0)


# ------------------------------------------------------------------ engine
def test_growth_keeps_the_existing_parameters_and_marks_the_new_ones_grown() -> None:
    grown = SearchSpace.from_dict(BASE).grow({**GROWTH, "x": {"type": "float", "low": -1.0, "high": 1.0}})
    d = grown.to_dict()
    assert list(d) == ["x", "kind", "y", "depth"]  # existing columns first, in place; new ones appended
    assert d["x"] == {"type": "float", "low": -1.0, "high": 1.0, "log": False}  # widened, not grown
    assert d["kind"]["choices"] == ["a", "b", "c"] and "grown" not in d["kind"]
    assert d["y"]["grown"] is True and d["depth"]["grown"] is True
    assert d["depth"]["condition"] == {"parent": "kind", "values": ["c"]}
    # a categorical's new choices go after the existing ones, whatever order they are given in
    again = SearchSpace.from_dict(BASE).grow({"kind": {"type": "categorical", "choices": ["c", "b", "a"]}})
    assert again.to_dict()["kind"]["choices"] == ["a", "b", "c"]
    # an ordinal's new choices go where they are given, the existing ones keeping their order
    ordinal = SearchSpace.from_dict({"w": {"type": "ordinal", "choices": [16, 64]}})
    assert ordinal.grow({"w": {"type": "ordinal", "choices": [16, 32, 64]}}).to_dict()["w"]["choices"] == [16, 32, 64]
    # a condition met under more parent values: the parameter is grown (trials under them lack it)
    cond = SearchSpace.from_dict({**BASE, "z": {"type": "float", "low": 0, "high": 1,
                                                "condition": {"parent": "kind", "values": ["a"]}}})
    wider = cond.grow({"z": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "kind", "values": ["a", "b"]}}})
    assert wider.to_dict()["z"]["condition"]["values"] == ["a", "b"] and wider.to_dict()["z"]["grown"] is True
    # the same definition again changes nothing
    assert grown.grow(GROWTH) == grown and SearchSpace.from_dict(BASE).grow(BASE) == SearchSpace.from_dict(BASE)


COND = {**BASE, "z": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "kind", "values": ["a"]}},
        "w": {"type": "ordinal", "choices": [16, 32, 64]}, "lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True}}


@pytest.mark.parametrize(("change", "field"), [
    ({"x": None}, "space.x"),  # removing a parameter
    ({"x": {"type": "int", "low": 0, "high": 1}}, "space.x.type"),
    ({"x": {"type": "float", "low": 0.1, "high": 1.0}}, "space.x.low"),  # narrowing
    ({"x": {"type": "float", "low": 0.0, "high": 0.9}}, "space.x.high"),
    ({"lr": {"type": "float", "low": 1e-3, "high": 1.0}}, "space.lr.log"),
    ({"kind": {"type": "categorical", "choices": ["a", "c"]}}, "space.kind.choices"),  # removing a choice
    ({"kind": {"type": "ordinal", "choices": ["a", "b"]}}, "space.kind.type"),
    ({"w": {"type": "ordinal", "choices": [32, 16, 64]}}, "space.w.choices"),  # reordering an ordinal
    ({"x": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "kind", "values": ["a"]}}},
     "space.x.condition"),  # making a parameter conditional
    ({"z": {"type": "float", "low": 0, "high": 1}}, "space.z.condition"),  # dropping a condition
    ({"z": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "w", "values": [16]}}},
     "space.z.condition.parent"),
    ({"z": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "kind", "values": ["b"]}}},
     "space.z.condition.values"),
    ({"new": {"type": "float", "low": 1, "high": 0}}, "space.new.low"),  # a new parameter is checked as at create
    ({"new": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "nope", "values": [1]}}},
     "space.new.condition.parent"),
    ({"nope": None}, "space.nope"),
    ({}, "space"),
])
def test_anything_but_growth_is_refused_naming_the_field(change: dict, field: str) -> None:
    with pytest.raises(SpaceError) as info:
        SearchSpace.from_dict(COND).grow(change)
    assert info.value.field == field, (info.value.field, info.value.message)


def test_the_bounds_hold_after_growth() -> None:
    space = SearchSpace.from_dict({f"p{i}": {"type": "float", "low": 0, "high": 1} for i in range(128)})
    with pytest.raises(SpaceError, match="at most 128 parameters"):
        space.grow({"one_more": {"type": "float", "low": 0, "high": 1}})


def test_a_configuration_may_lack_a_grown_parameter_and_not_an_original_one() -> None:
    space = SearchSpace.from_dict(BASE).grow(GROWTH)
    assert space.validate({"x": 0.5, "kind": "a"}) == {"x": 0.5, "kind": "a"}  # told before the growth
    assert space.validate({"x": 0.5, "kind": "c", "y": 0.0, "depth": 2})["depth"] == 2
    with pytest.raises(ParamError) as info:
        space.validate({"kind": "a", "y": 0.0})
    assert info.value.field == "x"
    with pytest.raises(ParamError, match="inactive") as info:
        space.validate({"x": 0.5, "kind": "a", "y": 0.0, "depth": 2})  # depth is active only under "c"
    assert info.value.field == "depth"
    # a grown parameter absent is inactive, as are the parameters conditional on it
    tree = SearchSpace.from_dict(BASE).grow({
        "model": {"type": "categorical", "choices": ["lin", "tree"]},
        "leaves": {"type": "int", "low": 2, "high": 64, "condition": {"parent": "model", "values": ["tree"]}}})
    assert tree.validate({"x": 0.1, "kind": "b"}) == {"x": 0.1, "kind": "b"}
    with pytest.raises(ParamError, match="inactive"):
        tree.validate({"x": 0.1, "kind": "b", "leaves": 8})


def test_a_trial_told_before_the_growth_is_encoded_with_the_new_parameter_inactive() -> None:
    space = SearchSpace.from_dict(BASE).grow(GROWTH)
    old, new = {"x": 0.5, "kind": "a"}, {"x": 0.5, "kind": "a", "y": 0.0}
    u = space.to_unit([old, new])
    j = space.names.index("y")
    assert u[0, j] == INACTIVE and u[1, j] == 0.5
    assert space.key(old) != space.key(new)  # not the same configuration
    f = space.features(u)
    sl = space._feature_slices[j]
    assert f[0, sl].tolist() == [0.5, 0.0] and f[1, sl].tolist() == [0.5, 1.0]  # coordinate, activity indicator
    assert space.from_unit(u) == [old, new]
    # what the engine makes from an old trial (a mutation) holds the new parameter: asks always do
    kids = space.mutate(u[:1], 40, np.random.default_rng(0))
    assert (kids[:, j] >= 0).all()
    for config in space.from_unit(kids):
        assert "y" in config and ("depth" in config) == (config["kind"] == "c")


def test_a_grown_space_fits_and_selects_with_the_old_trials_holding_the_new_parameter_inactive() -> None:
    rng = np.random.default_rng(3)
    old_space = SearchSpace.from_dict(BASE)
    before = [dict(p) for p in old_space.from_unit(old_space.sample(14, 3))]
    space = old_space.grow(GROWTH)
    after = [dict(p) for p in space.from_unit(space.sample_uniform(8, rng))]
    assert all("y" in p for p in after)
    obs = [(p, objective(p)) for p in before + after]
    config = EngineConfig.from_dict({"n_warmup": 5, "n_candidates": 400})
    snap = fit(obs, space, config, seed=3)
    j = space.names.index("y")
    assert (snap.observed[:14, j] == INACTIVE).all() and (snap.observed[14:, j] >= 0).all()
    assert snap.candidates.shape[1] == space.dim and (snap.candidates[:, j] >= 0).all()
    picks = select(snap, StudyState.initial(config, 3), space, config, count=4, asked=len(obs))
    assert len(picks) == 4
    for s in picks:
        assert s.prediction is not None
        assert space.validate(s.params) == s.params and "y" in s.params
        assert ("depth" in s.params) == (s.params["kind"] == "c")
