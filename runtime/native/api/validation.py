"""Checking a request's body and headers against its route in ``generated.routes``.

``validate_body`` and ``validate_headers`` raise the route's HordeError (the body error the
spec names, ``InvalidPayload`` unless it says; a header's own error where it has one) with
a message naming the field (``params.max_length``, ``tools[0]``), so no view spells a body
rule itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from jsonschema import ValidationError

from generated.errors import ERRORS
from generated.routes import HEADERS, ROUTES
from runtime.contract.schema_check import SchemaCheck
from runtime.tables.route_schemas import DEFS


@cache
def _validator(operation_id: str) -> SchemaCheck:
    route = ROUTES[operation_id]
    return SchemaCheck({**(route.body or {}), "$defs": DEFS[route.surface]})


@cache
def _param_validator(operation_id: str, place: str, name: str) -> SchemaCheck:
    route = ROUTES[operation_id]
    params = route.query_params if place == "query" else route.path_params
    return SchemaCheck({**params[name], "$defs": DEFS[route.surface]})


@cache
def _header_validator(surface: str, name: str) -> SchemaCheck:
    return SchemaCheck({**HEADERS[surface][name].schema, "$defs": DEFS[surface]})


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _short(error: ValidationError) -> str:
    kw = error.validator
    v: Any = error.validator_value
    wording = {
        "type": lambda: "must be of type " + (" or ".join(v) if isinstance(v, list) else str(v)),
        "enum": lambda: "must be one of " + ", ".join(map(repr, v)),
        "const": lambda: f"must be {v!r}",
        "minimum": lambda: f"must be at least {v}",
        "maximum": lambda: f"must be at most {v}",
        "exclusiveMinimum": lambda: f"must be more than {v}",
        "exclusiveMaximum": lambda: f"must be less than {v}",
        "minLength": lambda: f"must have at least {v} characters",
        "maxLength": lambda: f"must have at most {v} characters",
        "minItems": lambda: f"must have at least {v} items",
        "maxItems": lambda: f"must have at most {v} items",
        "pattern": lambda: f"must match {v}",
    }
    return wording[kw]() if kw in wording else error.message[:200]


def describe(error: ValidationError) -> tuple[str, str]:
    """(field, problem) of a schema error, the field as ``params.max_length`` or ``tools[0]``."""
    path = ""
    for key in error.absolute_path:
        path = _join(path, key)
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        required: Any = error.validator_value
        missing = [k for k in required if k not in instance]
        return _join(path, missing[0]), "is required"
    if error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(
        instance, dict
    ):
        schema = error.schema
        allowed = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        extra = sorted(k for k in instance if k not in allowed)
        if extra:
            return _join(path, extra[0]), "is not a known field"
    return path or "(body)", _short(error)


def validate_body(operation_id: str, body: Any) -> None:
    """Raise the route's body error (``InvalidPayload`` unless the spec says) on a bad body."""
    route = ROUTES[operation_id]
    if route.body is None:
        return
    error = _validator(operation_id).error(body)
    if error is not None:
        field, problem = describe(error)
        param = None if field == "(body)" else field
        raise ERRORS[route.invalid_body](field=field, problem=problem, param=param)


def validate_headers(operation_id: str, headers: Mapping[str, str]) -> None:
    """Check the route's headers (names matched case-insensitively); raise on a bad one."""
    route = ROUTES[operation_id]
    sent = {k.lower(): v for k, v in headers.items()}
    for name in route.headers:
        spec = HEADERS[route.surface][name]
        code = spec.invalid or route.invalid_body
        value = sent.get(name.lower())
        if value is None:
            if name in route.required_headers:
                raise ERRORS[code](field=name, problem="is required", param=name)
            continue
        error = _header_validator(route.surface, name).error(value)
        if error is not None:
            raise ERRORS[code](field=name, problem=_short(error), param=name)


def query_values(operation_id: str, args: Mapping[str, str]) -> dict[str, Any]:
    """The route's query parameters that were sent, each as its schema's type (an integer
    parsed) and checked against it; a bad one raises the route's body error naming it.
    Parameters the route does not declare are ignored, as upstream's parsers do."""
    route = ROUTES[operation_id]
    values: dict[str, Any] = {}
    for name, schema in route.query_params.items():
        raw = args.get(name)
        if raw is None:
            continue
        _no_nul(route.invalid_body, name, raw)
        value: Any = raw
        if schema.get("type") == "integer":
            try:
                value = int(raw)
            except ValueError:
                value = raw  # the check below refuses it, naming the type
        error = _param_validator(operation_id, "query", name).error(value)
        if error is not None:
            raise ERRORS[route.invalid_body](field=name, problem=_short(error), param=name)
        values[name] = value
    return values


def path_value(operation_id: str, name: str, value: str) -> str:
    """A path parameter checked against its schema (one a lookup would answer with
    nothing, a name over its maxLength, is refused naming it instead)."""
    route = ROUTES[operation_id]
    _no_nul(route.invalid_body, name, value)
    error = _param_validator(operation_id, "path", name).error(value)
    if error is not None:
        raise ERRORS[route.invalid_body](field=name, problem=_short(error), param=name)
    return value


def _no_nul(code: str, name: str, value: str) -> None:
    """A query or path value holding a NUL (which no stored text can) is refused, naming it."""
    if "\x00" in value:
        raise ERRORS[code](field=name, problem="must not contain a NUL byte", param=name)
