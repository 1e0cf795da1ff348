"""A JSON Schema check with a compiled fast path, whose refusals are jsonschema's.

``SchemaCheck(schema).error(value)`` is None for a valid value, else jsonschema's
``best_match`` error. jsonschema-rs, compiled and far faster (docs/performance.md), checks
first; only a value it does not pass or cannot take (an integer beyond 64 bits) goes to
jsonschema, whose verdict stands. So every refusal and its wording is jsonschema's, and the
common valid value passes sooner. Both check Draft 2020-12 without format assertions.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import best_match


class SchemaCheck:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.validator = Draft202012Validator(schema)
        self._fast = jsonschema_rs.Draft202012Validator(schema, offline=True)

    def passes(self, value: Any) -> bool:
        """Whether jsonschema-rs passes ``value`` (False when it cannot take it)."""
        try:
            return bool(self._fast.is_valid(value))
        except (ValueError, TypeError, OverflowError):
            return False

    def error(self, value: Any) -> ValidationError | None:
        if self.passes(value):
            return None
        found: ValidationError | None = best_match(self.validator.iter_errors(value))
        return found
