"""Admission, all before anything is submitted: caps, body size, key, validation.

``Admission.admit(source)`` holds one of the per-source and global slots for the whole
request (reply or stream included) and refuses with 503 FrontAtCapacity before the body is
read. ``read_body`` enforces the size limit (413) and the body deadline (408).
``api_key_of`` reads the bearer token (none: the anonymous key). ``checked_request`` holds
the body to its text and inline-image allowances (runtime.body_caps: before the parse from
the raw bytes, after it exactly), parses it (runtime.strict_json: any depth, non-finite
numbers, lone surrogates and NUL are 400s), drops the front's default no-ops and runs the
shared validator (item caps first); it returns the body to forward and the normalised
request. ``admitted_body`` is what a request awaits: the same, with the body to forward
encoded, run on a small thread pool for a body over ``OFF_LOOP_BYTES`` so that one client's
large body does not hold the event loop (and every other client) while it is parsed.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from starlette.requests import ClientDisconnect, Request

from generated.chat.names import HORDE_DRY_RUN
from generated.errors import (
    BodyReadTimeout,
    FrontAtCapacity,
    HordeError,
    InvalidAPIKey,
    InvalidJSON,
    InvalidPayload,
    NulByteInPayload,
    PayloadTooLarge,
    UnsupportedChatParameter,
)
from generated.routes import HEADER_AUTHORIZATION
from generated.wire import ANONYMOUS_API_KEY
from runtime import body_caps, strict_json
from runtime.contract.validator import drop_front_defaults, horde_option, validate_chat_request

BEARER = "bearer "
OFF_LOOP_BYTES = 16 * 1024
"""Bodies larger than this are parsed and validated on ``PARSE_POOL``, not the event loop."""
PARSE_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="front-parse")
"""Two threads: parsing holds the GIL in C, so more would only queue behind each other."""


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
    """(the body to forward, the normalised request), or the refusal: 413 for a body over
    an allowance, 400 for malformed JSON or a request the validator refuses."""
    body_caps.check_allowances(len(raw), body_caps.inline_image_bound(raw))
    try:
        body = strict_json.parse(raw, lift=body_caps.DATA_IMAGE)  # images: not json-scanned
    except strict_json.Malformed as bad:
        raise _refusal(bad) from None  # the traceback would only repeat the body's problem
    body_caps.check_allowances(len(raw), body_caps.inline_image_bytes_in(body))
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


def _refusal(bad: strict_json.Malformed) -> HordeError:
    """The front's 400 for a malformed body (strict_json's kinds)."""
    if bad.kind == "nul":
        return NulByteInPayload()
    if bad.kind == "non_finite":
        return InvalidPayload(field=bad.path, problem=bad.problem, param=bad.path)
    return InvalidJSON(detail=str(bad))


def _checked_and_encoded(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    forward, request = checked_request(raw)
    return json.dumps(forward, separators=(",", ":"), ensure_ascii=False).encode(), request


async def admitted_body(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    """(the body to forward, encoded; the normalised request), or the refusal; off the
    event loop for a body over ``OFF_LOOP_BYTES``."""
    if len(raw) <= OFF_LOOP_BYTES:
        return _checked_and_encoded(raw)
    return await asyncio.get_running_loop().run_in_executor(PARSE_POOL, _checked_and_encoded, raw)
