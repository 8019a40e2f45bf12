"""Candidate sets: scrambled Sobol points plus mutations of the current top-k.

Rows are snapped unit rows of the space; duplicates and observed
configurations are removed, so a candidate is never an observed configuration.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from .space import SearchSpace

MUTATION_SCALES = (0.02, 0.05, 0.1, 0.2)


def candidate_set(
    space: SearchSpace,
    observed_unit: np.ndarray,
    observed_y: np.ndarray,
    rng: np.random.Generator,
    *,
    n_candidates: int = 2000,
    top_k: int = 5,
    mutation_fraction: float = 0.5,
) -> np.ndarray:
    """``n_candidates`` (or fewer, if the space is small) distinct unseen configurations.

    ``observed_y`` is in the minimise orientation; the ``top_k`` lowest are the
    parents of the mutations, spread over several step sizes.
    """
    n_mut = int(round(n_candidates * mutation_fraction)) if len(observed_y) else 0
    n_mut = min(n_mut, n_candidates)
    sobol = space.sample(n_candidates - n_mut, int(rng.integers(2**31)))
    parts = [sobol]
    if n_mut:
        parents = observed_unit[np.argsort(observed_y, kind="stable")[:top_k]]
        per = np.array_split(np.arange(n_mut), len(MUTATION_SCALES))
        for scale, idx in zip(MUTATION_SCALES, per, strict=True):
            parts.append(space.mutate(parents, len(idx), rng, scale=scale))
    cand = np.vstack(parts)
    seen = set(space.keys(observed_unit)) if len(observed_unit) else set()
    keep, keys = [], set()
    for i, k in enumerate(space.keys(cand)):
        if k not in seen and k not in keys:
            keys.add(k)
            keep.append(i)
    cand = cand[keep]
    if cand.shape[0] < n_candidates // 2:
        # small discrete space: top up with uniform draws until it is covered
        extra = space.sample_uniform(4 * n_candidates, rng)
        more = []
        for i, k in enumerate(space.keys(extra)):
            if k not in seen and k not in keys:
                keys.add(k)
                more.append(i)
                if cand.shape[0] + len(more) >= n_candidates:
                    break
        cand = np.vstack([cand, extra[more]])
    return cand


# Float coordinates move by these unit-cube steps, the largest first; a start whose neighbours do not
# improve halves to the next, and stops after the last.
LOCAL_STEPS = (0.1, 0.05, 0.02, 0.01, 0.005, 0.002)


def neighbours(space: SearchSpace, x: np.ndarray, step: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The snapped one-coordinate moves of unit rows ``x`` (one row, or a batch with a step each): a
    float by +-``step``, or onto its bound where the step would pass it; an int or ordinal to the
    adjacent value (the next bin, whatever ``step``); a categorical to each other choice. A coordinate
    at INACTIVE (a conditional parameter switched off) does not move: snapped, any move of it is its
    row again. Returns ``(rows, owner)``: the moves and the row each moved."""
    x = np.atleast_2d(x)
    step = np.broadcast_to(np.asarray(step, dtype=float), (x.shape[0],))
    rows, owners = [], []
    for j, p in enumerate(space.params):
        col = x[:, j]
        on = col >= 0.0
        if p.type == "categorical":
            cur = p.from_unit(col).astype(int)
            for c in range(len(p.choices)):
                moved = np.flatnonzero(on & (cur != c))
                if moved.size:
                    y = x[moved].copy()
                    y[:, j] = p.to_unit(np.array([c], dtype=float))[0]
                    rows.append(y)
                    owners.append(moved)
            continue
        if p.type == "float":  # a step past a bound stops on it (a projected step), as a bounded
            # optimizer's does: optima of tuning spaces often lie on a face of the box (all features,
            # no penalty), and a move that overshoots one would otherwise never reach it
            targets = [np.maximum(col - step, 0.0), np.minimum(col + step, 1.0)]
            valid = [on & (t != col) for t in targets]
        else:  # int / ordinal: the values either side
            v = p.from_unit(col)
            lo, hi = (0, len(p.choices) - 1) if p.type == "ordinal" else (p.low, p.high)
            targets, valid = [], []
            for w in (v - 1, v + 1):
                targets.append(p.to_unit(np.clip(w, lo, hi)))
                valid.append(on & (w >= lo) & (w <= hi))
        for t, ok in zip(targets, valid, strict=True):
            moved = np.flatnonzero(ok)
            if moved.size:
                y = x[moved].copy()
                y[:, j] = t[moved]
                rows.append(y)
                owners.append(moved)
    if not rows:
        return np.empty((0, space.dim)), np.empty(0, dtype=int)
    return space.snap(np.vstack(rows)), np.concatenate(owners)


def local_search(space: SearchSpace, score: Callable[[np.ndarray], ArrayLike], starts: np.ndarray, *,
                 max_iter: int = 20) -> np.ndarray:
    """Greedy coordinate descent of ``score`` (unit rows -> lower-is-better values) from each start.

    Each round scores every active start's neighbours in one call and moves each start to its best
    neighbour if that improves on it; a start that cannot improve shrinks its float step (``LOCAL_STEPS``)
    and stops after the smallest. Returns the points the starts ended on (snapped unit rows).
    """
    cur = np.atleast_2d(starts).copy()
    if cur.shape[0] == 0:
        return cur
    cur_score = np.asarray(score(cur), dtype=float)
    level = np.zeros(len(cur), dtype=int)
    for _ in range(max_iter):
        active = np.flatnonzero(level < len(LOCAL_STEPS))
        if active.size == 0:
            break
        rows, owner = neighbours(space, cur[active], np.asarray(LOCAL_STEPS)[level[active]])
        sc = np.asarray(score(rows), dtype=float) if rows.shape[0] else np.empty(0)
        for k, i in enumerate(active):
            mine = np.flatnonzero(owner == k)
            if mine.size == 0:
                level[i] = len(LOCAL_STEPS)
                continue
            b = mine[int(np.argmin(sc[mine]))]
            if sc[b] < cur_score[i] - 1e-12 * (1.0 + abs(cur_score[i])):
                cur[i], cur_score[i] = rows[b], sc[b]
            else:
                level[i] += 1
    return cur
