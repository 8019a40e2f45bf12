"""Calibration metrics on arrays with known answers, and on a real optimizer run."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from calibo.engine import Optimizer
from calibo.engine import metrics as M


def test_coverage_breach_and_rolling_error() -> None:
    covered = np.array([[1, 0]] * 30 + [[0, 0]] * 10, dtype=float)  # 40 trials, 2 levels
    np.testing.assert_allclose(M.coverage(covered), [0.75, 0.0])
    np.testing.assert_allclose(M.breach_rate(covered), [0.25, 1.0])
    # windows of 20: level 0 covers 1.0 then 0.5; nominal 0.8 -> errors 0.2 and 0.3
    np.testing.assert_allclose(M.rolling_coverage_error(covered, [0.8, 0.5], 20), [0.25, 0.5])
    assert np.isnan(M.rolling_coverage_error(covered[:10], [0.8, 0.5], 20)).all()
    np.testing.assert_allclose(M.cumulative_coverage(covered)[[0, 29, 39], 0], [1.0, 1.0, 0.75])
    # the calibration gap: mean over pairs of |coverage - nominal| = (|0.75 - 0.8| + |0 - 0.5|) / 2
    assert M.coverage_gap(M.coverage(covered), [0.8, 0.5]) == pytest.approx(0.275)


def test_trailing_coverage_by_hand() -> None:
    covered = np.array([[1, 0], [0, 0], [1, 1], [1, 1]], dtype=float)
    got = M.trailing_coverage(covered, window=2)
    np.testing.assert_allclose(got, [[1, 0], [0.5, 0], [0.5, 0.5], [1, 1]])
    np.testing.assert_allclose(M.trailing_coverage(covered, window=10), M.cumulative_coverage(covered))


def test_rolling_error_drops_the_partial_window() -> None:
    # 45 trials, one level: windows [0, 20) and [20, 40) count, the last 5 do not
    covered = np.zeros((45, 1))
    covered[:18] = 1  # window 1: 18/20 = 0.9
    covered[20:31] = 1  # window 2: 11/20 = 0.55
    covered[40:] = 1  # ignored
    # nominal 0.8: |0.9 - 0.8| = 0.1, |0.55 - 0.8| = 0.25 -> 0.175
    np.testing.assert_allclose(M.rolling_coverage_error(covered, [0.8]), [0.175])
    np.testing.assert_allclose(M.rolling_coverage_error(covered[:40], [0.8]), [0.175])
    # windows of 10: 1.0, 0.8, 1.0, 0.1 -> errors 0.2, 0, 0.2, 0.7 -> 0.275
    np.testing.assert_allclose(M.rolling_coverage_error(covered, [0.8], window=10), [0.275])
    # the absolute value matters: over- and under-coverage do not cancel
    halves = np.array([[1.0]] * 20 + [[0.0]] * 20)
    np.testing.assert_allclose(M.rolling_coverage_error(halves, [0.5]), [0.5])
    np.testing.assert_allclose(M.coverage(halves), [0.5])


def test_coverage_of_booleans_and_of_nothing() -> None:
    covered = np.array([[True, False, True], [True, True, False]])
    np.testing.assert_allclose(M.coverage(covered), [1.0, 0.5, 0.5])
    np.testing.assert_allclose(M.breach_rate(covered), [0.0, 0.5, 0.5])
    assert np.isnan(M.coverage(np.empty((0, 3)))).all() and M.coverage(np.empty((0, 3))).shape == (3,)
    np.testing.assert_allclose(M.mean_width([[2.0, 1.0], [4.0, 0.0]]), [3.0, 0.5])


def test_llr_detects_breaches_that_depend_on_params() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((400, 3))
    independent = rng.random(400) < 0.3
    dependent = rng.random(400) < np.where(X[:, 0] > 0.5, 0.8, 0.05)
    assert M.llr_breaches(X, independent) < 10  # chi2(3) 99.9% quantile is 16.3
    assert M.llr_breaches(X, dependent) > 100
    # breaches that are a deterministic function of X: the statistic is huge
    assert M.llr_breaches(X, X[:, 1] + X[:, 2] > 1.0) > 20 * 10
    assert M.llr_breaches(X, np.zeros(400)) == 0.0
    assert M.llr_breaches(X, np.ones(400)) == 0.0
    # the statistic of independent breaches stays small over many seeds (chi2(3): mean 3)
    stats = [M.llr_breaches(X, np.random.default_rng(s).random(400) < 0.2) for s in range(20)]
    assert np.mean(stats) < 6 and max(stats) < 20


def test_rmsce_by_hand() -> None:
    levels = [0.25, 0.75]
    y = [0.0, 1.0, 2.0, 3.0]
    # p_hat = [0.25, 0.75]: perfectly calibrated
    assert M.rmsce(np.tile([0.5, 2.5], (4, 1)), levels, y) == pytest.approx(0.0)
    # p_hat = [0.5, 0.5]: errors 0.25 each -> sqrt(0.5 * 0.0625 * 2) = 0.25
    assert M.rmsce(np.tile([1.5, 1.5], (4, 1)), levels, y) == pytest.approx(0.25)
    # p_hat = [0.5, 1.0]: errors 0.25, 0.25; weights pick one level
    assert M.rmsce(np.tile([1.5, 3.0], (4, 1)), levels, y, weights=[1.0, 0.0]) == pytest.approx(0.25)
    assert M.rmsce(np.tile([0.5, 3.0], (4, 1)), levels, y, weights=[1.0, 0.0]) == pytest.approx(0.0)
    assert np.isnan(M.rmsce(np.empty((0, 2)), levels, []))
    # "at or below": an outcome equal to its quantile counts -> p_hat = [0.5, 1.0]
    assert M.rmsce(np.tile([1.0, 3.0], (4, 1)), levels, y) == pytest.approx(0.25)


def test_rmsce_small_when_calibrated_large_when_not() -> None:
    rng = np.random.default_rng(1)
    levels = (np.arange(10) + 0.5) / 10
    y = rng.normal(size=5000)
    good = np.tile(norm.ppf(levels), (5000, 1))
    bad = good * 0.3
    assert M.rmsce(good, levels, y) < 0.01
    assert M.rmsce(bad, levels, y) > 0.15
    assert M.rmsce(good * 3.0, levels, y) > 0.15  # too wide is as miscalibrated as too narrow
    assert M.rmsce(good + 1.0, levels, y) > 0.2  # and so is a biased location
    # per-row quantiles of per-row distributions: y_i ~ N(mu_i, s_i)
    mu, sd = rng.normal(size=5000) * 3, rng.uniform(0.1, 2.0, 5000)
    y2 = mu + sd * rng.normal(size=5000)
    assert M.rmsce(mu[:, None] + sd[:, None] * norm.ppf(levels)[None, :], levels, y2) < 0.015


def test_summarize_hand_built_records() -> None:
    # 40 records, 2 pairs (80% and 20%): pair 0 covers 36/40, pair 1 covers 8/40
    records = []
    for t in range(40):
        v = float(t)
        records.append({
            "method": "raw" if t < 10 else "split",
            "coverage": [0.8, 0.2],
            "covered": [t % 10 != 0, t % 5 == 0],
            "width": [2.0, 0.5],
            "levels": [0.1, 0.4, 0.6, 0.9],
            "quantiles": [v - 1, v - 0.2, v + 0.2, v + 1] if t % 2 else [v + 1, v + 2, v + 3, v + 4],
            "value": v,
        })
    out = M.summarize(records)
    assert out["n"] == 40 and out["nominal"] == [0.8, 0.2]
    np.testing.assert_allclose(out["coverage"], [0.9, 0.2])
    np.testing.assert_allclose(out["breach_rate"], [0.1, 0.8])
    # each window of 20 covers 18 and 4: |0.9 - 0.8| = 0.1 and |0.2 - 0.2| = 0
    np.testing.assert_allclose(out["rolling_coverage_error"], [0.1, 0.0], atol=1e-12)
    np.testing.assert_allclose(out["mean_width"], [2.0, 0.5])
    # odd rows: y above the two lower quantiles; even rows: y below all four -> p_hat = [.5,.5,1,1]
    assert out["rmsce"] == pytest.approx(np.sqrt(np.mean(np.square([0.1 - 0.5, 0.4 - 0.5, 0.6 - 1, 0.9 - 1]))))
    assert "llr" not in out
    conf = M.summarize(records, conformal_only=True)
    assert conf["n"] == 30
    np.testing.assert_allclose(conf["coverage"], [27 / 30, 6 / 30])
    assert M.summarize([]) == {"n": 0}
    # LLR rows line up with the records kept: breaches of pair 0 are exactly where feature 0 is 1
    X = np.array([[float(t % 10 == 0), 0.0] for t in range(40)])
    full = M.summarize(records, X)
    assert full["llr"][0] > 20
    assert M.summarize(records, X, conformal_only=True)["llr"][0] > 15
    # and exactly: the kept records' own feature rows, not the first rows
    Z = np.random.default_rng(2).random((40, 2))
    covered = np.array([r["covered"] for r in records], dtype=float)
    got = M.summarize(records, Z, conformal_only=True)["llr"]
    assert got == [M.llr_breaches(Z[10:], 1 - covered[10:, j]) for j in range(2)]
    assert got != [M.llr_breaches(Z[:30], 1 - covered[10:, j]) for j in range(2)]


def test_summarize_an_optimizer_run() -> None:
    space = {"x": {"type": "float", "low": -2, "high": 2}, "y": {"type": "float", "low": -2, "high": 2}}
    # conformalized from 32: no rank test before, so the warm-up is the 15 trials the records skip
    opt = Optimizer(space, seed=0, config={"surrogate": "qgp", "n_candidates": 300, "conformalize_from": 32})

    def f(p):
        return (p["x"] - 0.3) ** 2 + 0.5 * abs(p["y"])

    for _ in range(45):
        s = opt.ask()[0]
        opt.tell(s.params, f(s.params))
    features = opt.space.encode([p for p, _ in opt.observations[15:]])
    out = M.summarize(opt.records, features)
    assert out["n"] == 30 and len(out["coverage"]) == 5
    assert out["nominal"] == pytest.approx([0.9, 0.7, 0.5, 0.3, 0.1])
    assert all(0 <= c <= 1 for c in out["coverage"])
    assert all(w > 0 for w in out["mean_width"])
    assert widths_nested(out["mean_width"])
    assert 0 <= out["rmsce"] <= 1 and len(out["llr"]) == 5
    conf = M.summarize(opt.records, conformal_only=True)
    assert conf["n"] == sum(r["method"] != "raw" for r in opt.records) > 0
    # records agree with themselves: covered is the told value inside each pair's shown interval
    # (the pair's own conformal set, which beta_t and ACI/DtACI refer to), width its length
    for r in opt.records:
        assert r["covered"] == [lo <= r["value"] <= hi for lo, hi in zip(r["lower"], r["upper"], strict=True)]
        assert r["width"] == pytest.approx([hi - lo for lo, hi in zip(r["lower"], r["upper"], strict=True)])
        assert all(a <= b for a, b in zip(r["quantiles"], r["quantiles"][1:], strict=False))
    covered = np.array([r["covered"] for r in opt.records], dtype=float)
    np.testing.assert_allclose(out["coverage"], covered.mean(axis=0))
    np.testing.assert_allclose(out["rolling_coverage_error"],
                               np.abs(covered[:20].mean(axis=0) - out["nominal"]))
    assert [r["value"] for r in opt.records] == [v for _, v in opt.observations[15:]]


def widths_nested(w) -> bool:
    return all(a >= b for a, b in zip(w, w[1:], strict=False))
