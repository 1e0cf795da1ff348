"""Every error leaves the native API as upstream's ``{message, rc}`` with its status."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, current_app, jsonify, request
from flask_limiter.errors import RateLimitExceeded
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound, RequestEntityTooLarge

from generated.errors import (
    HordeError,
    InternalError,
    InvalidJSON,
    PayloadTooLarge,
    RouteNotFound,
    StoreUnavailable,
)
from generated.errors import MethodNotAllowed as MethodNotAllowedError
from runtime.native.api.context import native
from runtime.native.api.rate_limits import (
    FLASK_CALLER,
    LIMITER,
    lane_limit_choices,
    rate_limited,
)

log = logging.getLogger(__name__)


def error_parts(error: HordeError) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
    """An error's status, native body and headers (``retry_headers``: Retry-After and
    retry-after-ms), framework-free (the workers' lane, ``runtime.native.api.lane``, answers
    them without Flask)."""
    headers = list(error.retry_headers().items())
    return error.native_status or 500, error.native_body(), headers


def horde_response(error: HordeError) -> Response:
    status, body, headers = error_parts(error)
    response = jsonify(body)
    response.status_code = status
    for name, value in headers:
        response.headers[name] = value
    return response


def _rate_limited(exc: RateLimitExceeded) -> Response:
    """The refusal, with the wait until the client is admitted again: the breached limit's
    window end (flask-limiter keeps the breached limit as the request's ``current_limit``;
    its window is read from the hit's own script answer, which ``limit_storage`` keeps for
    the request, or from the in-memory fallback's counts), or a later end of another full
    window of the route (``HordeLimiter.admitted_after``, which leaves out a window the store
    fails to read)."""
    limiter = current_app.extensions[LIMITER]
    breached = limiter.current_limit
    reset = breached.window[0] if breached is not None and breached.breached else None
    if reset is not None and request.endpoint in native().policy.rate_limits:
        # the route's other windows too: one already full refuses the client past ``reset``
        choices = lane_limit_choices(str(request.endpoint), FLASK_CALLER, native())
        reset = limiter.admitted_after(breached.request_args[-1], choices, reset)
    return horde_response(rate_limited(str(exc.limit.limit), reset))


def _http(exc: HTTPException) -> Response:
    if isinstance(exc, NotFound):
        return horde_response(RouteNotFound(method=request.method, path=request.path))
    if isinstance(exc, MethodNotAllowed):
        response = horde_response(MethodNotAllowedError(method=request.method, path=request.path))
        response.headers["Allow"] = ", ".join(sorted(exc.valid_methods or []))
        return response
    if isinstance(exc, RequestEntityTooLarge):
        limit = request.max_content_length or 0
        return horde_response(PayloadTooLarge(limit=limit))
    if exc.code is not None and 400 <= exc.code < 500:
        return horde_response(InvalidJSON(detail=exc.description or exc.name))
    return _unexpected(exc)


def store_unavailable(exc: Exception, method: str, path: str) -> StoreUnavailable:
    """A store outage met by a request: its transaction was rolled back; a 503 the client
    may retry, one log line without a traceback or the statement's parameters."""
    store = "Redis" if isinstance(exc, RedisError) else "database"
    log.warning("%s unavailable on %s %s: %s", store, method, path, type(exc).__name__)
    return StoreUnavailable(store=store)


def internal_error(exc: Exception, method: str, path: str) -> InternalError:
    """Anything unforeseen: a 500, its traceback logged."""
    log.exception("unexpected error on %s %s", method, path, exc_info=exc)
    return InternalError()


def _store_down(exc: Exception) -> Response:
    return horde_response(store_unavailable(exc, request.method, request.path))


def _unexpected(exc: Exception) -> Response:
    return horde_response(internal_error(exc, request.method, request.path))


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(HordeError, horde_response)
    app.register_error_handler(RateLimitExceeded, _rate_limited)
    app.register_error_handler(HTTPException, _http)
    app.register_error_handler(OperationalError, _store_down)  # the database is unreachable
    app.register_error_handler(RedisConnectionError, _store_down)
    app.register_error_handler(RedisTimeoutError, _store_down)
    app.register_error_handler(Exception, _unexpected)
