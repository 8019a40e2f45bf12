"""User attributes: free-form JSON a study or trial carries, checked so that what is stored can be read back.

The API validates them once, in its schemas (``calibo.server.api.schemas.UserAttrs`` runs
``storable_attrs``), before a request reaches the study service. A value is
accepted only if every backend stores it and gives it back unchanged: strings and keys
without NUL (PostgreSQL refuses it in text and JSON) or unpaired UTF-16 surrogates (not
encodable as UTF-8, so no response could carry them), finite numbers (JSON has no NaN
or infinity; -0.0 is kept as 0.0, which SQLite cannot tell apart), nesting at most ``MAX_DEPTH``
deep and at most ``MAX_USER_ATTRS_BYTES`` as compact JSON.

``change_study_attrs`` sets and deletes a study's attributes after creation (PATCH
``/v1/studies/{study}/user_attrs``, and ``.../system_attrs`` for the attributes an Optuna storage keeps
apart from the user's): the merge runs under the study's lock and the result is held
to the same bounds.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from ..errors import InvalidRequest
from ..finite import finite

if TYPE_CHECKING:
    from ..storage import Storage

# A JSON value, and a JSON object such as user attributes (what ``storable_attrs`` admits)
Json: TypeAlias = "str | int | float | bool | None | list[Json] | dict[str, Json]"
JsonObject: TypeAlias = "dict[str, Json]"

MAX_USER_ATTRS_BYTES = 16_384  # a study's or trial's user_attrs, as compact JSON
MAX_USER_ATTRS_KEYS = 64  # keys at the top level
MAX_DEPTH = 32  # nesting of objects and lists inside an attribute value
# a study's system attributes (an Optuna storage's: samplers keep per-trial records there, as
# CaliboSampler does): more keys and bytes than a user's, each change still one request body
SYSTEM_ATTRS_BOUNDS = (100_000, 64 * 1_048_576)


class AttrError(ValueError):
    """Why a user attribute cannot be stored, and where: ``path`` below ``user_attrs`` (dotted)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.reason = message


def text_problem(s: str) -> str | None:
    """Why ``s`` cannot be stored as JSON text on every backend, or None."""
    if "\x00" in s:
        return "must not contain NUL (U+0000)"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"must not contain unpaired surrogates (found U+{ord(s[e.start]):04X})"
    return None


def _walk(v: Any, path: str, depth: int) -> None:
    if isinstance(v, str):
        why = text_problem(v)
        if why is not None:
            raise AttrError(path, why)
    elif isinstance(v, bool) or v is None or isinstance(v, int):
        return
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise AttrError(path, "must be a finite number (JSON has no NaN or infinity)")
    elif isinstance(v, (dict, list)):
        if depth >= MAX_DEPTH:
            raise AttrError(path, f"nests deeper than {MAX_DEPTH} levels")
        items = v.items() if isinstance(v, dict) else enumerate(v)
        for k, x in items:
            if isinstance(v, dict):
                if not isinstance(k, str):
                    raise AttrError(path, "object keys must be strings")
                why = text_problem(k)
                if why is not None:
                    raise AttrError(path, f"key {k.encode('utf-8', 'backslashreplace').decode()!r} {why}")
            _walk(x, f"{path}.{k}" if path else str(k), depth + 1)
    else:
        raise AttrError(path, f"must be plain JSON, not {type(v).__name__}")


def storable_attrs(attrs: Any, max_keys: int = MAX_USER_ATTRS_KEYS, max_bytes: int = MAX_USER_ATTRS_BYTES
                   ) -> JsonObject:
    """``attrs`` if it is a JSON object every backend stores and reads back unchanged; AttrError
    (a ValueError, so pydantic reports it as a validation error) naming the part that is not."""
    if not isinstance(attrs, dict):
        raise AttrError("", "must be a JSON object")
    if len(attrs) > max_keys:
        raise AttrError("", f"at most {max_keys} keys (got {len(attrs)})")
    _walk(attrs, "", 0)
    size = len(json.dumps(attrs, separators=(",", ":"), ensure_ascii=False).encode())
    if size > max_bytes:
        raise AttrError("", f"at most {max_bytes} bytes as JSON (got {size})")
    return cast(JsonObject, finite(attrs))  # -0.0 as 0.0: what every backend reads back


def change_study_attrs(storage: Storage, study_id: int, put: dict[str, Any] | None, drop: list[str] | None,
                       kind: str = "user_attrs") -> JsonObject:
    """Set ``put`` and remove ``drop`` (keys the study lacks are ignored, so a repeated change
    changes nothing) in a study's user attributes, in one locked transaction of ``storage``
    (``Storage.change_study_attrs``: concurrent changes of different keys all land); the attributes
    after. InvalidRequest naming ``delete`` for a key both set and removed, naming ``set`` when the
    result exceeds the bounds of ``storable_attrs`` (keys, bytes); then nothing is stored."""
    put, drop = put or {}, drop or []
    both = sorted(set(put) & set(drop))
    if both:
        raise InvalidRequest(f"{both[0]!r} is both set and deleted", field="delete")

    bounds = SYSTEM_ATTRS_BOUNDS if kind == "system_attrs" else (MAX_USER_ATTRS_KEYS, MAX_USER_ATTRS_BYTES)

    def change(current: dict[str, Any]) -> JsonObject:
        after = {k: v for k, v in current.items() if k not in drop} | put
        try:
            return storable_attrs(after, *bounds)
        except AttrError as e:
            raise InvalidRequest(f"the study's {kind} after this change: {e}", field="set") from None

    return storage.change_study_attrs(study_id, change, kind)
