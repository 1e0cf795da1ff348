"""generated/routes.py and runtime.native.api.validation: bodies and headers checked from the
spec, errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from generated import errors, routes
from runtime.native.api import validation


def _refusal(operation_id: str, body: object) -> errors.HordeError:
    with pytest.raises(errors.HordeError) as info:
        validation.validate_body(operation_id, body)
    return info.value


def test_a_missing_field_is_named() -> None:
    err = _refusal("text_async", {"params": {}})
    assert isinstance(err, errors.InvalidPayload)
    assert err.message == "Input payload validation failed: prompt: is required"
    assert err.param == "prompt"
    assert err.native_body()["rc"] == "InvalidPayload"


def test_a_nested_bound_is_named_with_its_path() -> None:
    err = _refusal("text_async", {"prompt": "hi", "params": {"max_length": 5}})
    assert err.param == "params.max_length"
    assert "must be at least 16" in err.message


def test_an_array_item_is_named_with_its_index() -> None:
    err = _refusal("text_async", {"prompt": "hi", "params": {"stop_sequence": ["a", 3]}})
    assert err.param == "params.stop_sequence[1]"


def test_a_body_that_is_not_an_object_names_no_param() -> None:
    err = _refusal("text_submit", ["id"])
    assert err.param is None
    assert "(body): must be of type object" in err.message


def test_good_bodies_pass() -> None:
    validation.validate_body("text_async", {"prompt": "hi", "params": {"max_length": 80}})
    validation.validate_body("text_pop", {"name": "worker-1", "threads": 2})
    validation.validate_body("heartbeat", None)


def test_headers_are_checked_case_insensitively() -> None:
    validation.validate_headers("chat_async", {"APIKEY": "0000000000", "x-operation-key": "k-1"})
    with pytest.raises(errors.InvalidOperationKey) as info:
        validation.validate_headers("chat_async", {"apikey": "k", "X-Operation-Key": "has space"})
    assert info.value.param == routes.HEADER_X_OPERATION_KEY
    with pytest.raises(errors.InvalidPayload, match="apikey: is required"):
        validation.validate_headers("text_pop", {})


def test_route_table_shape() -> None:
    status = routes.ROUTES["chat_status"]
    assert (status.method, status.path) == ("GET", "/api/v2/generate/chat/status/{id}")
    assert status.flask_rule == "/api/v2/generate/chat/status/<id>"
    assert routes.BASE_PATHS == {"front": "/v1", "native": "/api/v2"}
    for route in routes.ROUTES.values():
        for code in (*route.errors, route.invalid_body):
            assert code in errors.ERRORS


ROOT = Path(__file__).resolve().parents[2]
AFTER_SUBMISSION = {"submission", "first_status", "waiting", "stream"}
"""The design doc's front states a request reaches only on the chat route (spec/errors.yaml
``front.when``)."""


def test_a_submitting_route_lists_every_error_a_submitted_request_can_meet() -> None:
    """Its OpenAPI document and reference page list what the front returns on it: each
    front route that submits a chat request (``errors_under: chat/`` in its spec) lists
    every error the front returns at submission or after."""
    met = {
        code
        for code, error in errors.ERRORS.items()
        if AFTER_SUBMISSION & set(getattr(error, "front_when", ()))
    }
    front = yaml.safe_load((ROOT / "spec" / "api" / "front.yaml").read_text())
    submitting = [op for op, route in front["routes"].items() if "errors_under" in route]
    assert "chat_completions" in submitting
    for operation_id in submitting:
        listed = set(routes.ROUTES[operation_id].errors)
        assert sorted(met - listed) == [], operation_id
