"""Errors that name the offending field, so every caller (and the API) can say which."""

from __future__ import annotations


class FieldError(ValueError):
    """Bad input; ``field`` names it (a dotted path such as ``space.lr.low``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SpaceError(FieldError):
    """A search-space definition is invalid."""


class ParamError(FieldError):
    """A configuration or told value does not belong to the space."""


class ConfigError(FieldError):
    """An engine setting is invalid."""
