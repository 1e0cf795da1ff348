"""JSON Schemas of the chat request body and of a worker's chat declaration.

The OpenAPI targets (and the generated route table) call these two functions; the contract
helper fills them in from spec/chat/ and spec/workers/, keeping the signatures. Until then
they return a minimal honest schema: a chat body is an object with ``messages``; a
declaration is an object. Both are JSON Schema 2020-12 dicts, OpenAPI-3.1 compatible.
"""

from __future__ import annotations

from typing import Any

from codegen.spec import Spec


def chat_request_schema(spec: Spec) -> dict[str, Any]:
    """The body of POST /v1/chat/completions and of the native chat async route."""
    return {"type": "object", "required": ["messages"]}


def worker_declaration_schema(spec: Spec) -> dict[str, Any]:
    """The chat declaration fields a worker adds to its text pop body."""
    return {"type": "object"}
