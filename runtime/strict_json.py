"""JSON as RFC 8259 has it: no NaN, no Infinity, no number too large for a float.

Python's json module reads ``NaN`` and ``Infinity`` and turns ``1e999`` into infinity; a
non-finite number kept as kudos or a parameter would later be written out as invalid JSON.
The request bodies of the native API and the front are read with ``loads`` (which refuses
the two literals, as invalid JSON) and checked with ``non_finite`` (a number that overflowed
to infinity, refused as an invalid payload naming its field); both refuse a NUL in any key or
string (``has_nul``), which Postgres text cannot store.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def loads(raw: str | bytes) -> Any:
    """``json.loads`` that raises ValueError on NaN, Infinity and -Infinity."""
    return json.loads(raw, parse_constant=_constant)


def non_finite(value: Any, path: str = "") -> str | None:
    """The path (``params.temperature``, ``messages.[0]``) of the first number that is not
    finite in a parsed body, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "body"
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for key, item in items:
        found = non_finite(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def has_nul(value: Any) -> bool:
    """Whether a NUL character stands in any string or key of a parsed body."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False
