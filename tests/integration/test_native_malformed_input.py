"""Native malformed input: any nesting depth, non-finite numbers and lone surrogates are a 400
in the native envelope, never a 500, with no traceback and no prompt text logged."""

from __future__ import annotations

import json
import logging

import pytest

from tests.integration.chat_flow import chat_body, chat_pop

pytestmark = pytest.mark.integration

DEEP = 10_000


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _schema(depth: int) -> str:
    """A JSON Schema ``depth`` objects deep, as text (json.dumps cannot write it)."""
    return '{"type": "object", "properties": {"a": ' * depth + '{"type": "string"}' + "}}" * depth


def _raw_bodies() -> list[tuple[str, str, bytes]]:
    secret = "SECRET-PROMPT-TEXT"
    base = chat_body(secret)
    deep_schema = (
        json.dumps(base)[:-1]
        + ', "response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": '
        + _schema(900)
        + "}}}"
    )
    deep_schema_400 = deep_schema.replace(_schema(900), _schema(400))
    text = {"prompt": secret, "params": {"max_length": 80}}
    return [
        (
            "chat deep body",
            "/generate/chat/async",
            b'{"model": "m", "x": ' + _deep(DEEP).encode() + b"}",
        ),
        ("text deep body", "/generate/text/async", b'{"prompt": ' + _deep(DEEP).encode() + b"}"),
        ("chat deep schema", "/generate/chat/async", deep_schema.encode()),
        (
            "chat 1e400",
            "/generate/chat/async",
            json.dumps(base)[:-1].encode() + b', "temperature": 1e400}',
        ),
        (
            "chat NaN",
            "/generate/chat/async",
            json.dumps(base)[:-1].encode() + b', "temperature": NaN}',
        ),
        (
            "chat Infinity",
            "/generate/chat/async",
            json.dumps(base)[:-1].encode() + b', "temperature": -Infinity}',
        ),
        (
            "chat lone surrogate",
            "/generate/chat/async",
            json.dumps(chat_body(secret + "\\ud800")).replace("\\\\ud800", "\\ud800").encode(),
        ),
        (
            "text lone surrogate",
            "/generate/text/async",
            json.dumps(text).replace(secret, secret + "\\udfff").encode(),
        ),
        ("submit 1e400", "/generate/text/submit", b'{"id": "x", "seed": 1e400}'),
        ("pop deep body", "/generate/text/pop", b'{"name": ' + _deep(DEEP).encode() + b"}"),
        ("chat 400-deep schema", "/generate/chat/async", deep_schema_400.encode()),
        (
            "surrogate key",
            "/generate/text/async",
            b'{"prompt": "' + secret.encode() + b'", "params": {"\\ud800": 1}}',
        ),
    ]


BODIES = _raw_bodies()


@pytest.mark.parametrize(("label", "path", "raw"), BODIES, ids=[label for label, _, _ in BODIES])
def test_malformed_bodies_are_a_clean_400(native_client, make_user, caplog, label, path, raw):
    user = make_user("fuzzy", kudos=10_000)
    owner = make_user("owner")
    chat_pop(native_client, owner.api_key)
    caplog.set_level(logging.DEBUG)
    response = native_client.post(
        path, headers={"apikey": user.api_key, "content-type": "application/json"}, content=raw
    )
    assert response.status_code == 400, (label, response.status_code, response.text[:300])
    assert set(response.json()) >= {"message", "rc"}
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "Traceback" not in logged
    assert "SECRET-PROMPT-TEXT" not in logged
