"""Search spaces: round trips and sampling as properties; every bad input named."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibo.engine.space import UNIT_GRID, Param, ParamError, SearchSpace, SpaceError

# Deterministic example generation: the suite must not fail on one run and pass on the next.
PROPS = settings(max_examples=60, deadline=None, derandomize=True)


def choice_key(c):
    """The space's notion of choice identity (True != 1, 1 == 1.0) for building distinct lists."""
    if isinstance(c, bool) or c is None:
        return ("const", c)
    if isinstance(c, (int, float)):
        return ("num", float(c))
    return ("str", c)


choice_values = st.one_of(
    st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=5),
    st.integers(-5, 5),
    st.floats(-10, 10, allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)


@st.composite
def param_specs(draw):
    kind = draw(st.sampled_from(["float", "int", "categorical", "ordinal"]))
    if kind == "float":
        log = draw(st.booleans())
        low = draw(st.floats(1e-4, 10.0) if log else st.floats(-1e3, 1e3))
        span = draw(st.floats(1e-2, 1e3))
        return {"type": "float", "low": low, "high": low + span, "log": log}
    if kind == "int":
        log = draw(st.booleans())
        low = draw(st.integers(1, 50) if log else st.integers(-50, 50))
        return {"type": "int", "low": low, "high": low + draw(st.integers(1, 200)), "log": log}
    choices = draw(st.lists(choice_values, min_size=1, max_size=6, unique_by=choice_key))
    return {"type": kind, "choices": choices}


spaces = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=4), param_specs(), min_size=1, max_size=5)


def value_of(p: Param):
    """A strategy for valid told values of ``p`` (including non-canonical spellings)."""
    if p.type == "float":
        return st.floats(p.low, p.high, allow_nan=False, allow_infinity=False)
    if p.type == "int":
        ints = st.integers(int(p.low), int(p.high))
        return st.one_of(ints, ints.map(float), ints.map(np.int64))  # 3, 3.0, np.int64(3)
    return st.sampled_from(p.choices)


@st.composite
def space_and_configs(draw, n: int = 3):
    space = SearchSpace.from_dict(draw(spaces))
    configs = [{p.name: draw(value_of(p)) for p in space.params} for _ in range(n)]
    return space, configs


def typed(config: dict) -> tuple:
    """A configuration's identity with types kept apart (Python has True == 1 == 1.0)."""
    return tuple((k, choice_key(v)) for k, v in sorted(config.items()))


def assert_same_config(space: SearchSpace, got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for p in space.params:
        a, b = got[p.name], want[p.name]
        if p.type == "float":
            # the unit cube is a grid of UNIT_GRID steps: a told float comes back within one step
            assert isinstance(a, float)
            if p.log:
                assert abs(math.log(a) - math.log(b)) <= math.log(p.high / p.low) / UNIT_GRID, (p, a, b)
            else:
                assert abs(a - b) <= (p.high - p.low) / UNIT_GRID, (p, a, b)
        elif p.type == "int":
            assert isinstance(a, int) and not isinstance(a, bool) and a == b
        else:
            assert choice_key(a) == choice_key(b), (p, a, b)


# ------------------------------------------------------------ round trips
@PROPS
@given(space_and_configs())
def test_told_configs_round_trip_through_unit_space(sc) -> None:
    space, raw = sc
    configs = [space.validate(c) for c in raw]
    for c, r in zip(configs, raw, strict=True):
        assert_same_config(space, c, r)  # canonical value is the told one
        for p in space.params:
            if p.type == "int":
                assert type(c[p.name]) is int
            if p.type == "float":
                assert type(c[p.name]) is float
    U = space.to_unit(configs)
    assert U.shape == (len(configs), space.dim)
    assert np.all((U >= 0) & (U <= 1))
    np.testing.assert_allclose(space.snap(U), U, rtol=0, atol=1e-12)  # fixed points of snap
    back = space.from_unit(U)
    for b, c in zip(back, configs, strict=True):
        assert_same_config(space, b, c)
        assert space.validate(b) == b
    # the engine identifies configurations by key: decode/encode must not change it
    assert space.keys(space.to_unit(back)) == space.keys(U)


@PROPS
@given(spaces, st.integers(0, 2**31 - 1))
def test_sampled_configs_are_valid_and_round_trip(d, seed) -> None:
    space = SearchSpace.from_dict(d)
    U = space.sample(16, seed)
    assert U.shape == (16, space.dim)
    assert np.all((U >= 0) & (U <= 1))
    np.testing.assert_allclose(space.snap(U), U, rtol=0, atol=1e-12)
    configs = space.from_unit(U)
    for c in configs:
        assert space.validate(c) == c  # within bounds, right types, known choices
        for p in space.params:
            if p.type == "int":
                assert type(c[p.name]) is int
            elif p.type == "float":
                assert p.low <= c[p.name] <= p.high
    back = space.to_unit(configs)
    np.testing.assert_allclose(back, U, atol=1e-12)
    assert space.keys(back) == space.keys(U)
    for again, c in zip(space.from_unit(back), configs, strict=True):
        assert_same_config(space, again, c)  # floats to an ulp or so: decode/encode is not exact


@PROPS
@given(spaces, st.integers(0, 2**31 - 1), st.floats(0.01, 0.5))
def test_uniform_and_mutated_rows_are_valid_snapped_configs(d, seed, scale) -> None:
    space = SearchSpace.from_dict(d)
    rng = np.random.default_rng(seed)
    parents = space.sample(5, seed)
    for U in (space.sample_uniform(20, rng), space.mutate(parents, 30, rng, scale=scale)):
        assert U.shape[1] == space.dim
        assert np.all((U >= 0) & (U <= 1))
        np.testing.assert_allclose(space.snap(U), U, rtol=0, atol=1e-12)
        for c in space.from_unit(U):
            assert typed(space.validate(c)) == typed(c)
    assert space.mutate(parents, 30, rng).shape == (30, space.dim)
    assert space.mutate(parents, 0, rng).shape == (0, space.dim)
    assert space.sample(0, seed).shape == (0, space.dim)


@PROPS
@given(st.lists(st.integers(2, 6), min_size=1, max_size=4), st.integers(0, 2**31 - 1))
def test_mutation_of_categoricals_always_changes_the_configuration(ks, seed) -> None:
    # every child mutates at least one coordinate, and a mutated categorical switches choice
    space = SearchSpace.from_dict({f"c{i}": {"type": "categorical", "choices": list(range(k))}
                                   for i, k in enumerate(ks)})
    rng = np.random.default_rng(seed)
    parents = space.sample_uniform(3, rng)
    children = space.mutate(parents, 24, rng)
    for i, child in enumerate(children):
        assert space.keys(child) != space.keys(parents[i % 3])  # parents taken round-robin


@PROPS
@given(spaces, st.integers(0, 2**31 - 1))
def test_uniform_sampling_is_reproducible_for_a_generator_seed(d, seed) -> None:
    space = SearchSpace.from_dict(d)
    a = space.sample_uniform(8, np.random.default_rng(seed))
    b = space.sample_uniform(8, np.random.default_rng(seed))
    np.testing.assert_array_equal(a, b)
    parents = space.sample(4, seed)
    np.testing.assert_array_equal(space.mutate(parents, 8, np.random.default_rng(seed)),
                                  space.mutate(parents, 8, np.random.default_rng(seed)))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(spaces, st.integers(0, 1000), st.integers(1, 10))
def test_sobol_prefixes_are_one_sequence(d, seed, skip) -> None:
    space = SearchSpace.from_dict(d)
    long = space.sample(skip + 4, seed)
    np.testing.assert_array_equal(space.sample(skip + 4, seed), long)  # reproducible
    np.testing.assert_allclose(space.sample(4, seed, skip=skip), long[skip:])
    np.testing.assert_allclose(space.sample(4, seed), long[:4])


def test_sobol_draws_differ_between_seeds_and_fill_the_cube() -> None:
    space = SearchSpace.from_dict({"a": {"type": "float", "low": 0, "high": 1},
                                   "b": {"type": "float", "low": 0, "high": 1}})
    a, b = space.sample(64, 0), space.sample(64, 1)
    assert not np.allclose(a, b)
    # low discrepancy: every one of the 16 cells of a 4x4 grid holds exactly 4 of 64 points
    cells = np.floor(a * 4).astype(int)
    counts = np.bincount(cells[:, 0] * 4 + cells[:, 1], minlength=16)
    assert np.all(counts == 4)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(spaces, st.integers(0, 1000))
def test_features_and_keys(d, seed) -> None:
    space = SearchSpace.from_dict(d)
    U = space.sample_uniform(12, np.random.default_rng(seed))
    X = space.features(U)
    assert X.shape == (12, space.n_features)
    assert space.n_features == sum(len(p.choices) if p.type == "categorical" else 1 for p in space.params)
    col = 0
    configs = space.from_unit(U)
    for j, p in enumerate(space.params):
        if p.type == "categorical":
            block = X[:, col : col + len(p.choices)]
            assert np.all(block.sum(axis=1) == 1) and set(np.unique(block)) <= {0.0, 1.0}
            hot = block.argmax(axis=1)
            assert [p.choices[i] for i in hot] == [c[p.name] for c in configs]
        else:
            np.testing.assert_array_equal(X[:, col], U[:, j])
        col += p.n_features
    np.testing.assert_allclose(space.encode(configs), X, rtol=0, atol=1e-12)
    keys = space.keys(U)
    for i in range(12):
        for j in range(12):
            assert (keys[i] == keys[j]) == (typed(configs[i]) == typed(configs[j]))


def test_keys_fold_negative_zero() -> None:
    assert SearchSpace.keys(np.array([[0.0, 0.5]])) == SearchSpace.keys(np.array([[-0.0, 0.5]]))


def test_keys_tell_close_configurations_apart() -> None:
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1},
                                   "lr": {"type": "float", "low": 1e-6, "high": 1, "log": True}})
    base = {"x": 0.5, "lr": 1e-3}
    near = [base, {**base, "x": 0.5 + 1e-8}, {**base, "lr": 1e-3 * (1 + 1e-8)}, {**base, "x": 0.5 - 1e-6}]
    keys = space.keys(space.to_unit(near))
    assert len(set(keys)) == len(near)
    assert space.keys(space.to_unit([dict(base)])) == keys[:1]


def test_mutation_reflects_at_the_bounds() -> None:
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1}})
    rng = np.random.default_rng(0)
    for edge in (0.0, 1.0):
        kids = space.mutate(np.array([[edge]]), 2000, rng, scale=0.1)[:, 0]
        dist = np.abs(kids - edge)
        assert np.mean(dist == 0) < 0.01  # reflected, not piled up on the bound
        assert np.mean(dist) == pytest.approx(0.1 * np.sqrt(2 / np.pi), rel=0.1)  # |N(0, 0.1)|


def test_log_float_and_int_mapping() -> None:
    space = SearchSpace.from_dict({"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
                                   "n": {"type": "int", "low": 1, "high": 1000, "log": True}})
    c = space.from_unit(np.array([[0.5, 0.5]]))[0]
    assert c["lr"] == pytest.approx(1e-2)
    assert 20 <= c["n"] <= 50  # geometric middle of [0.5, 1000.5]
    # uniform in unit space is log-uniform in value: about a quarter of draws below 1e-3
    lrs = [x["lr"] for x in space.from_unit(space.sample(1024, 0))]
    assert abs(np.mean(np.array(lrs) < 1e-3) - 0.25) < 0.03
    ends = space.from_unit(np.array([[0.0, 0.0], [1.0, 1.0]]))
    assert ends[0]["lr"] == pytest.approx(1e-4, rel=1e-12) and ends[1]["lr"] == pytest.approx(1.0, rel=1e-12)
    assert (ends[0]["n"], ends[1]["n"]) == (1, 1000)


def test_ints_and_choices_own_equal_bins() -> None:
    space = SearchSpace.from_dict({"n": {"type": "int", "low": 0, "high": 3},
                                   "o": {"type": "ordinal", "choices": ["s", "m", "l"]}})
    counts_n = np.zeros(4)
    counts_o = np.zeros(3)
    for c in space.from_unit(space.sample(1200, 5)):
        counts_n[c["n"]] += 1
        counts_o[["s", "m", "l"].index(c["o"])] += 1
    np.testing.assert_allclose(counts_n / 1200, 0.25, atol=0.01)
    np.testing.assert_allclose(counts_o / 1200, 1 / 3, atol=0.01)
    np.testing.assert_allclose(space.to_unit([{"n": 0, "o": "s"}, {"n": 3, "o": "l"}]),
                               [[0.125, 1 / 6], [0.875, 5 / 6]])


# ---------------------------------------------------------- bad definitions
@pytest.mark.parametrize(("d", "field"), [
    ("x", "space"),
    ([1, 2], "space"),
    ({"": {"type": "float", "low": 0, "high": 1}}, "space"),
    ({"x": {"type": "float", "low": 1, "high": 1}}, "space.x.low"),
    ({"x": {"type": "float", "low": 2, "high": 1}}, "space.x.low"),
    ({"x": {"type": "int", "low": 3, "high": 3}}, "space.x.low"),
    ({"x": {"type": "float", "low": 0, "high": 1, "log": True}}, "space.x.low"),
    ({"x": {"type": "float", "low": -1, "high": 1, "log": True}}, "space.x.low"),
    ({"x": {"type": "int", "low": 0, "high": 5, "log": True}}, "space.x.low"),
    ({"x": {"type": "int", "low": 0.5, "high": 3}}, "space.x.low"),
    ({"x": {"type": "int", "low": 0, "high": 3.5}}, "space.x.high"),
    ({"x": {"type": "float", "low": "a", "high": 1}}, "space.x.low"),
    ({"x": {"type": "float", "low": "0", "high": 1}}, "space.x.low"),
    ({"x": {"type": "float", "low": True, "high": 2}}, "space.x.low"),
    ({"x": {"type": "float", "low": None, "high": 1}}, "space.x.low"),
    ({"x": {"type": "float", "low": 0, "high": float("inf")}}, "space.x.high"),
    ({"x": {"type": "float", "low": float("nan"), "high": 1}}, "space.x.low"),
    ({"x": {"type": "float", "low": 0}}, "space.x.high"),
    ({"x": {"type": "float", "low": 0, "high": 1, "log": "yes"}}, "space.x.log"),
    ({"x": {"type": "float", "low": 0, "high": 1, "log": 1}}, "space.x.log"),
    ({"x": {"type": "categorical", "choices": []}}, "space.x.choices"),
    ({"x": {"type": "categorical"}}, "space.x.choices"),
    ({"x": {"type": "categorical", "choices": "abc"}}, "space.x.choices"),
    ({"x": {"type": "categorical", "choices": ["a", "b", "a"]}}, "space.x.choices"),
    ({"x": {"type": "ordinal", "choices": [1, 1.0]}}, "space.x.choices"),
    ({"x": {"type": "categorical", "choices": [[1]]}}, "space.x.choices"),
    ({"x": {"type": "categorical", "choices": [{"a": 1}]}}, "space.x.choices"),
    ({"x": {"type": "categorical", "choices": ["a"], "low": 0}}, "space.x.low"),
    ({"x": {"type": "ordinal", "choices": ["a"], "log": True}}, "space.x.log"),
    ({"x": {"type": "float", "low": 0, "high": 1, "choices": [1]}}, "space.x.choices"),
    ({"x": {"type": "complex"}}, "space.x.type"),
    ({"x": {"low": 0, "high": 1}}, "space.x.type"),
    ({"x": {"type": "float", "low": 0, "high": 1, "step": 2}}, "space.x.step"),
    ({"x": 3}, "space.x"),
    ({"ok": {"type": "int", "low": 0, "high": 1}, "bad": {"type": "int", "low": 1, "high": 0}}, "space.bad.low"),
])
def test_bad_definitions_name_the_field(d, field) -> None:
    with pytest.raises(SpaceError) as e:
        SearchSpace.from_dict(d)
    assert e.value.field == field
    assert isinstance(e.value, ValueError) and field in str(e.value)


def test_an_empty_space_is_a_space_a_study_grows_but_no_optimizer_runs_on() -> None:
    from calibo.engine import Optimizer

    empty = SearchSpace.from_dict({})  # a study an Optuna storage creates: its parameters come by growth
    assert empty.params == () and empty.validate({}) == {} and empty.is_configuration({})
    assert not empty.is_configuration({"x": 1.0})
    assert empty.grow({"x": {"type": "float", "low": 0, "high": 1}}).params[0].grown
    with pytest.raises(SpaceError) as e:
        Optimizer({})
    assert e.value.field == "space" and "at least one parameter" in str(e.value)


@PROPS
@given(st.sampled_from(["float", "int"]), st.integers(-100, 100), st.integers(0, 100), st.booleans())
def test_any_empty_or_inverted_range_is_rejected_at_low(kind, high, gap, log) -> None:
    low = high + gap  # low >= high
    with pytest.raises(SpaceError) as e:
        SearchSpace.from_dict({"p": {"type": kind, "low": low, "high": high, "log": log}})
    assert e.value.field == "space.p.low"


@PROPS
@given(spaces)
def test_definitions_survive_to_dict(d) -> None:
    space = SearchSpace.from_dict(d)
    again = SearchSpace.from_dict(space.to_dict())
    assert again.to_dict() == space.to_dict()
    assert again.names == list(d) and again.dim == len(d)
    assert SearchSpace.from_dict(space) is space


# -------------------------------------------------------- bad told values
SPACE = {"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
         "depth": {"type": "int", "low": 1, "high": 8},
         "kind": {"type": "categorical", "choices": ["a", "b", True]},
         "size": {"type": "ordinal", "choices": [16, 32, 64]}}
GOOD = {"lr": 0.01, "depth": 3, "kind": "a", "size": 32}


@pytest.mark.parametrize(("change", "field"), [
    ({"lr": 2.0}, "lr"),
    ({"lr": 0.0}, "lr"),
    ({"lr": -0.5}, "lr"),
    ({"lr": "0.1"}, "lr"),
    ({"lr": None}, "lr"),
    ({"lr": [0.1]}, "lr"),
    ({"lr": True}, "lr"),
    ({"lr": math.nan}, "lr"),
    ({"lr": math.inf}, "lr"),
    ({"lr": -math.inf}, "lr"),
    ({"lr": np.float64("nan")}, "lr"),
    ({"depth": 2.5}, "depth"),
    ({"depth": 9}, "depth"),
    ({"depth": 0}, "depth"),
    ({"depth": "3"}, "depth"),
    ({"depth": False}, "depth"),
    ({"depth": math.inf}, "depth"),
    ({"kind": "z"}, "kind"),
    ({"kind": 1}, "kind"),  # True is a choice, 1 is not
    ({"kind": "True"}, "kind"),
    ({"kind": None}, "kind"),
    ({"size": 33}, "size"),
    ({"size": "32"}, "size"),
    ({"extra": 1}, "extra"),
])
def test_bad_told_values_name_the_parameter(change, field) -> None:
    space = SearchSpace.from_dict(SPACE)
    with pytest.raises(ParamError) as e:
        space.validate({**GOOD, **change})
    assert e.value.field == field


def test_missing_parameter_and_canonical_values() -> None:
    space = SearchSpace.from_dict(SPACE)
    for name in GOOD:
        with pytest.raises(ParamError) as e:
            space.validate({k: v for k, v in GOOD.items() if k != name})
        assert e.value.field == name
    with pytest.raises(ParamError) as e:
        space.validate([1, 2])
    assert e.value.field == "params"
    c = space.validate({**GOOD, "depth": 3.0, "size": 32.0})
    assert c["depth"] == 3 and type(c["depth"]) is int and c["size"] == 32 and type(c["size"]) is int
    c = space.validate({**GOOD, "lr": 1, "depth": np.int64(8), "kind": True})
    assert type(c["lr"]) is float and c["lr"] == 1.0 and type(c["depth"]) is int and c["kind"] is True
    assert space.validate({**GOOD, "lr": 1e-4})["lr"] == 1e-4  # bounds are inclusive
    assert space.to_dict() == SearchSpace.from_dict(space.to_dict()).to_dict()


# ------------------------------------------- edge cases that once slipped through
@pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_huge_integer_told_value_is_a_param_error(value) -> None:
    space = SearchSpace.from_dict(SPACE)
    with pytest.raises(ParamError) as e:
        space.validate({**GOOD, "depth": value})
    assert e.value.field == "depth"


def test_huge_integer_bound_is_a_space_error() -> None:
    with pytest.raises(SpaceError) as e:
        SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 10**400}})
    assert e.value.field == "space.x.high"


def test_non_scalar_told_value_is_not_a_string_choice() -> None:
    space = SearchSpace.from_dict({"c": {"type": "categorical", "choices": ["[1]", "b"]}})
    with pytest.raises(ParamError):
        space.validate({"c": [1]})


def test_nan_choice_is_rejected_or_usable() -> None:
    try:
        space = SearchSpace.from_dict({"c": {"type": "categorical", "choices": [math.nan, 1]}})
    except SpaceError as e:
        assert e.field == "space.c.choices"
        return
    for c in space.from_unit(np.array([[0.1], [0.9]])):
        space.validate(json.loads(json.dumps(c)))  # what a worker tells back


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_bounds_whose_span_overflows_are_rejected_or_usable() -> None:
    try:
        space = SearchSpace.from_dict({"x": {"type": "float", "low": -1e308, "high": 1e308}})
    except SpaceError:
        return
    for c in space.from_unit(space.sample(4, 0)):
        space.validate(c)


@pytest.mark.parametrize("spec", [
    {"type": "float", "low": 1 / 3, "high": 413.0833333333333, "log": True},  # CI's failing draw
    {"type": "float", "low": -1e3, "high": -1e3 + 1e-2},
    {"type": "float", "low": 1e-8, "high": 1e8, "log": True},
    {"type": "int", "low": 1, "high": 10**6, "log": True},
])
def test_decode_encode_is_exactly_idempotent(spec) -> None:
    """A configuration has one key however often it is decoded and encoded (JSON included)."""
    space = SearchSpace.from_dict({"x": spec, "y": {"type": "float", "low": 0, "high": 1}})
    U = space.sample_uniform(20000, np.random.default_rng(0))
    again = space.to_unit(json.loads(json.dumps(space.from_unit(U))))
    assert np.array_equal(again, U)
    assert space.keys(again) == space.keys(U)


def test_a_partial_configuration_gives_each_conditional_parameter_with_its_parent() -> None:
    """An enqueued ``{"z": ...}`` whose parent is left out could be completed with a parent value under
    which ``z`` is inactive: no ask could hand it out. The parent must come with it, activating it."""
    sp = SearchSpace.from_dict({
        "kind": {"type": "categorical", "choices": ["a", "b"]},
        "depth": {"type": "int", "low": 1, "high": 4, "condition": {"parent": "kind", "values": ["b"]}},
        "leaf": {"type": "float", "low": 0, "high": 1, "condition": {"parent": "depth", "values": [3, 4]}},
    })
    assert sp.validate_partial({"kind": "b", "depth": 3}) == {"kind": "b", "depth": 3}
    assert sp.validate_partial({"kind": "b", "depth": 3, "leaf": 0.5}) == {"kind": "b", "depth": 3, "leaf": 0.5}
    assert sp.validate_partial({"kind": "a"}) == {"kind": "a"}
    for params, field in (({"depth": 2}, "depth"), ({"kind": "a", "depth": 2}, "depth"),
                          ({"kind": "b", "leaf": 0.5}, "leaf"), ({"leaf": 0.5}, "leaf")):
        with pytest.raises(ParamError) as e:
            sp.validate_partial(params)
        assert e.value.field == field, params
