"""Search spaces: parameter types, encode/decode, sampling, mutation, validation.

Three representations of a configuration:

* **params** - the user's dict, ``{"lr": 0.01, "depth": 6, "booster": "gbtree"}``.
* **unit** - one coordinate per parameter in ``[0, 1]`` (log-scaled where asked;
  categoricals and ordinals by the centre of their choice's bin). Sampling and
  mutation happen here; a unit row is always *snapped*, i.e. it is exactly the
  unit image of a valid configuration, so two rows are equal iff the
  configurations are.
* **features** - the model matrix: numeric and ordinal parameters as their unit
  coordinate, categoricals one-hot.

Conditional parameters. A parameter may carry ``"condition": {"parent": "kernel",
"values": ["rbf", "poly"]}``: it is *active* when its parent is active and takes one
of those values (a categorical, ordinal or int parent; chains nest; a cycle is
refused). A configuration holds exactly its active parameters. In the unit
representation an inactive parameter's coordinate is ``INACTIVE`` (-1, outside the
cube), so a configuration still has exactly one row and one key, and configurations
that differ only in parameters they do not use are the same. The surrogate does not
see an inactive parameter as if a value had been drawn for it (as SMAC's imputation
and ConfigSpace's inactive values do not): an inactive categorical is all zeros in
its one-hot block, and a numeric or ordinal conditional parameter has two features,
its coordinate (the centre of the range when inactive) and an activity indicator, so
configurations that both lack it are equal there and one that has it differs from
one that lacks it by the same amount whatever its value. Sampling, mutation and
the fit-time local search draw every coordinate and then apply the conditions; a
parameter that a mutation activates gets a fresh draw.

Where it lives: ``params`` (one parameter: its types, unit mapping and told values),
``search_space`` (the space: its encodings and the validation of configurations),
``conditions`` (conditional parameters: which are active, in which order) and
``sampling`` (quasi-random and uniform draws, mutation).
"""

from ..errors import ParamError, SpaceError
from .params import INACTIVE, PARAM_TYPES, UNIT_GRID, Param
from .search_space import SearchSpace

__all__ = ["INACTIVE", "PARAM_TYPES", "UNIT_GRID", "Param", "ParamError", "SearchSpace", "SpaceError"]
