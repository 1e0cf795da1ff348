"""The Responses API's spec against OpenAI's schema: every property of CreateResponse, every
key of the objects it treats key by key, and every input item, content part, tool,
tool_choice and text.format type is classified; broken specs are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codegen.errors import SpecErrors
from codegen.spec import load_spec
from codegen.targets import responses as responses_target
from tests.support.openai_schema import openai_document
from tests.support.spec_edits import replace_once

PARAMETERS = "responses/parameters.yaml"
INPUT = "responses/input.yaml"


def _schemas() -> dict[str, Any]:
    return dict(openai_document()["components"]["schemas"])


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = _schemas()[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    """Every property of an object schema, through $ref, allOf and a nullable anyOf."""
    schema = _resolve(schema)
    found = dict(schema.get("properties", {}))
    for sub in schema.get("allOf", []):
        found.update(_properties(sub))
    for sub in schema.get("anyOf", []):
        if _resolve(sub).get("type") != "null":
            found.update(_properties(sub))
    return found


def _types(schema: dict[str, Any]) -> set[str]:
    """The ``type`` values of every object in a union (oneOf/anyOf, nested)."""
    schema = _resolve(schema)
    found: set[str] = set()
    for key in ("oneOf", "anyOf"):
        for sub in schema.get(key, []):
            found |= _types(sub)
    kind = _resolve(schema.get("properties", {}).get("type", {}))
    for variant in [kind, *kind.get("anyOf", [])]:
        found |= {v for v in _resolve(variant).get("enum", []) if isinstance(v, str)}
    return found


def _create_response() -> dict[str, Any]:
    return _properties(_schemas()["CreateResponse"])


def test_every_create_response_property_has_a_treatment() -> None:
    openai = set(_create_response())
    assert len(openai) >= 31
    params = load_spec()[PARAMETERS]["parameters"]
    missing = sorted(openai - set(params))
    assert not missing, f"classify these in spec/responses/parameters.yaml: {missing}"
    ours = {n for n, p in params.items() if p["origin"] == "openai"}
    assert ours == openai, f"origin: openai but not OpenAI's: {sorted(ours - openai)}"


@pytest.mark.parametrize("name", ["text", "reasoning"])
def test_every_key_of_an_object_treated_key_by_key_has_a_treatment(name: str) -> None:
    openai = set(_properties(_create_response()[name]))
    assert openai
    keys = load_spec()[PARAMETERS]["parameters"][name]["keys"]
    assert set(keys) == openai, f"classify in parameters.{name}.keys: {sorted(openai - set(keys))}"


def test_stream_options_keys_are_openais() -> None:
    openai = set(_properties(_create_response()["stream_options"]))
    ours = load_spec()[PARAMETERS]["parameters"]["stream_options"]["schema"]["properties"]
    assert set(ours) == openai


@pytest.mark.parametrize(
    ("component", "translated", "refused"),
    [
        ("InputItem", "items", "refused_items"),
        ("InputContent", "content_parts", "refused_parts"),
        ("Tool", "tools", "refused_tools"),
    ],
)
def test_every_openai_type_is_translated_or_refused(
    component: str, translated: str, refused: str
) -> None:
    openai = _types(_schemas()[component])
    data = load_spec()[INPUT]
    ours = set(data[translated]) | set(data[refused])
    assert not openai - ours, f"classify in spec/responses/input.yaml: {sorted(openai - ours)}"
    assert not set(data[refused]) - openai, "a refused type OpenAI does not define"


def test_every_output_content_part_is_translated() -> None:
    """Earlier replies come back in input with their output parts."""
    openai = _types(_schemas()["OutputMessageContent"])
    assert openai <= set(load_spec()[INPUT]["content_parts"])


def test_every_tool_choice_is_translated_or_refused() -> None:
    openai = _types(_schemas()["ToolChoiceParam"])
    data = load_spec()[INPUT]
    assert set(_resolve(_schemas()["ToolChoiceOptions"])["enum"]) == set(
        data["tool_choice"]["modes"]
    )
    ours = {"function"} | set(data["refused_tool_choices"])
    assert openai == ours, sorted(openai ^ ours)


def test_every_text_format_is_translated_with_its_keys() -> None:
    formats = _resolve(_schemas()["TextResponseFormatConfiguration"])["oneOf"]
    data = load_spec()[INPUT]["text_formats"]
    for variant in formats:
        props = _properties(variant)
        kind = _resolve(props["type"])["enum"][0]
        assert set(data[kind]["keys"]) == set(props) - {"type"}, kind


def test_a_chat_finish_reason_without_a_status_is_refused(spec_copy: Path) -> None:
    replace_once(spec_copy / "responses/reply.yaml", "  stop: {status: completed}\n", "")
    with pytest.raises(SpecErrors) as info:
        responses_target.build(load_spec(spec_copy))
    (err,) = info.value.errors
    assert (err.file, err.path) == ("spec/responses/reply.yaml", "finish_reasons")
    assert "stop" in err.problem


def test_a_rule_the_engine_lacks_is_refused(spec_copy: Path) -> None:
    replace_once(spec_copy / PARAMETERS, "translation: tools\n", "translation: toolz\n")
    from codegen.engine_check import check_engine

    with pytest.raises(SpecErrors) as info:
        check_engine(load_spec(spec_copy))
    (err,) = info.value.errors
    assert (err.file, err.path) == (
        "spec/responses/parameters.yaml",
        "parameters.tools.translation",
    )
    assert "did you mean 'tools'?" in err.suggestion


def test_a_chat_parameter_that_does_not_exist_is_refused(spec_copy: Path) -> None:
    replace_once(
        spec_copy / PARAMETERS, "chat: max_completion_tokens\n", "chat: max_output_tokens\n"
    )
    with pytest.raises(SpecErrors) as info:
        load_spec(spec_copy)
    (err,) = info.value.errors
    assert err.path == "parameters.max_output_tokens.chat"
    assert "'max_output_tokens' is not a defined parameter" in err.problem


def test_a_refused_key_that_also_becomes_something_is_refused(spec_copy: Path) -> None:
    replace_once(
        spec_copy / PARAMETERS,
        "    reason: Workers do not report log probabilities.\n",
        "    reason: Workers do not report log probabilities.\n    chat: top_logprobs\n",
    )
    with pytest.raises(SpecErrors) as info:
        load_spec(spec_copy)
    assert info.value.errors[0].path == "parameters.top_logprobs"
