"""generated/routes.py and runtime.native.api.validation: bodies and headers checked from the
spec, errors naming the field."""

from __future__ import annotations

import pytest

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
