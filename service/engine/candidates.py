"""Candidate sets: scrambled Sobol points plus mutations of the current top-k.

Rows are snapped unit rows of the space; duplicates and observed
configurations are removed, so a candidate is never an observed configuration.
"""

from __future__ import annotations

import numpy as np

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
