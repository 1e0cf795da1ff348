"""Value checks with OpenAI-style messages, shared by the chat validator modules.

``check(value, schema, param)`` validates one value against its JSON Schema (from the
spec) and raises ``InvalidChatParameter`` naming the field in OpenAI's manner
(``messages.[0].content``), or ``UnsupportedChatParameter`` for a key an object refuses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema.exceptions import ValidationError

from generated.errors import InvalidChatParameter, UnsupportedChatParameter
from runtime.contract.schema_check import SchemaCheck

_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a decimal",
    "boolean": "a boolean",
    "object": "an object",
    "array": "an array",
    "null": "null",
}
_VALIDATORS: dict[str, SchemaCheck] = {}


def type_word(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def join_param(base: str, *parts: str | int) -> str:
    out = base
    for part in parts:
        step = f"[{part}]" if isinstance(part, int) else str(part)
        out = f"{out}.{step}" if out else step
    return out


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values (so True is not 1 and 1.0 is 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def wrong_type(param: str, expected: str, value: Any) -> str:
    """OpenAI's message for a field of the wrong type (``expected``: "an object", ...)."""
    return f"Invalid type for '{param}': expected {expected}, but got {type_word(value)} instead."


def kind_of(value: Any, param: str, allowed: Iterable[str], refused: Mapping[str, str]) -> str:
    """The ``type`` of an object that must be one of ``allowed``: a type in ``refused`` is
    UnsupportedChatParameter with its reason, any other InvalidChatParameter naming the
    supported values (OpenAI's wording)."""
    if not isinstance(value, dict):
        raise InvalidChatParameter(detail=wrong_type(param, "an object", value), param=param)
    kind = value.get("type")
    where = join_param(param, "type")
    if isinstance(kind, str) and kind in refused:  # a list or object: not a key
        raise UnsupportedChatParameter(key=f"{where} {kind}", reason=refused[kind], param=where)
    names = list(allowed)
    if kind not in names:
        values = ", ".join(f"'{t}'" for t in names)
        raise InvalidChatParameter(
            detail=f"Invalid value for '{where}': {kind!r}. Supported values are: {values}.",
            param=where,
        )
    return str(kind)


def _validator(schema: dict[str, Any]) -> SchemaCheck:
    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = SchemaCheck(schema)
    return _VALIDATORS[key]


def _detail(error: ValidationError, param: str) -> str:
    # jsonschema types these as "Any | Unset"; a reported error always has them set.
    kw: Any = error.validator
    arg: Any = error.validator_value
    inst: Any = error.instance
    number = "integer" if isinstance(inst, int) else "decimal"
    if kw == "type":
        wanted = arg if isinstance(arg, list) else [arg]
        words = " or ".join(_TYPE_WORDS.get(t, str(t)) for t in wanted if t != "null")
        return wrong_type(param, words, inst)
    if kw in ("minimum", "exclusiveMinimum"):
        return (
            f"Invalid '{param}': {number} below minimum value. "
            f"Expected a value >= {arg}, but got {inst} instead."
        )
    if kw in ("maximum", "exclusiveMaximum"):
        return (
            f"Invalid '{param}': {number} above maximum value. "
            f"Expected a value <= {arg}, but got {inst} instead."
        )
    if kw == "enum":
        values = ", ".join(f"'{v}'" for v in arg)
        return f"Invalid value for '{param}': {inst!r}. Supported values are: {values}."
    if kw == "const":
        return f"Invalid value for '{param}': {inst!r}. Expected {arg!r}."
    if kw in ("minItems", "maxItems"):
        side, bound = ("short", "minimum") if kw == "minItems" else ("long", "maximum")
        return (
            f"Invalid '{param}': array too {side}. Expected an array with {bound} length "
            f"{arg}, but got an array with length {len(inst)} instead."
        )
    if kw in ("minLength", "maxLength"):
        side, bound = ("short", "minimum") if kw == "minLength" else ("long", "maximum")
        return (
            f"Invalid '{param}': string too {side}. Expected a string with {bound} length "
            f"{arg}, but got a string with length {len(inst)} instead."
        )
    if kw == "pattern":
        return (
            f"Invalid '{param}': string does not match pattern. "
            f"Expected a string that matches the pattern '{arg}'."
        )
    if kw == "required":
        missing = next(k for k in arg if k not in inst)
        return f"Missing required parameter: '{join_param(param, missing)}'."
    if kw == "uniqueItems":
        return f"Invalid '{param}': array items must be unique."
    return f"Invalid value for '{param}': {error.message}."


def check(value: Any, schema: dict[str, Any], param: str) -> None:
    """Raise the error of the deepest failure of ``value`` against ``schema``."""
    error = _validator(schema).error(value)
    if error is None:
        return
    where = join_param(param, *error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        schema_at: Any = error.schema  # a reported error's schema is its (object) subschema
        allowed = schema_at.get("properties", {})
        extra = next(k for k in error.instance if k not in allowed)
        raise UnsupportedChatParameter(
            key=join_param(where, extra),
            reason=f"Unrecognized request argument supplied: {extra}",
            param=join_param(where, extra),
        )
    raise InvalidChatParameter(detail=_detail(error, where), param=where)
