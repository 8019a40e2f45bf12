"""The vectorised multi-objective scoring (``engine.multi``) against plain reference computations: the
Pareto mask by its definition (2 objectives by one sort, 3-4 in lexicographic order), ParEGO's screened expectation
against the full one, the hypervolume improvement of a point as a gain in hypervolume and as
the sum over the front's staircase segments, the gap over every front point, and the Monte Carlo
EHVI scores and select's choice against the segment-by-segment reference on seeded snapshots."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calibo.engine import Optimizer, multi
from calibo.engine.select import select

LEVELS = np.linspace(0.05, 0.95, 10)


# ------------------------------------------------------------------ references
def mask_by_definition(Y: np.ndarray) -> np.ndarray:
    """Dropped: a point another dominates, or one an earlier point equals."""
    le = np.all(Y[:, None, :] <= Y[None, :, :], axis=2)  # le[j, i]: Y_j <= Y_i everywhere
    lt = np.any(Y[:, None, :] < Y[None, :, :], axis=2)
    earlier = np.arange(len(Y))[:, None] < np.arange(len(Y))[None, :]
    return ~np.any(le & (lt | earlier), axis=0)


def hvi_by_segments(front: np.ndarray, ref: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Every staircase segment's rectangle above (a, b), summed (the per-segment computation)."""
    R1, R2 = float(ref[0]), float(ref[1])
    F = front[np.all(front < ref, axis=1)]
    F = F[mask_by_definition(F)]
    F = F[np.argsort(F[:, 0])]
    rights = np.concatenate([F[:, 0], [R1]])
    heights = np.concatenate([[R2], F[:, 1]])
    lefts = np.concatenate([[-np.inf], F[:, 0]])
    a, b = np.asarray(a, float)[..., None], np.asarray(b, float)[..., None]
    width = np.maximum(np.minimum(rights, R1) - np.maximum(lefts, a), 0.0)
    return np.sum(width * np.maximum(heights - b, 0.0), axis=-1)


def gap_by_pairs(med: np.ndarray, front: np.ndarray) -> np.ndarray:
    return np.maximum(np.min(np.max(med[:, None, :] - front[None, :, :], axis=2), axis=1), 0.0)


def scores_reference(Qs, levels, front, ref, u) -> np.ndarray:
    """``multi.scores("ehvi", ...)`` computed with the references above."""
    lv = np.asarray(levels, float)
    mid = np.stack([Q[:, lv.size // 2 - 1: lv.size // 2 + 1].mean(axis=1) for Q in Qs], axis=1)
    out = multi.FLOOR + gap_by_pairs(mid, front)
    opt = hvi_by_segments(front, ref, Qs[0][:, 0], Qs[1][:, 0])
    take = np.argsort(-opt, kind="stable")[: multi.SCREEN]
    take = take[opt[take] > 0] if (opt > 0).any() else take
    draws = [multi.sample(Q[take], lv, u[j]) for j, Q in enumerate(Qs)]
    e = hvi_by_segments(front, ref, draws[0], draws[1]).mean(axis=1)
    out[take[e > 0]] = -np.log(e[e > 0])
    return out


def random_front(rng: np.random.Generator, n: int, grid: bool) -> np.ndarray:
    if grid:  # ties in either objective, equal points, dominated points
        return rng.integers(0, 6, size=(n, 2)).astype(float) / 5.0
    t = np.sort(rng.random(n))
    return np.stack([t, (1 - t) ** rng.uniform(0.5, 2.0)], axis=1) + 0.05 * rng.random((n, 2))


# ------------------------------------------------------------------ pieces
@pytest.mark.parametrize("grid", [False, True])
def test_two_objective_pareto_mask_is_the_definition(grid: bool) -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 40, 300):
        Y = random_front(rng, n, grid) if n % 2 else rng.random((n, 2))
        np.testing.assert_array_equal(multi.pareto_mask(Y), mask_by_definition(Y))
    Y = np.array([[1.0, 1.0], [1.0, 1.0], [0.5, 2.0], [1.0, 1.0]])  # equal points: the first is kept
    assert multi.pareto_mask(Y).tolist() == [True, False, True, False]
    assert multi.pareto_mask(np.empty((0, 2))).shape == (0,)


@pytest.mark.parametrize("m", [3, 4])
def test_pareto_mask_of_several_objectives_is_the_definition_and_the_loop(m: int) -> None:
    rng = np.random.default_rng(m)
    for n in (1, 2, 9, 255, 256, 257, 700):  # across the block boundary
        grid = n % 2
        Y = rng.integers(0, 4, size=(n, m)).astype(float) if grid else rng.random((n, m))
        want = mask_by_definition(Y)
        np.testing.assert_array_equal(multi.pareto_mask(Y), want)
        np.testing.assert_array_equal(multi.pareto_mask_pairwise(Y), want)
    assert multi.pareto_mask(np.empty((0, m))).shape == (0,)


@pytest.mark.parametrize("grid", [False, True])
def test_hvi_2d_is_the_gain_in_hypervolume_and_the_staircase_sum(grid: bool) -> None:
    rng = np.random.default_rng(4)
    for n in (0, 1, 5, 30):
        front = random_front(rng, n, grid) if n else np.empty((0, 2))
        ref = np.array([1.1, 1.2]) if not grid else np.array([0.8, 1.0])  # some front points beyond it
        pts = (rng.integers(-1, 7, size=(300, 2)) / 5.0) if grid else rng.uniform(-0.2, 1.4, size=(300, 2))
        if n:  # exactly on the front's corners and edges too
            pts = np.vstack([pts, front, front - [0.0, 0.01], front - [0.01, 0.0]])
        gain = multi.hvi_2d(front, ref, pts[:, 0], pts[:, 1])
        base = multi.hypervolume(front, ref)
        want = [multi.hypervolume(np.vstack([front, p]), ref) - base for p in pts]
        np.testing.assert_allclose(gain, want, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gain, hvi_by_segments(front, ref, pts[:, 0], pts[:, 1]), rtol=1e-12,
                                   atol=1e-15)
        assert np.all(gain >= 0) and np.array_equal(gain > 0, np.array(want) > 1e-15)
    # any shape of draws
    front = random_front(rng, 9, False)
    a, b = rng.random((4, 5, 6)), rng.random((4, 5, 6))
    np.testing.assert_allclose(multi.hvi_2d(front, np.array([1.1, 1.1]), a, b),
                               hvi_by_segments(front, np.array([1.1, 1.1]), a, b), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("grid", [False, True])
def test_hvi_3d_is_the_gain_in_hypervolume(grid: bool) -> None:
    """Three objectives, slab by slab: the gain of every point equals moocore's hypervolume with the
    point minus without it; ties in every objective, dominated points, points beyond the reference."""
    moocore = pytest.importorskip("moocore")
    rng = np.random.default_rng(6)

    def hv(Y: np.ndarray, ref: np.ndarray) -> float:
        Y = Y[np.all(Y < ref, axis=1)]
        return float(moocore.hypervolume(Y, ref=ref)) if len(Y) else 0.0

    for n in (0, 1, 4, 25, 70):
        front = (rng.integers(0, 5, size=(n, 3)) / 4.0) if grid else rng.random((n, 3)) ** 0.5
        ref = np.array([1.1, 1.2, 1.05]) if not grid else np.array([0.8, 1.0, 1.1])
        pts = (rng.integers(-1, 6, size=(200, 3)) / 4.0) if grid else rng.uniform(-0.2, 1.3, size=(200, 3))
        if n:  # on the front's points, and just before them in one objective
            pts = np.vstack([pts, front, front - [0.0, 0.0, 0.01], front - [0.01, 0.0, 0.0]])
        gain = multi.hvi_3d(front, ref, pts[:, 0], pts[:, 1], pts[:, 2])
        base = hv(front, ref)
        want = np.array([hv(np.vstack([front, p]), ref) - base for p in pts])
        np.testing.assert_allclose(gain, want, rtol=1e-9, atol=1e-12)
        assert np.all(gain >= 0)
    a, b, c = (rng.random((4, 5, 6)) for _ in range(3))  # any shape of draws
    flat = multi.hvi_3d(front, ref, a.ravel(), b.ravel(), c.ravel())
    np.testing.assert_array_equal(multi.hvi_3d(front, ref, a, b, c), flat.reshape(a.shape))


@pytest.mark.parametrize("grid", [False, True])
def test_gap_is_the_smallest_over_every_front_point(grid: bool) -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 10, 60):
        Y = random_front(rng, n, grid)
        front = Y[multi.pareto_mask(Y)]
        med = rng.uniform(-0.3, 1.5, size=(500, 2))
        med = np.vstack([med, front, front + 0.01])  # on the front and just behind it
        np.testing.assert_array_equal(multi._gap(med, front), gap_by_pairs(med, front))
        np.testing.assert_array_equal(multi._gap(med, Y), gap_by_pairs(med, Y))  # dominated points too


# ------------------------------------------------------------------ scores and choices
@pytest.mark.parametrize("seed", range(8))
def test_ehvi_scores_and_their_argmin_match_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    N = int(rng.integers(300, 2500))
    front = random_front(rng, int(rng.integers(3, 60)), seed % 3 == 0)
    front = front[multi.pareto_mask(front)]
    ref = np.max(front, axis=0) + 0.1
    centres = rng.uniform(-0.1, 1.2, size=(N, 2))
    widths = rng.uniform(0.005, 0.3, size=(N, 2))
    z = (LEVELS - 0.5)[None, :]
    Qs = [centres[:, j, None] + widths[:, j, None] * z * rng.uniform(0.5, 1.5, size=(N, 1)) for j in range(2)]
    u = multi.uniforms(2, np.random.default_rng([seed, 17]))
    got = multi.scores("ehvi", Qs, LEVELS, front, ref, u)
    want = scores_reference(Qs, LEVELS, front, ref, u)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert int(np.argmin(got)) == int(np.argmin(want))
    np.testing.assert_array_equal(np.argsort(got, kind="stable")[:10], np.argsort(want, kind="stable")[:10])


def zdt1(x: np.ndarray) -> list[float]:
    g = 1.0 + 9.0 * x[1:].mean()
    return [float(x[0]), float(g * (1.0 - math.sqrt(x[0] / g)))]


@pytest.mark.parametrize("seed", [0, 1])
def test_select_chooses_what_the_reference_scoring_chooses(seed: int, monkeypatch) -> None:
    space = {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(4)}
    opt = Optimizer(space, directions=["minimize", "minimize"], seed=seed)
    rng = np.random.default_rng(seed)
    for i in range(80):
        x = rng.random(4)
        if i % 2:
            x[1:] *= rng.random() ** 3
        opt.tell({f"x{j}": float(x[j]) for j in range(4)}, zdt1(x))
    snap = opt.snapshot
    observed = [p for p, _ in opt.observations]

    def choose(pending, count):
        out = select(snap, opt.state, opt.space, opt.config, count=count, direction="minimize",
                     asked=len(observed), exclude=observed, pending=pending, n_observed=len(observed))
        return [(s.params, s.prediction.score) for s in out]

    fast = {"idle": choose([], 3)}  # a batch: each choice conditioned on the ones before (the believer)
    crowd = [p for p, _ in fast["idle"]]
    fast["crowd"] = choose(crowd, 3)  # and on three running points

    def reference(kind, Qs, levels, front, ref, u, weights=None, incumbent=None):
        assert kind == "ehvi"
        return scores_reference(Qs, levels, front, ref, u)

    monkeypatch.setattr(multi, "scores", reference)
    slow = {"idle": choose([], 3), "crowd": choose(crowd, 3)}
    for k in fast:
        assert [p for p, _ in fast[k]] == [p for p, _ in slow[k]]
        for (_, a), (_, b) in zip(fast[k], slow[k], strict=True):
            assert a == pytest.approx(b, rel=1e-9)


# ------------------------------------------------------------------ ParEGO (3-4 objectives)
def parego_unscreened(Qs, levels, u, weights, incumbent) -> np.ndarray:
    """``multi.scores("parego", ...)`` with the Monte Carlo expectation for every candidate."""
    lv = np.asarray(levels, float)
    mid = np.stack([Q[:, lv.size // 2 - 1: lv.size // 2 + 1].mean(axis=1) for Q in Qs], axis=1)
    out = multi.FLOOR + np.maximum(multi.chebyshev(mid, weights) - incumbent, 0.0)
    e = multi.parego([multi.sample(Q, lv, u[j]) for j, Q in enumerate(Qs)], incumbent, weights)
    out[e > 0] = -np.log(e[e > 0])
    return out


@pytest.mark.parametrize("seed", range(8))
def test_parego_screening_keeps_the_choice_of_the_full_expectation(seed: int) -> None:
    """ParEGO computes its Monte Carlo expectation only for the SCREEN candidates with the best
    optimistic corner: their scores are the full computation's, and the choice is the same."""
    rng = np.random.default_rng(seed)
    m, N = 3 + seed % 2, int(rng.integers(1000, 2500))
    Y = rng.random((60, m))
    front = Y[multi.pareto_mask(Y)]
    w = multi.simplex_weights(m, rng)
    inc = float(multi.chebyshev(front, w).min())
    centres = rng.uniform(0.0, 1.0, size=(N, m))
    z = (LEVELS - 0.5)[None, :]
    Qs = [centres[:, j, None] + rng.uniform(0.01, 0.4, size=(N, 1)) * z for j in range(m)]
    u = multi.uniforms(m, np.random.default_rng([seed, 17]))
    got = multi.scores("parego", Qs, LEVELS, front, np.ones(m) * 1.1, u, weights=w, incumbent=inc)
    want = parego_unscreened(Qs, LEVELS, u, w, inc)
    improving = got < multi.FLOOR
    assert 0 < improving.sum() <= multi.SCREEN < N
    np.testing.assert_allclose(got[improving], want[improving], rtol=1e-12)
    assert int(np.argmin(got)) == int(np.argmin(want))
