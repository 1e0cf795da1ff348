"""Tool definitions, tool_choice and response_format, and OpenAI's strict-schema rules.

Unknown keys in a tool definition and in the tool_choice object are dropped (as OpenAI
does); response_format refuses them. A strict schema (a strict json_schema response format,
or a strict function's parameters) must close every object and require every property, or
the request is refused with OpenAI's message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generated.chat.names import (
    PARAM_RESPONSE_FORMAT,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    RESPONSE_FORMAT_JSON_SCHEMA,
)
from generated.chat.tables import (
    RESPONSE_FORMAT_TYPES,
    TOOL_CHOICE_FUNCTION_KEYS,
    TOOL_FUNCTION_KEYS,
)
from generated.errors import InvalidChatParameter, InvalidStrictSchema, UnsupportedChatParameter
from runtime.contract.checks import check, join_param, wrong_type

_OBJECT = {"type": "object"}


def _is_object(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object" or "properties" in schema


def _object_problem(schema: dict[str, Any]) -> str | None:
    """Why an object schema is not closed, or None."""
    if schema.get("additionalProperties") is not False:
        return "'additionalProperties' is required to be supplied and to be false."
    required = schema.get("required")
    props = schema.get("properties", {})
    missing = [k for k in props if not isinstance(required, list) or k not in required]
    if missing:
        return (
            "'required' is required to be supplied and to be an array including every "
            f"key in properties. Missing '{missing[0]}'."
        )
    return None


def _subschemas(schema: dict[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(relative path, schema) of each schema nested in ``schema``, in the order checked."""
    if _is_object(schema):
        for name, sub in schema.get("properties", {}).items():
            yield ("properties", name), sub
    for key in ("items", "not"):
        yield (key,), schema.get(key)
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key) or []):
            yield (key, str(i)), sub
    for key in ("$defs", "definitions"):
        for name, sub in (schema.get(key) or {}).items():
            yield (key, name), sub


def _closed_problems(schema: Any, context: tuple[str, ...]) -> tuple[tuple[str, ...], str] | None:
    """The first place a strict schema leaves an object open or a property optional."""
    if not isinstance(schema, dict):
        return None
    problem = _object_problem(schema) if _is_object(schema) else None
    if problem is not None:
        return context, problem
    for path, sub in _subschemas(schema):
        found = _closed_problems(sub, (*context, *path))
        if found:
            return found
    return None


def check_strict_schema(schema: Any, holder: str, name: str, param: str) -> None:
    """Refuse a strict schema that is open somewhere, with OpenAI's wording."""
    found = _closed_problems(schema if schema is not None else {}, ())
    if found:
        context, problem = found
        raise InvalidStrictSchema(
            holder=holder, name=name, context=repr(context), problem=problem, param=param
        )


def validate_tools(tools: Any) -> list[dict[str, Any]]:
    """Function tool definitions (unknown keys dropped; custom tools refused)."""
    kept: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        where = join_param(PARAM_TOOLS, i)
        if isinstance(tool, dict) and tool.get("type") == "custom":
            raise UnsupportedChatParameter(
                key=f"{where}.type custom",
                reason="Custom tools are not served; use function tools.",
                param=f"{where}.type",
            )
        schema = {
            "type": "object",
            "required": ["type", "function"],
            "properties": {"type": {"enum": ["function"]}, "function": _OBJECT},
        }
        check(tool, schema, where)
        fn_where = join_param(where, "function")
        fn_schema = {"type": "object", "required": ["name"], "properties": TOOL_FUNCTION_KEYS}
        check(tool["function"], fn_schema, fn_where)
        fn = {
            k: v for k, v in tool["function"].items() if k in TOOL_FUNCTION_KEYS and v is not None
        }
        if fn.get("strict") is True:
            check_strict_schema(
                fn.get("parameters"), "function", fn["name"], join_param(fn_where, "parameters")
            )
        kept.append({"type": "function", "function": fn})
    seen: set[str] = set()
    for i, tool in enumerate(kept):
        name = tool["function"]["name"]
        if name in seen:
            where = f"{PARAM_TOOLS}.[{i}].function.name"
            raise InvalidChatParameter(
                detail=f"Invalid 'tools': duplicate function name '{name}'.", param=where
            )
        seen.add(name)
    return kept


def validate_tool_choice(choice: Any, tools: list[dict[str, Any]]) -> Any:
    """'none' | 'auto' | 'required' | {type: function, function: {name}} (keys dropped)."""
    if isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind in ("allowed_tools", "custom"):
        raise UnsupportedChatParameter(
            key=f"{PARAM_TOOL_CHOICE}.type {kind}",
            reason="Only none, auto, required or a named function are served.",
            param=f"{PARAM_TOOL_CHOICE}.type",
        )
    function = {"type": "object", "required": ["name"], "properties": TOOL_CHOICE_FUNCTION_KEYS}
    schema = {
        "type": "object",
        "required": ["type", "function"],
        "properties": {"type": {"enum": ["function"]}, "function": function},
    }
    check(choice, schema, PARAM_TOOL_CHOICE)
    name = choice["function"]["name"]
    if name not in [t["function"]["name"] for t in tools]:
        raise InvalidChatParameter(
            detail=f"Invalid value for 'tool_choice': function '{name}' is not among the tools.",
            param=f"{PARAM_TOOL_CHOICE}.function.name",
        )
    return {"type": "function", "function": {"name": name}}


def validate_response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """text, json_object or json_schema, closed (strict schemas checked)."""
    kind = fmt.get("type")
    if not isinstance(kind, str) or kind not in RESPONSE_FORMAT_TYPES:
        values = ", ".join(f"'{t}'" for t in RESPONSE_FORMAT_TYPES)
        where = f"{PARAM_RESPONSE_FORMAT}.type"
        raise InvalidChatParameter(
            detail=f"Invalid value for '{where}': {kind!r}. Supported values are: {values}.",
            param=where,
        )
    props = {"type": {"const": kind}, **RESPONSE_FORMAT_TYPES[kind]}
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": props,
        "required": list(props),
    }
    check(fmt, schema, PARAM_RESPONSE_FORMAT)
    if kind == RESPONSE_FORMAT_JSON_SCHEMA:
        spec = fmt[RESPONSE_FORMAT_JSON_SCHEMA]
        if spec.get("strict") is True:
            check_strict_schema(
                spec.get("schema"), PARAM_RESPONSE_FORMAT, spec["name"], PARAM_RESPONSE_FORMAT
            )
        if "schema" in spec and not isinstance(spec["schema"], dict):
            param = "response_format.json_schema.schema"
            raise InvalidChatParameter(
                detail=wrong_type(param, "an object", spec["schema"]), param=param
            )
    return fmt
