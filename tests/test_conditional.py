"""Conditional parameters: definition checks, validation, encodings, sampling and the engine on them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calibo.engine import EngineConfig, Optimizer, ParamError, SearchSpace, SpaceError
from calibo.engine.space import INACTIVE

SVM = {
    "kernel": {"type": "categorical", "choices": ["linear", "rbf", "poly"]},
    "C": {"type": "float", "low": 1e-3, "high": 1e3, "log": True},
    "gamma": {"type": "float", "low": 1e-4, "high": 10.0, "log": True,
              "condition": {"parent": "kernel", "values": ["rbf", "poly"]}},
    "degree": {"type": "int", "low": 2, "high": 5, "condition": {"parent": "kernel", "values": ["poly"]}},
    "coef0": {"type": "float", "low": 0.0, "high": 1.0, "condition": {"parent": "degree", "values": [3, 4, 5]}},
}


@pytest.mark.parametrize(("spec", "field", "why"), [
    ({"a": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "b", "values": [1]}}},
     "space.a.condition.parent", "not a parameter"),
    ({"a": {"type": "float", "low": 0, "high": 1},
      "b": {"type": "int", "low": 0, "high": 3, "condition": {"parent": "a", "values": [0.5]}}},
     "space.b.condition.parent", "not float"),
    ({"a": {"type": "categorical", "choices": ["x", "y"], "condition": {"parent": "b", "values": [1]}},
      "b": {"type": "int", "low": 0, "high": 3, "condition": {"parent": "a", "values": ["x"]}}},
     "space.", "cycle"),
    ({"a": {"type": "categorical", "choices": ["x", "y"]},
      "b": {"type": "int", "low": 0, "high": 3, "condition": {"parent": "a", "values": ["z"]}}},
     "space.b.condition.values", "not a value"),
    ({"a": {"type": "categorical", "choices": ["x", "y"]},
      "b": {"type": "int", "low": 0, "high": 3, "condition": {"parent": "a", "values": []}}},
     "space.b.condition.values", "non-empty"),
    ({"a": {"type": "categorical", "choices": ["x", "y"]},
      "b": {"type": "int", "low": 0, "high": 3, "condition": {"parent": "a", "value": ["x"]}}},
     "space.b.condition.value", "unknown key"),
    ({"a": {"type": "categorical", "choices": ["x", "y"], "condition": {"parent": "a", "values": ["x"]}}},
     "space.a.condition.parent", "own parent"),
])
def test_bad_conditions_name_the_field(spec: dict, field: str, why: str) -> None:
    with pytest.raises(SpaceError) as info:
        SearchSpace.from_dict(spec)
    assert info.value.field.startswith(field) and why in info.value.message, (info.value.field, info.value.message)


def test_validation_takes_exactly_the_active_parameters() -> None:
    space = SearchSpace.from_dict(SVM)
    assert space.to_dict()["gamma"]["condition"] == {"parent": "kernel", "values": ["rbf", "poly"]}
    assert space.validate({"kernel": "linear", "C": 1.0}) == {"kernel": "linear", "C": 1.0}
    assert space.validate({"kernel": "poly", "C": 1, "gamma": 0.1, "degree": 2}) == \
        {"kernel": "poly", "C": 1.0, "gamma": 0.1, "degree": 2}
    full = {"kernel": "poly", "C": 1, "gamma": 0.1, "degree": 4, "coef0": 0.5}  # nested: coef0 needs degree >= 3
    assert space.validate(full)["coef0"] == 0.5
    with pytest.raises(ParamError, match="inactive") as info:
        space.validate({"kernel": "linear", "C": 1.0, "gamma": 0.1})
    assert info.value.field == "gamma"
    with pytest.raises(ParamError, match="missing") as info:
        space.validate({"kernel": "rbf", "C": 1.0})
    assert info.value.field == "gamma"
    with pytest.raises(ParamError) as info:
        space.validate({"kernel": "rbf", "C": 1.0, "gamma": 0.1, "coef0": 0.3})  # its parent is inactive
    assert info.value.field == "coef0"
    assert space.active_names({"kernel": "poly", "degree": 3}) == ["kernel", "C", "gamma", "degree", "coef0"]


def test_unit_rows_features_and_keys() -> None:
    space = SearchSpace.from_dict(SVM)
    lin = {"kernel": "linear", "C": 1.0}
    rbf = {"kernel": "rbf", "C": 1.0, "gamma": 0.1}
    u = space.to_unit([lin, rbf])
    assert np.all(u[0, 2:] == INACTIVE) and u[1, 2] >= 0 and np.all(u[1, 3:] == INACTIVE)
    back = space.from_unit(u)
    assert [set(b) for b in back] == [set(lin), set(rbf)] and back[0] == lin
    assert back[1]["gamma"] == pytest.approx(0.1, rel=1e-7)  # the float grid of the unit cube
    assert space.keys(space.to_unit(back)) == space.keys(u)
    x = space.features(u)
    # kernel one-hot (3), C (1), gamma coordinate + indicator (2), degree (2), coef0 (2)
    assert x.shape == (2, 10)
    np.testing.assert_array_equal(x[0, 4:], [0.5, 0, 0.5, 0, 0.5, 0])
    assert x[1, 5] == 1 and x[1, 4] == u[1, 2]
    # two linear configurations that differ only in parameters they do not use are one configuration
    stray = u[0].copy()
    stray[2] = 0.3  # a gamma the linear kernel does not have
    assert space.keys(space.snap(stray))[0] == space.keys(u[:1])[0]


def test_sampling_and_mutation_produce_valid_configurations() -> None:
    space = SearchSpace.from_dict(SVM)
    rng = np.random.default_rng(0)
    rows = np.vstack([space.sample(256, 1), space.sample_uniform(256, rng)])
    for p in space.from_unit(rows):
        assert space.validate(p) == p
    kernels = {p["kernel"] for p in space.from_unit(rows)}
    assert kernels == {"linear", "rbf", "poly"}
    kids = space.mutate(rows[:64], 2000, rng)
    configs = space.from_unit(kids)
    for p in configs:
        assert space.validate(p) == p
    # a parent moved to poly switches on degree (and, at degree >= 3, coef0) with drawn values
    drawn = [p["degree"] for p in configs if p["kernel"] == "poly"]
    assert len(set(drawn)) == 4


def svm_like(p: dict) -> float:
    """A conditional objective: rbf near gamma = 0.3 and C = 10 is best; linear is a plateau."""
    c = math.log10(p["C"])
    if p["kernel"] == "linear":
        return 0.6 + 0.01 * (c - 1) ** 2
    g = math.log10(p["gamma"])
    base = 0.1 * (c - 1) ** 2 + 0.2 * (g + 0.5) ** 2
    if p["kernel"] == "poly":
        base += 0.15 + 0.05 * (p["degree"] - 3) ** 2 + (0.1 * p["coef0"] if "coef0" in p else 0.0)
    return base


def test_the_engine_searches_a_conditional_space() -> None:
    opt = Optimizer(SVM, seed=3, config=EngineConfig(n_candidates=500))
    seen = set()
    for _ in range(40):
        s = opt.ask()[0]
        assert SearchSpace.from_dict(SVM).validate(s.params) == s.params  # only the active ones
        key = opt.space.key(s.params)
        assert key not in seen
        seen.add(key)
        opt.tell(s.params, svm_like(s.params))
    best, value = opt.best
    assert best["kernel"] == "rbf" and value < 0.05
    state = Optimizer.from_state_dict(opt.state_dict())
    assert state.ask()[0].params == opt.ask()[0].params
