"""``x-request-id`` on every front response (OpenAI's header; the SDKs' ``_request_id``).

``RequestIdMiddleware`` gives each HTTP request a ``RequestId`` in its scope: an id the front
made, until the chat endpoint calls ``submitted`` with the horde request id, which the
response then names (every response after submission, a stream's included). The 500
handler, which runs outside the middleware, adds it itself (``header_of``).
"""

from __future__ import annotations

import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = "x-request-id"
FRONT_ID_PREFIX = "front-"


class RequestId:
    """The id a response names in ``x-request-id``; in the ASGI scope under ``SCOPE_KEY``."""

    SCOPE_KEY = "horde.request_id"

    def __init__(self) -> None:
        self.value = FRONT_ID_PREFIX + uuid.uuid4().hex

    def submitted(self, request_id: str) -> None:
        """From now on the response names the horde request."""
        self.value = request_id

    @classmethod
    def of(cls, scope: Scope) -> RequestId | None:
        found = scope.get(cls.SCOPE_KEY)
        return found if isinstance(found, RequestId) else None


class RequestIdMiddleware:
    """Adds ``x-request-id`` to every HTTP response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = RequestId()
        scope[RequestId.SCOPE_KEY] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower() != REQUEST_ID_HEADER.encode()
                ]
                headers.append((REQUEST_ID_HEADER.encode(), request_id.value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_id)


def header_of(scope: Scope) -> dict[str, str]:
    """The ``x-request-id`` header of the request in ``scope`` (none outside the middleware)."""
    found = RequestId.of(scope)
    return {REQUEST_ID_HEADER: found.value} if found is not None else {}
