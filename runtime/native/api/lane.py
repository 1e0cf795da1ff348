"""Hot routes without Flask: the workers' lane (pop, submit, progress, leave, heartbeat) and
the clients' chat submit.

Flask, werkzeug's request and flask-limiter's per-request work cost a large share of these
hot routes' CPU (docs/performance.md), so ``Lane.respond`` does their part directly on the
thread the ASGI shell runs it on (the workers' lane's, or the clients' for the chat submit):
request id, rate limits (``HordeLimiter.lane_hit``), the view, the error envelope, the
X-RateLimit headers, the access log and the metrics. A view is written once, as a function
of a ``LaneRequest`` answering a ``Reply``; the Flask app registers it too (``flask_view``),
for 405s and test clients. Where the time goes: ``bench/native_cycles.py``.
"""

from __future__ import annotations

import contextvars
import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Response, current_app
from flask import request as flask_request
from flask.json.provider import DefaultJSONProvider
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import OperationalError

from generated.errors import HordeError, PayloadTooLarge
from generated.routes import ROUTES
from runtime.native.api.context import NativeContext, native
from runtime.native.api.errors import error_parts, internal_error, store_unavailable
from runtime.native.api.observe import begin_request, finish_request, note_pop
from runtime.native.api.rate_limits import (
    HordeLimiter,
    LaneHit,
    lane_limit_choices,
    limit_headers,
    rate_limited,
)
from runtime.native.asgi import CLIENT_LANE, LANE, Answer, PopAttempt
from runtime.observability.access_log import AccessLog
from runtime.observability.context import REQUEST_ID_HEADER

__all__ = ["CLIENT_LANE", "LANE", "Lane", "LaneRequest", "LaneView", "Reply", "flask_view"]

JSON_TYPE = "application/json"
_dumps = functools.partial(
    json.dumps,
    default=DefaultJSONProvider.default,
    ensure_ascii=True,
    sort_keys=False,
    separators=(",", ":"),
)
"""Flask's jsonify on this app, byte for byte: compact, keys unsorted, its defaults."""


def encode(payload: Any) -> bytes:
    return (_dumps(payload) + "\n").encode()


@dataclass
class Reply:
    """A view's answer: a JSON object and its status."""

    payload: dict[str, Any]
    status: int = 200


@dataclass
class LaneRequest:
    """What a lane view reads of its request: no framework behind it."""

    operation_id: str
    method: str
    path: str
    headers: Mapping[str, str]
    """Names in lower case; a repeated header's first value (werkzeug's ``get``)."""
    header_values: list[str]
    """Every header's value, repeats included (the NUL check reads them all)."""
    body: bytes
    too_large: bool
    """The body is over the cap (unread or read in part): reading it is 413."""
    max_body: int
    remote_addr: str | None
    ctx: NativeContext
    attempt: PopAttempt | None = None
    """The long poll's record of this pop run (the ASGI shell's), else None."""
    pop_kind: str | None = field(default=None)
    """The kind of job the pop handed out (horde_pops), once it did."""
    reader: Callable[[], bytes] | None = None
    """Reads the body when the view first asks (Flask's request: werkzeug's 413 then)."""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def data(self) -> bytes:
        """The body; 413 PayloadTooLarge over the cap, raised where the view reads it (after
        its header checks, as Flask's ``get_data`` did)."""
        if self.too_large:
            raise PayloadTooLarge(limit=self.max_body)
        if self.reader is not None:
            self.body, self.reader = self.reader(), None
        return self.body


LaneView = Callable[[LaneRequest], Reply]


def _headers(pairs: Iterable[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    first: dict[str, str] = {}
    values: list[str] = []
    for name, value in pairs:
        first.setdefault(name.lower(), value)
        values.append(value)
    return first, values


def flask_view(view: LaneView) -> Callable[[], Response]:
    """``view`` as a Flask view (the app's routing and a test client reach it so)."""

    @functools.wraps(view)
    def serve() -> Response:
        headers, values = _headers(flask_request.headers.items())
        max_body = int(current_app.config["MAX_CONTENT_LENGTH"])
        req = LaneRequest(
            operation_id=str(flask_request.endpoint),
            method=flask_request.method,
            path=flask_request.path,
            headers=headers,
            header_values=values,
            body=b"",
            too_large=False,
            max_body=max_body,
            remote_addr=flask_request.remote_addr,
            ctx=native(),
            reader=functools.partial(flask_request.get_data, cache=True),
        )
        reply = view(req)
        if req.pop_kind is not None:
            note_pop(req.pop_kind)
        return current_app.response_class(
            encode(reply.payload), status=reply.status, mimetype=JSON_TYPE
        )

    return serve


class Lane:
    """Routes served without Flask (``respond``, on the threads the ASGI shell picks)."""

    def __init__(
        self,
        ctx: NativeContext,
        views: Mapping[str, LaneView],
        limiter: HordeLimiter,
        access_log: AccessLog,
        max_body: int,
    ) -> None:
        self.ctx = ctx
        self.views = dict(views)
        self.limiter = limiter
        self.access_log = access_log
        self.max_body = max_body
        self.routes = {(ROUTES[op].method.upper(), ROUTES[op].path): op for op in self.views}
        """(method, path) -> operation id, for the ASGI shell's dispatch."""
        self.rules = {op: ROUTES[op].flask_rule for op in self.views}
        """The route label of the access log and metrics (Flask's ``url_rule.rule``)."""

    def request(
        self,
        operation_id: str,
        scope: Mapping[str, Any],
        body: bytes,
        too_large: bool,
        attempt: PopAttempt | None,
    ) -> LaneRequest:
        headers, values = _headers(
            (bytes(k).decode("latin-1"), bytes(v).decode("latin-1")) for k, v in scope["headers"]
        )
        client = scope.get("client")
        return LaneRequest(
            operation_id=operation_id,
            method=scope["method"],
            path=scope["path"],
            headers=headers,
            header_values=values,
            body=body,
            too_large=too_large,
            max_body=self.max_body,
            remote_addr=client[0] if client else None,
            ctx=self.ctx,
            attempt=attempt,
        )

    def respond_in(self, context: contextvars.Context, req: LaneRequest) -> Answer:
        return context.run(self.respond, req)

    def respond(self, req: LaneRequest) -> Answer:
        """The whole response to ``req`` (on a thread of the lane)."""
        started, request_id = begin_request(req.header(REQUEST_ID_HEADER))
        retry = req.attempt is not None and req.attempt.retry
        hit: LaneHit | None = None
        extra: list[tuple[str, str]] = []
        try:
            if not retry:  # a woken pop was counted when it came in
                choices = lane_limit_choices(req.operation_id, req, self.ctx)
                hit = self.limiter.lane_hit(req.operation_id, choices)
                if hit is not None and hit.breached:
                    reset = self.limiter.lane_window(hit)[1]
                    reset = self.limiter.admitted_after(req.operation_id, choices, reset)
                    raise rate_limited(str(hit.item), reset)
            reply = self.views[req.operation_id](req)
            status, payload = reply.status, reply.payload
        except HordeError as error:
            status, payload, extra = error_parts(error)
        except (OperationalError, RedisConnectionError, RedisTimeoutError) as exc:
            status, payload, extra = error_parts(store_unavailable(exc, req.method, req.path))
        except Exception as exc:  # noqa: BLE001 (the app's last handler: a 500, logged)
            status, payload, extra = error_parts(internal_error(exc, req.method, req.path))
        content = encode(payload)
        headers = [("Content-Type", JSON_TYPE), ("Content-Length", str(len(content))), *extra]
        if hit is not None:
            headers = limit_headers(hit, headers, self.limiter)
        headers.append((REQUEST_ID_HEADER, request_id))
        finish_request(
            self.access_log,
            method=req.method,
            route=self.rules[req.operation_id],
            status=status,
            started=started,
            request_id=request_id,
            pop_kind=req.pop_kind,
            logged=not retry,
        )
        encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        return status, encoded, content
