"""The front's calls to the native API over HTTP: submit, status, cancel, models.

Every call carries the service passkey, the client's address where made for a client (so
rate limits count on the right budget) and the front's request id (``x-request-id``). A
lost submit is repeated, byte for byte with its operation key, on the next root, so the
client is charged once; ``cancel_operation`` cancels an orphan by that key. Calls go over
one ``aiohttp.ClientSession``, which costs less CPU a call than httpx, httpcore and anyio
(docs/performance.md).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import random
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
from aiohttp.payload import TOO_LARGE_BYTES_BODY

from generated.errors import HordeError, HordeUnavailable, RateLimited
from generated.routes import (
    HEADER_APIKEY,
    HEADER_CLIENT_AGENT,
    HEADER_X_HORDE_SERVICE_PASSKEY,
    HEADER_X_OPERATION_KEY,
    ROUTES,
)
from generated.wire import HEADER_FORWARDED_FOR
from generated.wire.native import ActiveModel, ChatAccepted, ChatStatus
from runtime.contract.errors import RETRY_AFTER, RETRY_AFTER_MS
from runtime.front.errors import from_native
from runtime.observability.context import REQUEST_ID_HEADER

log = logging.getLogger(__name__)

JSON = "application/json"
NOT_FOUND = 404


LOST = (aiohttp.ClientError, TimeoutError)
"""A call that got no whole answer: refused, reset, timed out, or a malformed response."""
NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
"""Failures that prove the request never reached the native API: no connection was made, or
none came free in time (aiohttp's connect timeout covers the wait for a pooled one)."""
KEEPALIVE_SECONDS = 4.0
"""An idle pooled connection is closed after this long: before the native API's uvicorn
closes it (its keep-alive is 5 s), so a call rarely goes out on a connection being closed."""
RATE_LIMIT_JITTER = 0.1
"""A submit refused by the native rate limit waits its retry-after and up to this share of it
more (``_held_for_rate_limit``)."""


def native_session(max_in_flight: int = 100) -> aiohttp.ClientSession:
    """The session the front's native calls share (its pool: ``max_in_flight`` connections);
    create it on the running loop and close it (``async with``) when the front stops."""
    connector = aiohttp.TCPConnector(
        limit=max_in_flight, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS
    )
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),  # the native API's answers set none we use
        auto_decompress=True,
    )


def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    """``seconds`` for the connection (and the wait for a pooled one) and for each read of
    the answer, as httpx's timeout was; the whole call within three times that (connect,
    send, answer), which also bounds a body the native API stopped reading."""
    return aiohttp.ClientTimeout(
        total=3 * seconds, connect=seconds, sock_connect=seconds, sock_read=seconds
    )


@dataclass(frozen=True)
class Answer:
    """A native API response, read whole (its connection already back in the pool)."""

    status_code: int
    content: bytes
    headers: Mapping[str, str]

    def json(self) -> Any:
        return json.loads(self.content)


class SubmitLost(HordeUnavailable):
    """Every submit attempt was lost; ``maybe_queued``: one may have reached the native API
    (its response was lost), so the Horde may hold the request and a retry could charge twice."""

    def __init__(self, *, detail: str, maybe_queued: bool) -> None:
        super().__init__(detail=detail)
        self.maybe_queued = maybe_queued


class Transient(HordeUnavailable):
    """A status read or cancel the native API answered 429 or 5xx: try again after
    ``retry_after`` (the native API's Retry-After, if it sent one)."""

    def __init__(self, *, detail: str, retry_after: float | None) -> None:
        super().__init__(detail=detail, retry_after=retry_after)


TRANSIENT_STATUS = 429
"""Besides any 5xx: a rate limit, which passes."""
ORPHAN_CANCEL_ATTEMPTS = 5
ORPHAN_CANCEL_BACKOFF = 0.5
"""A cancel by operation key (after a submit lost on every attempt) is tried this many
times, the pauses doubling from this many seconds (at most 5): about 7.5 s in all."""


def _transient(response: Answer) -> bool:
    return response.status_code == TRANSIENT_STATUS or response.status_code >= 500


class RequestGone(Exception):
    """The native API does not know the request (expired or removed)."""


@dataclass(frozen=True)
class Accepted:
    """A queued (or recovered) chat request."""

    request_id: str
    kudos: float
    attempts: int
    status: ChatStatus | None = None
    """The status the native API answered the submit with (ChatAccepted.status): what a
    first status read gives; None when it sent none."""


def new_operation_key() -> str:
    """A fresh key for one client request (URL-safe, as X-Operation-Key requires)."""
    return secrets.token_urlsafe(24)


def _retry_after(response: Answer) -> float | None:
    """The wait the native API asks for, in seconds: its retry-after-ms (a rate limit's
    window to its end), else its Retry-After (whole seconds); None if it sent neither, or
    sent them malformed or negative."""
    for name, scale in ((RETRY_AFTER_MS, 1000), (RETRY_AFTER, 1)):
        raw = response.headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw) / scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _is_native_refusal(response: Answer) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "rc" in body and "message" in body


def _no_request_id() -> str | None:
    return None


class NativeClient:
    """HTTP to the native API roots, in turn, from one ``aiohttp.ClientSession``
    (``native_session``); ``request_id`` gives the id of the client request being served,
    sent as ``x-request-id`` on each call (None: none is sent). Reads and the cancel move
    to the next root on a transport failure. Each call's timeout bounds the connection
    (with the wait for a pooled one) and each read of the answer; no redirect is followed."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        roots: tuple[str, ...],
        *,
        passkey: str | None,
        client_agent: str,
        submit_attempts: int = 3,
        submit_timeout: float = 30.0,
        submit_patience: float = 10.0,
        read_timeout: float = 10.0,
        max_in_flight: int = 100,
        request_id: Callable[[], str | None] = _no_request_id,
    ) -> None:
        if not roots:
            raise ValueError("at least one native API root is required")
        self.http = http
        self.request_id = request_id
        self.roots = roots
        self.passkey = passkey
        self.client_agent = client_agent
        self.submit_attempts = max(1, submit_attempts)
        self.submit_timeout = submit_timeout
        self.submit_patience = submit_patience
        self.read_timeout = read_timeout
        self._submit_timeout = _timeout(submit_timeout)
        self._read_timeout = _timeout(read_timeout)
        self._next = 0
        # thousands of calls queued on the pool itself would each hold a waiter there (and
        # time out waiting for a connection); the semaphore queues them in O(1) and keeps
        # the pool's queue short.
        self._slots = asyncio.Semaphore(max_in_flight)

    def _root(self, attempt: int) -> str:
        return self.roots[(self._next + attempt) % len(self.roots)]

    def _headers(self, source: str | None = None) -> dict[str, str]:
        headers = {HEADER_CLIENT_AGENT: self.client_agent}
        request_id = self.request_id()
        if request_id is not None:
            headers[REQUEST_ID_HEADER] = request_id
        if self.passkey:
            headers[HEADER_X_HORDE_SERVICE_PASSKEY] = self.passkey
            if source:
                headers[HEADER_FORWARDED_FOR] = source
        return headers

    async def submit(
        self, body: bytes, *, api_key: str, operation_key: str, source: str
    ) -> Accepted:
        """Queue the request (or recover it by operation key after a lost response).

        Sends the client's key and a fresh operation key; returns the first status the
        native API answered with. A lost response (timeout, reset, refused connection, or a
        5xx without the native ``{message, rc}`` shape) is repeated with identical bytes and
        key on the next root; the native API answers a repeat with the request it holds. A
        refused connection costs no attempt while another root has not refused too. A
        native refusal becomes its HordeError; every attempt lost raises ``SubmitLost``."""
        route = ROUTES["chat_async"]
        headers = {
            **self._headers(source),
            HEADER_APIKEY: api_key,
            HEADER_X_OPERATION_KEY: operation_key,
            "Content-Type": JSON,
        }
        last: str = "no attempt"
        maybe_queued = False
        loop = asyncio.get_running_loop()
        began = loop.time()
        rate_limited = 0  # submits the native limiter refused: nothing was queued, not attempts
        # a root that refused the connection never saw the submit: not an attempt while
        # another root may still answer (a native API that stopped would otherwise take two
        # of the three attempts from the one still serving)
        refused = refused_in_a_row = 0
        attempt = 0
        while attempt - rate_limited - refused < self.submit_attempts:
            attempt += 1
            url = self._root(attempt - 1) + route.path
            try:
                response = await self._call("POST", url, headers, self._submit_timeout, body)
            except LOST as exc:
                sent = not isinstance(exc, NOT_SENT)
                maybe_queued = maybe_queued or sent
                refused_in_a_row = 0 if sent else refused_in_a_row + 1
                if 0 < refused_in_a_row < len(self.roots):
                    refused += 1
                last = f"{type(exc).__name__} ({exc}) from {url}"
                log.warning("submit attempt %d lost (%s); repeating", attempt, last)
                continue
            refused_in_a_row = 0
            if response.status_code >= 500 and not _is_native_refusal(response):
                last = f"{response.status_code} from {url}"
                continue
            if response.status_code >= 400:
                error = from_native(
                    response.status_code, response.content, retry_after=_retry_after(response)
                )
                if await self._held_for_rate_limit(error, loop.time() - began):
                    rate_limited += 1
                    continue
                raise error
            payload: ChatAccepted = response.json()
            if "id" not in payload:
                raise HordeUnavailable(detail="the native API returned no request id")
            self._next = (self._next + attempt - 1) % len(self.roots)
            status = payload.get("status")
            malformed = not isinstance(status, dict)  # the native JSON is not trusted
            return Accepted(
                str(payload["id"]),
                float(payload.get("kudos", 0)),
                attempt,
                None if malformed else status,
            )
        raise SubmitLost(
            detail=f"the submit was lost {self.submit_attempts} times ({last})",
            maybe_queued=maybe_queued,
        )

    async def _held_for_rate_limit(self, error: HordeError, waited: float) -> bool:
        """A burst from one client meets the native API's submit limit (2 a second): the
        refused submit queued nothing, so the front waits out the limit and submits again,
        within ``submit_patience`` seconds, instead of handing the client a 429. SDKs retry a
        429 after exactly its Retry-After, all together, so a burst of 8 would lose some.

        The wait is the refusal's own (retry-after-ms: the window to its end) and up to a
        tenth more, so the submits a burst holds do not all come back in the same
        millisecond. (Until 2026-12-05 it was Retry-After's whole second times 1 to 2: a
        client sending back to back waited 1-2 s on every other request, for a window that
        ended in under one.)"""
        if not isinstance(error, RateLimited) or error.retry_after is None:
            return False  # (a RateLimited without the native API's wait has the spec's)
        pause = error.retry_after * (1.0 + RATE_LIMIT_JITTER * random.random())
        if waited + pause > self.submit_patience:
            return False
        await asyncio.sleep(pause)
        return True

    async def _call(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        limits: aiohttp.ClientTimeout,
        body: bytes | None = None,
    ) -> Answer:
        """One call, its answer read whole; raises one of ``LOST`` when none came."""
        async with (
            self._slots,
            self.http.request(
                method,
                url,
                data=_payload(body),
                headers=headers,
                timeout=limits,
                allow_redirects=False,
            ) as response,
        ):
            return Answer(response.status, await response.read(), response.headers)

    async def _read(
        self,
        method: str,
        path: str,
        source: str | None = None,
        *,
        extra: dict[str, str] | None = None,
    ) -> Answer:
        last = "no attempt"
        headers = {**self._headers(source), **(extra or {})}
        for attempt in range(len(self.roots)):
            url = self._root(attempt) + path
            try:
                response = await self._call(method, url, headers, self._read_timeout)
            except LOST as exc:
                last = f"{type(exc).__name__} from {url}"
                continue
            if response.status_code >= 500 and not _is_native_refusal(response):
                last = f"{response.status_code} from {url}"
                continue
            return response
        raise HordeUnavailable(detail=last)

    async def _json(self, method: str, path: str) -> Any:
        response = await self._read(method, path)
        if response.status_code >= 400:
            raise from_native(response.status_code, response.content)
        return response.json()

    async def status(self, request_id: str, source: str | None = None) -> ChatStatus:
        """The chat status read for the client at ``source``; ``RequestGone`` when the native
        API no longer knows the id, ``Transient`` on a 429 or 5xx."""
        path = ROUTES["chat_status"].path.format(id=request_id)
        response = await self._read("GET", path, source)
        if response.status_code == NOT_FOUND:
            raise RequestGone(request_id)
        if _transient(response):
            raise Transient(
                detail=f"the status read was answered {response.status_code}",
                retry_after=_retry_after(response),
            )
        if response.status_code >= 400:
            raise from_native(response.status_code, response.content)
        return cast(ChatStatus, dict(response.json()))

    async def cancel_once(self, request_id: str, source: str | None = None) -> bool:
        """One cancel for the client at ``source``: True once the native API confirmed it
        (or no longer knows the request), False on a refusal that a repeat cannot change
        (logged); ``Transient`` (or HordeUnavailable) when it is worth repeating."""
        path = ROUTES["chat_cancel"].path.format(id=request_id)
        response = await self._read("DELETE", path, source)
        if response.status_code < 400 or response.status_code == NOT_FOUND:
            return True
        if _transient(response):
            raise Transient(
                detail=f"the cancel was answered {response.status_code}",
                retry_after=_retry_after(response),
            )
        refused = from_native(response.status_code, response.content)
        log.warning("cancel of %s refused: %s", request_id, refused.message)
        return False

    async def cancel_operation(
        self, operation_key: str, *, api_key: str, source: str | None = None
    ) -> bool:
        """Cancel the request that a submit lost on every attempt may have queued, by its
        operation key (as the client's user), repeating on lost and transient answers: True
        once confirmed (cancelled, or the native API holds no request with that key)."""
        path = ROUTES["chat_cancel_operation"].path.format(key=operation_key)
        for attempt in range(ORPHAN_CANCEL_ATTEMPTS):
            if attempt:
                await asyncio.sleep(min(ORPHAN_CANCEL_BACKOFF * 2 ** (attempt - 1), 5.0))
            try:
                response = await self._read("DELETE", path, source, extra={HEADER_APIKEY: api_key})
            except HordeUnavailable as lost:
                log.warning("cancel of operation %s lost: %s", operation_key, lost.message)
                continue
            if response.status_code < 400 or response.status_code == NOT_FOUND:
                return True
            if not _transient(response):
                refused = from_native(response.status_code, response.content)
                log.warning("cancel of operation %s refused: %s", operation_key, refused.message)
                return False
        log.warning("cancel of operation %s never confirmed", operation_key)
        return False

    async def models(self) -> list[ActiveModel]:
        """The native active-models list (text models, with chat_count)."""
        return list(await self._json("GET", ROUTES["models"].path))


def _payload(body: bytes | None) -> bytes | io.BytesIO | None:
    """A body as aiohttp sends it: bytes, or over aiohttp's 1 MiB a stream it reads in chunks
    (given the bytes it warns, a ResourceWarning, which the test suite's warnings-as-errors
    turned into a 500 on a request with large inline images). A new stream each call: a
    repeated submit sends it again from its start."""
    if body is None or len(body) <= TOO_LARGE_BYTES_BODY:
        return body
    return io.BytesIO(body)
