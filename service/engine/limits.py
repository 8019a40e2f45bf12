"""Every size and setting the engine accepts, bounded and in one table.

The bounds keep one study from costing the service (or an in-process user)
unbounded time and memory: a snapshot holds ``n_candidates`` rows of
``n_levels`` quantiles (per CV+ fold) and the encoded candidates, select sorts
over them at every ask, and the study view echoes the definition. The API's
wire schemas are generated from the same numbers, so the OpenAPI document says
exactly what is accepted.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from .errors import ConfigError, FieldError

MAX_PARAMS = 128  # parameters in a space
MAX_CHOICES = 1000  # choices of one categorical / ordinal parameter
MAX_FEATURES = 2048  # encoded width: numeric parameters plus every categorical choice (one-hot)
MAX_PARAM_NAME = 128  # characters in a parameter name
MAX_CHOICE_TEXT = 256  # characters in a string choice

# Engine settings: (lowest, highest) accepted, both inclusive unless named below.
# Integers are ints; the others are floats.
SETTING_RANGES: dict[str, tuple[float, float]] = {
    "n_levels": (2, 20),
    "n_warmup": (2, 1000),
    "conformalize_from": (4, 100_000),
    "split_from": (4, 100_000),
    "n_candidates": (1, 10_000),
    "top_k": (1, 100),
    "cv_folds": (2, 10),
    "dtaci_window": (1, 1000),
    "mutation_fraction": (0.0, 1.0),
    "cal_fraction": (0.0, 1.0),  # exclusive at both ends
    "aci_gamma": (0.0, 1.0),  # exclusive at both ends
    "n_bootstraps": (2, 100),
}
OPEN_RANGES = {"cal_fraction": (True, True), "aci_gamma": (True, True)}
INT_SETTINGS = ("n_levels", "n_warmup", "conformalize_from", "split_from", "n_candidates", "top_k",
                "cv_folds", "dtaci_window", "n_bootstraps")

# Options each surrogate takes in ``surrogate_options``: (kind, lowest, highest).
SURROGATE_OPTIONS: dict[str, dict[str, tuple[str, float, float]]] = {
    "qgbm": {"learning_rate": ("float", 1e-4, 1.0), "num_leaves": ("int", 2, 256),
             "n_estimators": ("int", 1, 2000)},
    "qrf": {"n_estimators": ("int", 1, 1000), "min_samples_leaf": ("int", 1, 100),
            "max_features": ("float", 0.01, 1.0)},
    "ql": {"alpha": ("float", 0.0, 10.0)},
    "qgp": {"max_opt_points": ("int", 10, 2000), "exact_up_to": ("int", 100, 100_000),
            "inducing_points": ("int", 16, 4096), "retune_growth": ("float", 0.0, 100.0)},
    "qe": {"k_folds": ("int", 2, 10), "penalty": ("float", 0.0, 1.0)},
    "lw-gbm": {"n_estimators": ("int", 1, 2000), "learning_rate": ("float", 1e-4, 1.0),
               "num_leaves": ("int", 2, 256), "val_fraction": ("float", 0.1, 0.9)},
    "lw-rf": {"n_estimators": ("int", 1, 1000), "min_samples_leaf": ("int", 1, 100),
              "val_fraction": ("float", 0.1, 0.9)},
    "lw-knn": {"n_neighbors": ("int", 1, 100), "val_fraction": ("float", 0.1, 0.9)},
    "mlp-ensemble": {"members": ("int", 1, 64), "hidden": ("int", 4, 1024), "layers": ("int", 1, 6),
                     "epochs": ("int", 10, 5000), "lr": ("float", 1e-5, 1.0),
                     "weight_decay": ("float", 0.0, 1.0)},
    "mlp-quantile": {"hidden": ("int", 4, 1024), "layers": ("int", 1, 6), "epochs": ("int", 10, 5000),
                     "lr": ("float", 1e-5, 1.0), "weight_decay": ("float", 0.0, 1.0)},
    "gp-recal": {"max_opt_points": ("int", 10, 2000), "max_splits": ("int", 4, 2000)},
}
# Options that take one of a few words: {surrogate: {option: choices}}.
SURROGATE_CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "qgp": {"backend": ("auto", "sklearn", "torch"), "prior": ("none", "smooth"), "scores": ("cqr", "normalized")},
    "gp-recal": {"splits": ("loo", "timeseries")},
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def describe(name: str) -> str:
    """The accepted range of a setting, as the docs and error messages show it."""
    lo, hi = SETTING_RANGES[name]
    open_lo, open_hi = OPEN_RANGES.get(name, (False, False))
    kind = "an integer" if name in INT_SETTINGS else "a number"
    return f"must be {kind} in {'(' if open_lo else '['}{lo:g}, {hi:g}{')' if open_hi else ']'}"


def check_setting(name: str, v: Any) -> None:
    """Raise ConfigError unless ``v`` is within ``SETTING_RANGES[name]``."""
    lo, hi = SETTING_RANGES[name]
    open_lo, open_hi = OPEN_RANGES.get(name, (False, False))
    ok = _is_int(v) if name in INT_SETTINGS else _is_real(v)
    if ok:
        ok = (lo < v if open_lo else lo <= v) and (v < hi if open_hi else v <= hi)
    if not ok:
        raise ConfigError(name, describe(name))


def check_surrogate_options(surrogate: str, options: Any) -> dict[str, Any]:
    """The options, checked against what ``surrogate`` takes; raises ConfigError naming the key."""
    if not isinstance(options, dict):
        raise ConfigError("surrogate_options", "must be an object")
    allowed = SURROGATE_OPTIONS.get(surrogate, {})
    choices = SURROGATE_CHOICES.get(surrogate, {})
    for key, v in options.items():
        where = f"surrogate_options.{key}"
        if key in choices:
            if not isinstance(v, str) or v not in choices[key]:
                raise ConfigError(where, f"must be one of {list(choices[key])}")
            continue
        if key not in allowed:
            raise ConfigError(where, f"not an option of surrogate {surrogate!r} "
                                     f"(it takes {sorted(set(allowed) | set(choices)) or 'none'})")
        kind, lo, hi = allowed[key]
        ok = _is_int(v) if kind == "int" else _is_real(v)
        if not ok or not lo <= v <= hi:
            raise ConfigError(where, f"must be {'an integer' if kind == 'int' else 'a number'} "
                                     f"in [{lo:g}, {hi:g}]")
    return dict(options)


def bad_text(s: str) -> str | None:
    """Why ``s`` may not be stored as a name, or None.

    Control characters (NUL among them: PostgreSQL cannot store it in text or
    JSON) and unpaired surrogates (not encodable as UTF-8) are refused.
    """
    for ch in s:
        cat = unicodedata.category(ch)
        if cat == "Cc":
            return f"must not contain control characters (found U+{ord(ch):04X})"
        if cat == "Cs":
            return f"must not contain unpaired surrogates (found U+{ord(ch):04X})"
    return None


def check_text(s: Any, field: str, max_length: int, *, allow_empty: bool = False,
               error: type[FieldError] = FieldError) -> str:
    """``s`` as a storable name: a string of at most ``max_length`` printable characters."""
    if not isinstance(s, str):
        raise error(field, "must be a string")
    if not s and not allow_empty:
        raise error(field, "must not be empty")
    if len(s) > max_length:
        raise error(field, f"must be at most {max_length} characters (got {len(s)})")
    why = bad_text(s)
    if why is not None:
        raise error(field, why)
    return s
