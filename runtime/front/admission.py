"""Admission, all before anything is submitted: caps, body size, key, validation.

``Admission.admit(source)`` holds one of the per-source and global slots for the whole
request (reply or stream included) and refuses with 503 FrontAtCapacity before the body is
read. ``read_body`` enforces the size limit (413) and the body deadline (408).
``api_key_of`` reads the bearer token (none: the anonymous key). ``checked_request`` parses
the JSON, drops the front's default no-ops and runs the shared validator; it returns the
body to forward and the normalised request.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.requests import ClientDisconnect, Request

from generated.chat.names import HORDE_DRY_RUN
from generated.errors import (
    BodyReadTimeout,
    FrontAtCapacity,
    InvalidAPIKey,
    InvalidJSON,
    InvalidPayload,
    NulByteInPayload,
    PayloadTooLarge,
    UnsupportedChatParameter,
)
from generated.routes import HEADER_AUTHORIZATION
from generated.wire import ANONYMOUS_API_KEY
from runtime import strict_json
from runtime.contract.validator import drop_front_defaults, horde_option, validate_chat_request

BEARER = "bearer "


class ClientGone(Exception):
    """The client closed its connection."""


class Admission:
    """Open-request counters of one front process (one event loop: no lock needed)."""

    def __init__(self, per_source_cap: int, global_cap: int) -> None:
        self.per_source_cap = per_source_cap
        self.global_cap = global_cap
        self.by_source: Counter[str] = Counter()
        self.total = 0

    @contextmanager
    def admit(self, source: str) -> Iterator[None]:
        if self.total >= self.global_cap:
            raise FrontAtCapacity(scope="global cap")
        if self.by_source[source] >= self.per_source_cap:
            raise FrontAtCapacity(scope="per-source cap")
        self.total += 1
        self.by_source[source] += 1
        try:
            yield
        finally:
            self.total -= 1
            self.by_source[source] -= 1
            if self.by_source[source] <= 0:
                del self.by_source[source]


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole body, refused at ``limit`` bytes (413) or after ``timeout`` seconds (408)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(limit=limit)
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(limit=limit)
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError as exc:
        raise BodyReadTimeout(seconds=timeout) from exc
    except ClientDisconnect as exc:
        raise ClientGone() from exc
    return b"".join(chunks)


def api_key_of(request: Request) -> str:
    """The bearer token; without Authorization, the anonymous key (as the native API)."""
    header = request.headers.get(HEADER_AUTHORIZATION)
    if header is None:
        return ANONYMOUS_API_KEY
    if not header[: len(BEARER)].lower() == BEARER or not header[len(BEARER) :].strip():
        raise InvalidAPIKey()
    key = header[len(BEARER) :].strip()
    if len(key) > 100 or not key.isprintable():
        raise InvalidAPIKey()
    return key


def checked_request(raw: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the body to forward, the normalised request), or the validator's refusal."""
    try:
        body = strict_json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidJSON(detail=str(exc)) from exc
    if strict_json.has_nul(body):
        raise NulByteInPayload()
    where = strict_json.non_finite(body)
    if where is not None:
        raise InvalidPayload(field=where, problem="a number must be finite", param=where)
    forward = drop_front_defaults(body) if isinstance(body, dict) else body
    request = validate_chat_request(forward)
    if horde_option(request, HORDE_DRY_RUN):
        where = f"horde.{HORDE_DRY_RUN}"
        raise UnsupportedChatParameter(
            key=where,
            reason="A kudos quote is served by the native chat route, not the chat front",
            param=where,
        )
    return forward, request
