"""Every front error in OpenAI's envelope, and native refusals mapped onto it.

The front never invents a status: a ``HordeError``'s ``front_status``, ``openai_body()`` and
``front_headers(submitted=...)`` come from spec/errors.yaml. A native ``{message, rc}``
refusal becomes the class of its ``rc``, naming the ``param`` the native body names (so a
refusal of ``models.[1]`` says so in OpenAI's envelope); a code the front never returns (a
passkey or operation-key fault, which is ours, not the client's) becomes 502
horde_unavailable.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from generated.errors import ERRORS, HordeError, HordeUnavailable, InternalError, RouteNotFound
from generated.errors import MethodNotAllowed as MethodNotAllowedError
from runtime.front.request_id import header_of

log = logging.getLogger(__name__)


def error_response(error: HordeError, *, submitted: bool = False) -> JSONResponse:
    """The envelope with the error's front status; ``submitted`` adds x-should-retry false."""
    status = error.front_status
    if status is None:
        log.error("error %s is never returned by the front: %s", error.code, error.message)
        error, status = InternalError(), InternalError.front_status or 500
    return JSONResponse(
        error.openai_body(), status_code=status, headers=error.front_headers(submitted=submitted)
    )


def error_event(error: HordeError) -> dict[str, Any]:
    """The body of the one SSE error event sent after a stream's headers."""
    return error.openai_body()


def from_native(status_code: int, body: bytes, *, retry_after: float | None = None) -> HordeError:
    """The HordeError a native refusal stands for (by its rc, with its param), else 502
    horde_unavailable."""
    try:
        payload = json.loads(body)
        code, message = payload["rc"], payload["message"]
    except (ValueError, KeyError, TypeError):
        return HordeUnavailable(detail=f"the native API answered {status_code}")
    cls = ERRORS.get(str(code))
    if cls is None or cls.front_status is None:
        log.error("native refusal %s (%s) has no front meaning: %s", code, status_code, message)
        return HordeUnavailable(detail=f"the native API refused the call ({code})")
    param = payload.get("param")
    return cls(
        str(message), param=param if isinstance(param, str) else None, retry_after=retry_after
    )


async def not_found(request: Request, exc: Exception) -> Response:
    return error_response(RouteNotFound(method=request.method, path=request.url.path))


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    response = error_response(MethodNotAllowedError(method=request.method, path=request.url.path))
    allow = getattr(exc, "headers", None) or {}
    if "Allow" in allow:
        response.headers["Allow"] = allow["Allow"]
    return response


async def unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    response = error_response(InternalError())
    response.headers.update(header_of(request.scope))  # this handler runs outside middleware
    return response
