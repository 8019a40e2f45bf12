"""Growing a study's space: new parameters, new choices, wider ranges, a condition met more often.

A study's trials keep the values they were told, so a space may only grow in ways under which every
told configuration keeps its meaning:

* **a new parameter** (any type, conditional or not; its parent may be new too): appended to the
  space and marked ``grown``. The trials told before lack it: it is *inactive* for them, encoded as a
  conditional parameter whose condition does not hold (``INACTIVE`` in the unit row, its activity
  indicator off, an all-zero one-hot block), so the surrogate tells them apart from the trials that
  hold it without inventing a value for them. Every configuration asked afterwards holds it where
  it is active.
* **a new choice** of a categorical (appended after the existing ones) or an ordinal (anywhere,
  the existing choices keeping their order).
* **a wider range** of a float or int (``low`` lower, ``high`` higher; same scale): the told values
  stay inside it, and the unit coordinates are recomputed from the values at the next fit.
* **a condition met more often**: the same parent, more of its values. The trials told with the
  new parent values lack the parameter, so it becomes ``grown`` too.

Anything else (removing a parameter or a choice, narrowing a range, changing a type, a scale or a
condition's parent, making a parameter conditional) would change what a told trial means: a
``SpaceError`` naming the field (``space.<name>.<key>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import SpaceError
from .params import Param, choice_key

ONLY_GROWTH = "only growth is accepted (new parameters and choices, wider ranges, a condition's new values)"


def grown_specs(params: Sequence[Param], changes: Any) -> dict[str, Any]:
    """The definition of the space of ``params`` grown by ``changes``: ``{name: parameter}``, each a new
    parameter or an existing one's whole new definition (a parameter left out is unchanged; the same
    definition changes nothing). ``SpaceError`` naming the field for anything but growth; the caller
    builds the space (its bounds, the conditions' parents and values, no cycles)."""
    if not isinstance(changes, dict) or not changes:
        raise SpaceError("space", "must name at least one parameter, with its new definition")
    old = {p.name: p for p in params}
    specs = {p.name: p.to_dict() for p in params}
    for name, spec in changes.items():
        where = f"space.{name}"
        if spec is None:
            if name in old:
                raise SpaceError(where, f"a parameter cannot be removed: the study's trials hold it; {ONLY_GROWTH}")
            raise SpaceError(where, "not a parameter of the space (null would remove one)")
        new = Param.from_dict(name, spec)
        if name not in old:
            specs[name] = {**new.to_dict(), "grown": True}
        else:
            specs[name] = _grown(old[name], new, where).to_dict()
    return specs


def _grown(old: Param, new: Param, where: str) -> Param:
    """``old`` as ``new`` defines it, when that is growth."""
    if new.type != old.type:
        raise SpaceError(f"{where}.type", f"cannot change from {old.type} to {new.type}: the trials hold "
                                          f"{old.type} values; {ONLY_GROWTH}")
    low, high, choices = old.low, old.high, old.choices
    if old.type in ("float", "int"):
        if new.log != old.log:
            raise SpaceError(f"{where}.log", f"cannot change the scale (log is {str(old.log).lower()})")
        if new.low > old.low:  # type: ignore[operator]  # a float or int parameter has both bounds
            raise SpaceError(f"{where}.low", f"cannot narrow the range: low is {old.low}, trials may hold it; "
                                             f"{ONLY_GROWTH}")
        if new.high < old.high:  # type: ignore[operator]  # a float or int parameter has both bounds
            raise SpaceError(f"{where}.high", f"cannot narrow the range: high is {old.high}, trials may hold "
                                              f"it; {ONLY_GROWTH}")
        low, high = new.low, new.high
    else:
        have = {choice_key(c) for c in new.choices}
        gone = [c for c in old.choices if choice_key(c) not in have]
        if gone:
            raise SpaceError(f"{where}.choices", f"cannot remove the choice {gone[0]!r}: trials may hold it; "
                                                 f"give every existing choice, and the new ones")
        if old.type == "categorical":  # the existing choices first, as they were: new ones after
            known = {choice_key(c) for c in old.choices}
            choices = old.choices + tuple(c for c in new.choices if choice_key(c) not in known)
        else:
            at = {choice_key(c): i for i, c in enumerate(new.choices)}
            order = [at[choice_key(c)] for c in old.choices]
            if order != sorted(order):
                raise SpaceError(f"{where}.choices", f"an ordinal's existing choices keep their order "
                                                     f"{list(old.choices)!r}; new ones may go anywhere")
            choices = new.choices
    condition, grown = old.condition, old.grown
    if old.condition is None and new.condition is not None:
        raise SpaceError(f"{where}.condition", "cannot make a parameter conditional: trials hold it under "
                                               f"every value of {new.condition[0]!r}; {ONLY_GROWTH}")
    if old.condition is not None:
        parent, values = old.condition
        if new.condition is None:
            raise SpaceError(f"{where}.condition", f"give the condition as it is (parent {parent!r}): a condition "
                                                   "may gain values, not go")
        if new.condition[0] != parent:
            raise SpaceError(f"{where}.condition.parent", f"cannot change the parent {parent!r}")
        keys = {choice_key(v) for v in new.condition[1]}
        gone = [v for v in values if choice_key(v) not in keys]
        if gone:
            raise SpaceError(f"{where}.condition.values", f"cannot remove the value {gone[0]!r}: trials hold "
                                                          f"the parameter under it")
        known = {choice_key(v) for v in values}
        more = tuple(v for v in new.condition[1] if choice_key(v) not in known)
        if more:  # the trials told under the new values lack it
            condition, grown = (parent, values + more), True
    return Param(old.name, old.type, low, high, old.log, choices, condition, grown)
