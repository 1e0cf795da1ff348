"""Reading a request: the JSON body (parsed strictly, NUL-free, schema-checked, defaults
filled from the route's schema) and the headers, all by ``generated.routes`` (checked by
``runtime.native.api.validation``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flask import request

from generated.errors import HordeError, InvalidJSON, InvalidPayload, NulByteInPayload
from generated.routes import ROUTES
from runtime import strict_json
from runtime.native.api.validation import validate_body, validate_headers
from runtime.tables.route_schemas import DEFS

INT64 = 2**63 - 1


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def fill_defaults(schema: dict[str, Any], value: Any, defs: dict[str, Any]) -> Any:
    """``value`` with every absent property that has a schema ``default`` filled in."""
    schema = _resolve(schema, defs)
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for part in schema.get("allOf", []):
        out = fill_defaults(part, out, defs)
    for name, prop in schema.get("properties", {}).items():
        prop = _resolve(prop, defs)
        if name not in out and "default" in prop:
            out[name] = prop["default"]
        elif name in out:
            out[name] = fill_defaults(prop, out[name], defs)
        elif prop.get("type") == "object" and prop.get("properties"):
            out[name] = fill_defaults(prop, {}, defs)
    return out


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or its 400 (``strict_json.parse``: any nesting depth,
    NaN/Infinity, 1e400, lone surrogates and NUL are each refused, never a 500; the refusal
    quotes nothing from the body and logs no traceback)."""
    try:
        body = strict_json.parse(raw)
    except strict_json.Malformed as bad:
        raise _refusal(bad) from None
    if not isinstance(body, dict):
        raise InvalidJSON(detail="the body must be a JSON object")
    return body


def _refusal(bad: strict_json.Malformed) -> HordeError:
    if bad.kind == "nul":
        return NulByteInPayload()
    if bad.kind == "non_finite":
        return InvalidPayload(field=bad.path, problem=bad.problem, param=bad.path)
    return InvalidJSON(detail=str(bad)[:200])


def parsed_body(operation_id: str, raw: bytes) -> dict[str, Any]:
    """The route's body ``raw``, valid against its schema, with its defaults filled in."""
    body = parse_json(raw)
    validate_body(operation_id, body)
    route = ROUTES[operation_id]
    assert route.body is not None
    filled: dict[str, Any] = fill_defaults(route.body, body, DEFS[route.surface])
    return filled


def json_body(operation_id: str) -> dict[str, Any]:
    """Flask's request body, as ``parsed_body``."""
    return parsed_body(operation_id, request.get_data(cache=True))


def check_headers(operation_id: str, headers: Mapping[str, str], values: Iterable[str]) -> None:
    """The route's headers (``headers``: by name) valid, and no header value (``values``:
    every one) holding a NUL."""
    validate_headers(operation_id, headers)
    for value in values:
        if "\x00" in value:
            raise NulByteInPayload()


def checked_headers(operation_id: str) -> None:
    """Flask's request headers, as ``check_headers``."""
    # werkzeug's Headers has the items() validate_headers reads but is not a typing.Mapping
    check_headers(operation_id, request.headers, request.headers.values())  # type: ignore[arg-type]


def int64(value: Any, field: str) -> int | None:
    """An integer that fits a BIGINT column, or a clear 400 naming the field."""
    if value is None:
        return None
    if not -INT64 - 1 <= value <= INT64:
        raise InvalidPayload(field=field, problem="must fit in 64 bits", param=field)
    return int(value)
