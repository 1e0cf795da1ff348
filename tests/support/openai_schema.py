"""Validate front responses, stream chunks and errors against OpenAI's own OpenAPI schema.

The schema is OpenAI's own document, kept in the repository at
``tests/support/openai-openapi/openapi.yaml`` (its commit, sha256 and license beside it in
``SOURCE`` and ``LICENSE``) and loaded once.
``assert_openai(instance, "CreateChatCompletionResponse")`` raises an AssertionError naming
the path inside the instance and the rule it breaks.

    assert_completion(body)        # CreateChatCompletionResponse
    assert_chunk(chunk)            # CreateChatCompletionStreamResponse
    assert_error(body)             # ErrorResponse
    refused(call, SDKErrorClass)   # the SDK's error of a call, its body an ErrorResponse
    assert_model_list(body)        # ListModelsResponse
    assert_response(body)          # Response (the Responses API's)
    assert_response_event(event)   # ResponseStreamEvent
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

import openai
import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

OPENAPI_DOCUMENT: Traversable = files(__package__) / "openai-openapi" / "openapi.yaml"
BASE_URI = "urn:openai-openapi"


def _nullable_as_31(node: Any) -> Any:
    """OpenAI's 3.1 document still spells some nulls as 3.0's ``nullable: true``, and the
    API sends those nulls (a chunk's finish_reason); read them as 3.1 means them."""
    if isinstance(node, list):
        return [_nullable_as_31(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _nullable_as_31(value) for key, value in node.items()}
    if out.pop("nullable", False) is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        if "$ref" in out or "allOf" in out or "anyOf" in out or "oneOf" in out:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


@cache
def openai_document() -> dict[str, Any]:
    """OpenAI's OpenAPI document, nulls read as 3.1 means them.

    It is test data inside the repository (read through importlib.resources, so nothing
    beside the checkout is needed); a missing file fails loudly rather than skipping, so no
    conformance or coverage check goes quiet.
    """
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with OPENAPI_DOCUMENT.open(encoding="utf-8") as handle:
        return dict(_nullable_as_31(yaml.load(handle, Loader=loader)))


@cache
def validator(component: str) -> Draft202012Validator:
    """A validator of ``#/components/schemas/<component>`` with every $ref resolvable."""
    document = openai_document()
    if component not in document["components"]["schemas"]:
        raise KeyError(f"OpenAI's schema has no component {component!r}")
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry = Registry().with_resource(BASE_URI, resource)
    schema = {"$ref": f"{BASE_URI}#/components/schemas/{component}"}
    return Draft202012Validator(schema, registry=registry)


def assert_openai(instance: Any, component: str) -> None:
    errors = sorted(validator(component).iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        lines = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
        raise AssertionError(f"not a valid OpenAI {component}:\n" + "\n".join(lines[:10]))


def assert_completion(body: Any) -> None:
    assert_openai(body, "CreateChatCompletionResponse")


def assert_chunk(chunk: Any) -> None:
    assert_openai(chunk, "CreateChatCompletionStreamResponse")


def assert_error(body: Any) -> None:
    assert_openai(body, "ErrorResponse")


def refused(call: Callable[[], Any], cls: type[openai.APIStatusError]) -> openai.APIStatusError:
    """The SDK error ``call`` raises, of class ``cls``, its body checked as an ErrorResponse."""
    with pytest.raises(cls) as info:
        call()
    assert_error(info.value.response.json())
    return info.value


def assert_model_list(body: Any) -> None:
    assert_openai(body, "ListModelsResponse")


def assert_response(body: Any) -> None:
    assert_openai(body, "Response")


@cache
def stream_event_components() -> dict[str, str]:
    """Each Responses stream event's type -> its component (one of ResponseStreamEvent's)."""
    schemas = openai_document()["components"]["schemas"]
    found: dict[str, str] = {}
    for variant in schemas["ResponseStreamEvent"]["anyOf"]:
        name = variant["$ref"].rsplit("/", 1)[-1]
        for value in schemas[name]["properties"]["type"].get("enum", []):
            found[value] = name
    return found


def assert_response_event(event: Any) -> None:
    """A ResponseStreamEvent, checked against the component of its type (so a failure names
    the field, not only the union)."""
    kind = event.get("type") if isinstance(event, dict) else None
    component = stream_event_components().get(kind)
    assert component is not None, f"not an OpenAI Responses stream event type: {event!r:.200}"
    assert_openai(event, component)
    assert_openai(event, "ResponseStreamEvent")
