"""``x-request-id`` on every front response (OpenAI's header; the SDKs' ``_request_id``).

``runtime.front.observe.ObserveMiddleware`` gives each HTTP request a ``RequestId`` in its
scope: an id the front made, until the chat endpoint calls ``submitted`` with the horde
request id, which the response then names (``naming_the_request``: every response after
submission, a stream's included). The 500 handler, which runs outside the middleware, adds
it itself (``header_of``).
"""

from __future__ import annotations

import uuid

from starlette.types import Message, Scope

REQUEST_ID_HEADER = "x-request-id"
FRONT_ID_PREFIX = "front-"


class RequestId:
    """The id a response names in ``x-request-id``; in the ASGI scope under ``SCOPE_KEY``."""

    SCOPE_KEY = "horde.request_id"
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = FRONT_ID_PREFIX + uuid.uuid4().hex

    def submitted(self, request_id: str) -> None:
        """From now on the response names the horde request."""
        self.value = request_id

    @classmethod
    def of(cls, scope: Scope) -> RequestId | None:
        found = scope.get(cls.SCOPE_KEY)
        return found if isinstance(found, RequestId) else None


def naming_the_request(message: Message, request_id: RequestId) -> Message:
    """A response's start ``message`` with ``x-request-id`` naming ``request_id`` (in place
    of one the app set)."""
    name = REQUEST_ID_HEADER.encode()
    headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != name]
    headers.append((name, request_id.value.encode()))
    return {**message, "headers": headers}


def header_of(scope: Scope) -> dict[str, str]:
    """The ``x-request-id`` header of the request in ``scope`` (none outside the middleware)."""
    found = RequestId.of(scope)
    return {REQUEST_ID_HEADER: found.value} if found is not None else {}
