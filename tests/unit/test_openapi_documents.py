"""The generated OpenAPI documents: valid 3.1, every error status enveloped, refs checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from openapi_spec_validator import validate

from codegen.errors import SpecErrors
from codegen.spec import SPEC_ROOT, load_spec
from codegen.targets import openapi
from generated.errors import ERRORS
from tests.support.spec_edits import replace_once

GENERATED = SPEC_ROOT.parent / "generated" / "openapi"


@pytest.mark.parametrize("surface", ["native", "front"])
def test_document_is_valid_openapi_31(surface: str) -> None:
    doc = yaml.safe_load((GENERATED / f"{surface}.yaml").read_text())
    assert doc["openapi"] == "3.1.0"
    validate(doc)


@pytest.mark.parametrize("surface", ["native", "front"])
def test_every_error_status_carries_the_envelope_and_its_codes(surface: str) -> None:
    doc = yaml.safe_load((GENERATED / f"{surface}.yaml").read_text())
    seen = 0
    for methods in doc["paths"].values():
        for op in methods.values():
            for status, resp in op["responses"].items():
                if int(status) < 400:
                    continue
                schema = resp["content"]["application/json"]["schema"]
                if surface == "native":
                    codes = schema["properties"]["rc"]["enum"]
                    status_of = [ERRORS[c].native_status for c in codes]
                else:
                    codes = schema["properties"]["error"]["properties"]["code"]["enum"]
                    status_of = [ERRORS[c].front_status for c in codes]
                    assert "x-should-retry" in resp["headers"]
                assert status_of == [int(status)] * len(codes)
                seen += 1
    assert seen > 10


def test_native_routes_are_upstreams_paths() -> None:
    paths = yaml.safe_load((GENERATED / "native.yaml").read_text())["paths"]
    for path in (
        "/api/v2/generate/text/async",
        "/api/v2/generate/text/status/{id}",
        "/api/v2/generate/text/pop",
        "/api/v2/generate/text/submit",
        "/api/v2/generate/chat/async",
        "/api/v2/status/heartbeat",
        "/api/v2/users/{id}",
    ):
        assert path in paths
    assert set(paths["/api/v2/generate/chat/status/{id}"]) == {"get", "delete"}


def test_front_streams_event_stream_and_answers_x_horde() -> None:
    doc = yaml.safe_load((GENERATED / "front.yaml").read_text())
    ok = doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert set(ok) == {"application/json", "text/event-stream"}
    completion = doc["components"]["schemas"]["ChatCompletion"]
    assert "x_horde" in completion["required"]


def test_a_misspelt_error_on_a_route_is_refused_with_a_suggestion(spec_copy: Path) -> None:
    replace_once(
        spec_copy / "api" / "native.yaml",
        "errors: [WorkerNotFound, InvalidPayload]\n  worker_by_name:",  # the worker route's
        "errors: [WorkerNotFund, InvalidPayload]\n  worker_by_name:",
    )
    with pytest.raises(SpecErrors) as info:
        load_spec(spec_copy)
    (err,) = info.value.errors
    assert err.file == "spec/api/native.yaml"
    assert err.path == "routes.worker.errors"
    assert "'WorkerNotFund' is not a defined error" in err.problem
    assert "WorkerNotFound" in err.suggestion


def test_an_error_without_a_status_on_the_surface_is_refused(spec_copy: Path) -> None:
    replace_once(
        spec_copy / "api" / "front.yaml",
        "errors: [InvalidAPIKey, horde_unavailable]",
        "errors: [InvalidAPIKey, DuplicateGen]",
    )
    with pytest.raises(SpecErrors) as info:
        openapi.build(load_spec(spec_copy))
    (err,) = info.value.errors
    assert (err.file, err.path) == ("spec/api/front.yaml", "routes.list_models.errors")
    assert "DuplicateGen" in err.problem
    assert "front" in err.suggestion


def test_a_dangling_schema_reference_is_refused(spec_copy: Path) -> None:
    replace_once(
        spec_copy / "api" / "native.yaml",
        '{$ref: "#/schemas/SubmitOutput"}',
        '{$ref: "#/schemas/SubmitOutputs"}',
    )
    with pytest.raises(SpecErrors) as info:
        openapi.build(load_spec(spec_copy))
    (err,) = info.value.errors
    assert err.file == "spec/api/native.yaml"
    assert "SubmitOutputs" in err.problem
    assert "SubmitOutput" in err.suggestion


def test_a_finish_reason_enum_apart_from_the_reply_spec_is_refused(spec_copy: Path) -> None:
    replace_once(
        spec_copy / "chat" / "reply.yaml",
        "  content_filter: Content was left out by a filter.\n",
        "  content_filter: Content was left out by a filter.\n  eos: The end of sequence.\n",
    )
    with pytest.raises(SpecErrors) as info:
        openapi.build(load_spec(spec_copy))
    places = {(e.file, e.path) for e in info.value.errors}
    assert (
        "spec/api/native.yaml",
        "schemas.SubmitInput.properties.finish_reason.enum",
    ) in places
    assert all("eos" in e.suggestion for e in info.value.errors)
    assert {f for f, _ in places} == {"spec/api/native.yaml", "spec/api/front.yaml"}


def test_an_exempt_finish_reason_must_be_a_defined_one(spec_copy: Path) -> None:
    replace_once(
        spec_copy / "chat" / "verification.yaml",
        "content_exempt_finish_reasons: [length, content_filter]",
        "content_exempt_finish_reasons: [length, content_filtered]",
    )
    with pytest.raises(SpecErrors) as info:
        load_spec(spec_copy)
    (err,) = info.value.errors
    assert err.file == "spec/chat/verification.yaml"
    assert "content_filter" in err.suggestion


def test_a_submits_id_links_to_its_status_and_cancel() -> None:
    doc = yaml.safe_load((GENERATED / "native.yaml").read_text())
    links = doc["paths"]["/api/v2/generate/chat/async"]["post"]["responses"]["202"]["links"]
    assert links["ChatStatus"]["operationId"] == "chat_status"
    assert links["ChatStatus"]["parameters"]["path.id"] == "$response.body#/id"
    assert links["ChatCancel"]["operationId"] == "chat_cancel"
    pop = doc["paths"]["/api/v2/generate/text/pop"]["post"]["responses"]["200"]["links"]
    assert pop["Submit"]["requestBody"] == {"id": "$response.body#/id"}


def test_a_link_to_a_route_of_the_other_surface_is_refused(spec_copy: Path) -> None:
    replace_once(
        spec_copy / "api" / "front.yaml", "operation: retrieve_model", "operation: chat_status"
    )
    with pytest.raises(SpecErrors) as info:
        openapi.build(load_spec(spec_copy))
    (err,) = info.value.errors
    assert err.path == "routes.list_models.responses.200.links.RetrieveModel"
    assert "no route 'chat_status' on the front surface" in err.problem
    assert "retrieve_model" in err.suggestion


def test_a_link_parameter_the_target_does_not_take_is_refused(spec_copy: Path) -> None:
    replace_once(
        spec_copy / "api" / "native.yaml",
        "description: The first user listed.\n            parameters: {id:",
        "description: The first user listed.\n            parameters: {ids:",
    )
    with pytest.raises(SpecErrors) as info:
        openapi.build(load_spec(spec_copy))
    (err,) = info.value.errors
    assert err.path == "routes.users.responses.200.links.User.parameters"
    assert "user has no parameter 'ids'" in err.problem
    assert "'id'" in err.suggestion
