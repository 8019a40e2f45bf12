"""Conditional parameters: which parameters a configuration makes active, and in which order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ParamError, SpaceError
from .params import INACTIVE, PARENT_TYPES, Param, choice_key


class Conditions:
    """:class:`~calibo.engine.space.SearchSpace`'s conditional parameters, mixed into it (they read
    its ``params``, ``names`` and ``_conditions``)."""

    if TYPE_CHECKING:  # what SearchSpace provides
        @property
        def params(self) -> tuple[Param, ...]: ...
        @property
        def names(self) -> list[str]: ...
        @property
        def _conditions(self) -> tuple[tuple[int, int, frozenset[int]], ...]: ...

    def _resolve_conditions(self) -> tuple[tuple[int, int, frozenset[int]], ...]:
        index = {p.name: j for j, p in enumerate(self.params)}
        rules: dict[int, tuple[int, frozenset[int]]] = {}
        for j, p in enumerate(self.params):
            if p.condition is None:
                continue
            parent_name, values = p.condition
            where = f"space.{p.name}.condition"
            if parent_name not in index:
                raise SpaceError(f"{where}.parent", f"{parent_name!r} is not a parameter of the space")
            if parent_name == p.name:
                raise SpaceError(f"{where}.parent", "a parameter cannot be its own parent")
            parent = self.params[index[parent_name]]
            if parent.type not in PARENT_TYPES:
                raise SpaceError(f"{where}.parent", f"a condition tests a {', '.join(PARENT_TYPES)} parameter, "
                                                    f"not {parent.type} {parent_name!r}")
            decoded = set()
            for v in values:
                try:
                    canon = parent.validate(v)
                except ParamError as e:
                    raise SpaceError(f"{where}.values", f"{v!r} is not a value of {parent_name!r}: "
                                                        f"{e.message}") from None
                decoded.add(parent.index_of(canon) if parent.type != "int" else int(canon))
            rules[j] = (index[parent_name], frozenset(decoded))
        order: list[tuple[int, int, frozenset[int]]] = []
        state: dict[int, str] = {}

        def visit(j: int, path: list[int]) -> None:
            if state.get(j) == "done":
                return
            if state.get(j) == "open":
                names = " -> ".join(self.params[k].name for k in [*path, j])
                raise SpaceError(f"space.{self.params[j].name}.condition", f"conditions form a cycle: {names}")
            state[j] = "open"
            if j in rules:
                visit(rules[j][0], [*path, j])
                order.append((j, *rules[j]))
            state[j] = "done"

        for j in rules:
            visit(j, [])
        return tuple(order)

    @property
    def conditional(self) -> bool:
        return bool(self._conditions)

    def active_mask(self, u: np.ndarray) -> np.ndarray:
        """(n, dim) whether each parameter is active in each (snapped) unit row."""
        u = np.atleast_2d(u)
        active = np.ones(u.shape, dtype=bool)
        for j, p in enumerate(self.params):
            if p.grown:  # a row that lacks it (told before it was added)
                active[:, j] = u[:, j] >= 0
        for j, parent, values in self._conditions:
            on = active[:, parent] & np.isin(self.params[parent].decoded(u[:, parent]), list(values))
            active[:, j] = on & active[:, j]
        return active

    def _apply_conditions(self, u: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """Inactive coordinates set to INACTIVE; a parameter switched on that has none gets a draw
        (from ``rng``) or the centre of its range. ``u`` holds snapped coordinates or INACTIVE."""
        if not self._conditions:
            return u
        u = u.copy()
        for j, parent, values in self._conditions:
            p_on = u[:, parent] >= 0
            on = p_on & np.isin(self.params[parent].decoded(np.clip(u[:, parent], 0.0, 1.0)), list(values))
            u[~on, j] = INACTIVE
            fill = on & (u[:, j] < 0)
            if fill.any():
                fresh = rng.random(int(fill.sum())) if rng is not None else np.full(int(fill.sum()), 0.5)
                u[fill, j] = self.params[j].snap(fresh)
        return u

    def _validation_order(self) -> list[Param]:
        """The parameters, each after its parent."""
        if not self._conditions:
            return list(self.params)
        conditional = [j for j, _, _ in self._conditions]
        first = [p for j, p in enumerate(self.params) if j not in conditional]
        return first + [self.params[j] for j in conditional]

    def active_names(self, params: dict[str, Any]) -> list[str]:
        """The parameters active in a (possibly partial) configuration, as far as it decides them."""
        out = []
        present: dict[str, Any] = {}
        for p in self._validation_order():
            if p.condition is not None:
                parent, values = p.condition
                if parent not in present or not any(choice_key(present[parent]) == choice_key(v) for v in values):
                    continue
            out.append(p.name)
            if p.name in params:
                present[p.name] = params[p.name]
        return [n for n in self.names if n in out]
