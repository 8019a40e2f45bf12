"""The one writer of stored and answered numbers (``calibo.server.finite``): never NaN or infinity,
never ``-0.0``, and the common case unchanged."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from calibo.engine.warp import WARPS, fit_warp, squash_for
from calibo.server import finite
from calibo.server.storage.db import json_dumps

LARGEST = 1.7976931348623157e308


def test_ordinary_json_is_written_as_json_dumps_writes_it() -> None:
    obj = {"a": [1.5, -0.01, -0.0001, 2e-300, 1e20, -3], "b": {"c": "-0.0 in a string", "d": None}}
    assert finite.dumps(obj) == json.dumps(obj)
    assert json_dumps(obj) == json.dumps(obj)


def test_negative_zero_and_non_finite_numbers_are_written_finite() -> None:
    obj = {"z": -0.0, "l": [math.inf, -math.inf, math.nan, -0.0, 1.0], "s": "-0.0", "n": {"m": [-0.0]}}
    out = json.loads(finite.dumps(obj))
    assert out == {"z": 0.0, "l": [LARGEST, -LARGEST, None, 0.0, 1.0], "s": "-0.0", "n": {"m": [0.0]}}
    assert math.copysign(1.0, out["z"]) == 1.0 and math.copysign(1.0, out["n"]["m"][0]) == 1.0
    assert finite.finite_float(-0.0) == 0.0 and math.copysign(1.0, finite.finite_float(-0.0)) == 1.0


floats = st.floats(allow_nan=True, allow_infinity=True)
trees = st.recursive(st.none() | st.booleans() | floats | st.integers() | st.text(max_size=5),
                     lambda inner: (st.lists(inner, max_size=4)
                                    | st.dictionaries(st.text(max_size=4), inner, max_size=4)),
                     max_leaves=20)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(obj=trees)
def test_any_tree_of_numbers_is_written_as_valid_finite_json(obj: object) -> None:
    def check(o: object) -> None:
        if isinstance(o, float):
            assert math.isfinite(o) and math.copysign(1.0, o) == 1.0 or o < 0, o
        elif isinstance(o, dict):
            for v in o.values():
                check(v)
        elif isinstance(o, list):
            for v in o:
                check(v)

    def refuse(token: str) -> None:
        raise AssertionError(f"{token} written")

    check(json.loads(finite.dumps(obj), parse_constant=refuse))


def test_the_output_warp_of_alternating_extreme_outcomes_is_finite() -> None:
    """Values of both signs near +-1.8e308: the squash's scale, twice their median distance,
    overflowed to infinity (and the median of two such distances too), and every prediction made
    through that warp held an infinity."""
    for y in (np.array([-1e308, 1e308] * 8), np.array([LARGEST, -LARGEST] * 5), np.array([-LARGEST, LARGEST, 0.0])):
        c, b = squash_for(y)
        assert math.isfinite(c) and math.isfinite(b) and b > 0
        for kind in WARPS:
            w = fit_warp(kind, y)
            t = w.forward(y)
            assert np.isfinite(t).all() and (np.diff(t[np.argsort(y)]) >= 0).all()  # order kept
            assert np.isfinite(w.inverse(np.linspace(t.min() - 5, t.max() + 5, 50))).all()
            json.dumps(w.to_dict(), allow_nan=False)
