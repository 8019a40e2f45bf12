"""Drawing configurations: scrambled Sobol and uniform draws, mutation of the best."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import qmc

if TYPE_CHECKING:
    from .params import Param


class Sampling:
    """:class:`~calibo.engine.space.SearchSpace`'s draws, mixed into it (they read its ``dim``,
    ``params``, ``_conditions`` and ``snap``)."""

    if TYPE_CHECKING:  # what SearchSpace provides
        @property
        def dim(self) -> int: ...
        @property
        def params(self) -> tuple[Param, ...]: ...
        @property
        def _optional(self) -> bool: ...
        def snap(self, u: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray: ...

    def sample(self, n: int, seed: int | np.random.Generator, *, skip: int = 0) -> np.ndarray:
        """``n`` scrambled-Sobol points (snapped unit rows), after ``skip`` earlier draws.

        The same (seed, skip + n) gives the same prefix, so a warm start can be
        drawn one point at a time and stay one low-discrepancy sequence.
        """
        if n <= 0:
            return np.empty((0, self.dim))
        sampler = qmc.Sobol(self.dim, scramble=True, seed=seed)
        if skip:
            sampler.fast_forward(skip)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # balance needs powers of two; prefixes are fine
            return self.snap(sampler.random(n))  # every coordinate drawn: the conditions keep what is active

    def sample_uniform(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.snap(rng.random((n, self.dim)))

    def mutate(
        self,
        parents: np.ndarray,
        n: int,
        rng: np.random.Generator,
        *,
        scale: float = 0.1,
    ) -> np.ndarray:
        """``n`` mutations of snapped unit rows ``parents`` (chosen round-robin).

        Numeric and ordinal coordinates move by Gaussian noise of sd ``scale``
        (reflected into [0, 1]); a categorical switches to another choice.
        Each coordinate mutates with probability 1/2, and at least one does.
        """
        parents = np.atleast_2d(parents)
        if n <= 0 or parents.shape[0] == 0:
            return np.empty((0, self.dim))
        base = parents[np.arange(n) % parents.shape[0]]
        child = base.copy()
        mask = rng.random(child.shape) < 0.5
        none = ~mask.any(axis=1)
        mask[none, rng.integers(0, self.dim, none.sum())] = True
        if self._optional:  # only active coordinates move; an inactive one stays INACTIVE (snap draws a grown one)
            mask &= base >= 0
        for j, p in enumerate(self.params):
            m = mask[:, j]
            if p.type == "categorical":
                k = len(p.choices)
                if k < 2:
                    continue
                cur = p.from_unit(child[m, j]).astype(int)
                child[m, j] = p.to_unit((cur + rng.integers(1, k, m.sum())) % k)
            else:
                x = child[m, j] + rng.normal(0.0, scale, m.sum())
                x = np.abs(x)
                x = 1.0 - np.abs(1.0 - x)  # reflect into [0, 1]
                child[m, j] = np.clip(x, 0.0, 1.0)
        return self.snap(child, rng)  # a parameter a moved parent switches on gets a fresh draw
