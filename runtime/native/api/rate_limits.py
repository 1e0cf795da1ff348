"""flask-limiter on the Redis store, with generated.rate_limits (spec/rate_limits.yaml).

A limit is counted on the client's address and route (``client_route``: the front's
forwarded address beside the right passkey, else the connection's), the API key's digest and
route (``key_route``; the anonymous key gets ``anonymous``) or the connection's address
(``peer``); the front's own calls count against a ``service`` budget.
Values are read from ``Policy.rate_limits`` on every call, so a test can raise one limit in
a running service. The workers' lane counts them without Flask (``HordeLimiter.lane_hit``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from flask import Flask, Response, request
from flask_limiter import Limiter
from flask_limiter.constants import HeaderNames
from limits import RateLimitItem, parse_many

from generated.errors import RateLimited
from generated.rate_limits import KEY_CLIENT_ROUTE, KEY_KEY_ROUTE, KEY_PEER
from generated.routes import HEADER_APIKEY
from generated.wire import ANONYMOUS_API_KEY
from runtime.config import Settings
from runtime.contract.errors import RETRY_AFTER_MS
from runtime.native.accounts.keys import hash_key
from runtime.native.api.context import native
from runtime.native.api.limit_storage import CountingRedisStorage, storage_uri
from runtime.native.api.service_passkey import passkey_in, source_of
from runtime.stores.redis_client import limiter_storage_uri
from runtime.tables.rate_limits import RateLimit

if TYPE_CHECKING:
    from runtime.native.api.context import NativeContext

KeyFunction = Callable[[], str]
LimitValue = Callable[[], str]
LIMITER = "horde_limiter"
"""The app's ``extensions`` key of its ``HordeLimiter`` (flask-limiter keeps only a weak
reference to itself)."""


def rate_limited(limit: str, reset: float | None) -> RateLimited:
    """The refusal of a request over ``limit``, asking the client to wait until ``reset``
    (the breached window's end, epoch seconds; the limiter's store reads it to the
    millisecond), so a client waits the window out to its end and no longer; the spec's
    Retry-After if the end is unknown."""
    if reset is None:  # the class's retry_after is then the spec's
        return RateLimited(limit=limit, seconds=RateLimited.default_retry_after)
    wait = max(math.ceil((reset - time.time()) * 1000), 1) / 1000  # as retry-after-ms
    return RateLimited(limit=limit, seconds=f"{wait:.2f}", retry_after=wait)


class Caller(Protocol):
    """What a limit reads of a request (flask's, through ``FLASK_CALLER``, or the lane's)."""

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def remote_addr(self) -> str | None: ...

    def header(self, name: str) -> str | None: ...


class _FlaskCaller:
    """flask's current request as a ``Caller``."""

    @property
    def method(self) -> str:
        return request.method

    @property
    def path(self) -> str:
        return request.path

    @property
    def remote_addr(self) -> str | None:
        return request.remote_addr

    def header(self, name: str) -> str | None:
        return request.headers.get(name)


FLASK_CALLER = _FlaskCaller()


def _peer(caller: Caller, settings: Settings) -> str:
    """The connection's address (``peer``)."""
    return caller.remote_addr or "unknown"


def remote_address() -> str:
    """The connection's address of flask's request (flask-limiter's default key)."""
    return _peer(FLASK_CALLER, native().settings)


def _route(caller: Caller) -> str:
    return f"{caller.method}@{caller.path}"


def _client_route(caller: Caller, settings: Settings) -> str:
    """The client's address, the method and the path (upstream's get_request_path)."""
    return f"{source_of(caller.remote_addr, caller.header, settings)}@{_route(caller)}"


def _api_key(caller: Caller) -> str:
    return caller.header(HEADER_APIKEY) or ANONYMOUS_API_KEY


def _key_route(caller: Caller, settings: Settings) -> str:
    """The API key's digest (never the key), the method and the path (upstream's
    get_request_api_key; no key counts as the anonymous one)."""
    return f"key:{hash_key(_api_key(caller))}@{_route(caller)}"


KEY_FUNCTIONS: dict[str, Callable[[Caller, Settings], str]] = {
    KEY_CLIENT_ROUTE: _client_route,
    KEY_KEY_ROUTE: _key_route,
    KEY_PEER: _peer,
}


def _service_key(caller: Caller, settings: Settings) -> str:
    """The chat front's service budget: its connection's address (the route is the scope)."""
    return f"service:{_peer(caller, settings)}"


def current_limit(operation_id: str, index: int) -> RateLimit:
    """The route's limit as the service's policy holds it now (a test may raise one)."""
    return native().policy.rate_limits[operation_id][index]


def choose(limit: RateLimit, caller: Caller, settings: Settings) -> tuple[str, str]:
    """One limit's (value, key) for ``caller``: the service budget for the chat front, the
    anonymous value for the anonymous key, else the limit on its key."""
    if limit.service is not None and passkey_in(caller.header, settings):
        return _times(limit.service, settings.rate_limit_scale), _service_key(caller, settings)
    if limit.anonymous is not None and _api_key(caller) == ANONYMOUS_API_KEY:
        chosen = limit.anonymous
    else:
        chosen = limit.limit
    return _times(chosen, settings.rate_limit_scale), KEY_FUNCTIONS[limit.key](caller, settings)


def lane_limit_choices(
    operation_id: str, caller: Caller, ctx: NativeContext
) -> list[tuple[str, str]]:
    """Each limit's (value, key) of ``operation_id`` for ``caller``, read from the policy
    now (a test may raise one)."""
    return [choose(limit, caller, ctx.settings) for limit in ctx.policy.rate_limits[operation_id]]


def limit_functions(operation_id: str, index: int) -> tuple[LimitValue, KeyFunction]:
    """flask-limiter's (limit value, key function) for one limit of the table, read from the
    policy on every call."""

    def value() -> str:
        return choose(current_limit(operation_id, index), FLASK_CALLER, native().settings)[0]

    def key() -> str:
        return choose(current_limit(operation_id, index), FLASK_CALLER, native().settings)[1]

    return value, key


@functools.cache
def _parsed(value: str) -> tuple[RateLimitItem, ...]:
    """A limit string parsed once (flask-limiter parses it on every request)."""
    return tuple(parse_many(value))


@dataclass
class LaneHit:
    """The limit a lane request's headers describe: the one it breached, else the first
    (shortest window) it was counted on."""

    item: RateLimitItem
    args: tuple[str, ...]
    breached: bool
    count: int | None = None
    """The window's count after the hit, with ``reset`` (the script's answer); None when
    counted in memory (Redis down: the fallback limiter's window is read instead)."""
    reset: float = 0.0


class HordeLimiter(Limiter):
    """flask-limiter with the workers' lane's check (``lane_hit``) beside its decorators.

    ``lane_hit`` is flask-limiter's decorator check for a route without default,
    application or meta limits, minus its per-request resolution: the limits are counted in
    the same order (shortest window first, stopping at the first breach) on the same keys
    (``LIMITER/<prefix>/<key>/<operation id>/<amount>/<multiples>/<granularity>``), on
    Redis through ``CountingRedisStorage.incr_ttl`` (one script call a limit), or, while
    the storage is marked dead, on the in-memory fallback limiter. The dead flag, its
    recovery check and their log lines are flask-limiter's own (the same attributes), so
    both paths fall back and recover together. Written against flask-limiter 4.1.
    """

    def lane_hit(self, operation_id: str, choices: list[tuple[str, str]]) -> LaneHit | None:
        """Count a lane request on its limits ((value, key) each); the hit its headers
        describe (``breached`` when refused), or None (no limits, disabled, or the storage
        failing without a fallback: fail open, logged)."""
        if not (self.enabled and self.initialized) or not choices:
            return None
        try:
            return self._lane_hits(operation_id, choices)
        except Exception:
            if self._in_memory_fallback_enabled and not self._storage_dead:
                self.logger.warning(
                    "Rate limit storage unreachable - falling back to in-memory storage"
                )
                self._storage_dead = True
                return self.lane_hit(operation_id, choices)
            if not self._swallow_errors:
                raise
            self.logger.exception("Failed to rate limit. Swallowing error")
            return None

    def _lane_hits(self, operation_id: str, choices: list[tuple[str, str]]) -> LaneHit | None:
        if self._storage_dead and self._fallback_limiter is not None:
            check_backend = self._Limiter__should_check_backend  # type: ignore[attr-defined]
            if check_backend() and self.storage.check():
                self.logger.info("Rate limit storage recovered")
                self._storage_dead = False
                self._Limiter__check_backend_count = 0
        items = [(item, key) for value, key in choices for item in _parsed(value)]
        items.sort(key=lambda pair: pair[0].GRANULARITY.seconds)  # flask-limiter's order
        first: LaneHit | None = None
        storage = self.storage
        for item, key in items:
            if not key:
                self.logger.error(f"Skipping limit: {item}. Empty value found in parameters.")
                continue
            args = self._window_args(key, operation_id)
            if self._storage_dead or not isinstance(storage, CountingRedisStorage):
                hit = LaneHit(item, args, not self.limiter.hit(item, *args))
            else:
                count, reset = storage.incr_ttl(item.key_for(*args), item.get_expiry())
                hit = LaneHit(item, args, count > item.amount, count, reset)
            if hit.breached:
                self.logger.info(
                    "ratelimit %s (%s) exceeded at endpoint: %s", item, key, operation_id
                )
                return hit  # fail on the first breach (flask-limiter's default)
            first = first or hit
        return first

    def _window_args(self, key: str, scope: str) -> tuple[str, ...]:
        """A limit window's identifiers, as flask-limiter builds them (prefix, key, scope)."""
        return (*([self._key_prefix] if self._key_prefix else []), key, scope)

    def admitted_after(self, scope: str, choices: list[tuple[str, str]], reset: float) -> float:
        """When a refused caller is next admitted: ``reset`` (the breached window's end), or
        later while another of the route's windows is already full. The limits are counted
        one after another, so two windows of the same length opened by one request end a
        little apart; a client told the first end would be refused again by the second. A
        window that cannot be read is left out (the refusal still has ``reset``). ``scope``:
        the limits' scope (the lane's operation id; the Flask view's, as flask-limiter keys
        it), ``choices`` the route's (value, key) pairs."""
        latest = reset
        for value, key in choices:
            for item in _parsed(value):
                args = self._window_args(key, scope)
                try:
                    end, remaining = self.limiter.get_window_stats(item, *args)
                except Exception:  # noqa: BLE001  # a store error: this window is left out
                    continue
                if remaining <= 0:
                    latest = max(latest, end)
        return latest

    def lane_window(self, hit: LaneHit) -> tuple[int, float]:
        """(remaining, reset time) of ``hit``'s window."""
        if hit.count is not None:
            return max(0, hit.item.amount - hit.count), hit.reset
        reset, remaining = self.limiter.get_window_stats(hit.item, *hit.args)
        return remaining, reset


def limit_headers(
    hit: LaneHit, headers: list[tuple[str, str]], limiter: HordeLimiter
) -> list[tuple[str, str]]:
    """``headers`` with flask-limiter's X-RateLimit-Limit, -Remaining and -Reset added and
    its Retry-After set (the window's end, or an error's own Retry-After if later); the
    names are flask-limiter's ``HeaderNames``."""
    remaining, reset = limiter.lane_window(hit)
    reset_at = int(reset + 1)
    out = [
        *headers,
        (HeaderNames.LIMIT.value, str(hit.item.amount)),
        (HeaderNames.REMAINING.value, str(remaining)),
        (HeaderNames.RESET.value, str(reset_at)),
    ]
    now = time.time()
    retry_name = HeaderNames.RETRY_AFTER.value
    is_retry = [name.lower() == retry_name.lower() for name, _ in out]
    existing = [value for (_, value), found in zip(out, is_retry, strict=True) if found]
    # an error's own wait (``retry_headers``: its Retry-After is its wait rounded up), never
    # cut by the window's end rounded down (flask-limiter's rule, which can say 0)
    own = int(existing[0]) if existing and existing[0].isdigit() else 0
    if own:
        reset_at = max(int(now + own), reset_at)
    retry_after = str(max(int(reset_at - now), own))
    at = next((i for i, found in enumerate(is_retry) if found), None)
    if at is None:
        out.append((retry_name, retry_after))
    else:  # werkzeug's Headers.set: the first in place, any other removed
        out = [pair for i, pair in enumerate(out) if i == at or not is_retry[i]]
        out[at] = (retry_name, retry_after)
    return out


def own_wait(header: Callable[[str], str | None]) -> int:
    """Whole seconds, rounded up, of the wait an answer's own retry-after-ms asks for (0
    without one); ``header`` reads the answer's headers (a Flask answer's Retry-After is
    flask-limiter's by then)."""
    own = header(RETRY_AFTER_MS)
    return math.ceil(int(own) / 1000) if own is not None and own.isdigit() else 0


def _retry_after_covers_the_wait(response: Response) -> Response:
    """flask-limiter sets Retry-After to its window's end in whole seconds rounded down, so a
    refusal whose window ends within the second would say 0; an answer carrying its own wait
    (retry-after-ms) says at least that wait, rounded up, as the lane's ``limit_headers``
    has it say."""
    wait = own_wait(response.headers.get)
    current = response.headers.get(HeaderNames.RETRY_AFTER.value)
    if wait and current is not None and current.isdigit() and int(current) < wait:
        response.headers[HeaderNames.RETRY_AFTER.value] = str(wait)
    return response


def make_limiter(app: Flask, redis_url: str, enabled: bool) -> HordeLimiter:
    """flask-limiter on ``app``, its limits only the routes' decorators (``route_limits``).

    flask-limiter checks every request twice: in a before_request hook (the default and
    application limits, the routes' own being left to their decorators) and in the route's
    decorator. This limiter has no default or application limits, so the hook counted
    nothing and found nothing, at a cost (docs/performance.md): it is removed. The
    decorators' check is the same (it also notices Redis coming back)."""
    # Flask runs its after_request functions last registered first: this one after
    # flask-limiter's, which sets Retry-After
    app.after_request(_retry_after_covers_the_wait)
    limiter = HordeLimiter(
        remote_address,
        app=app,
        # one Redis round trip per limit, the headers' reads included (limit_storage)
        storage_uri=storage_uri(limiter_storage_uri(redis_url)),
        strategy="fixed-window",
        key_prefix="horde:limits",
        headers_enabled=True,
        enabled=enabled,
        # Redis down: fail open to per-process in-memory counting (flask-limiter logs one
        # warning when it falls back and one line when Redis is back), never a 500
        in_memory_fallback_enabled=True,
        swallow_errors=True,
    )
    manager = limiter.limit_manager
    hooks = app.before_request_funcs.get(None, [])
    registered = limiter._check_request_limit in hooks  # a disabled limiter registers none
    if registered and not manager.default_limits and not manager.application_limits:
        hooks.remove(limiter._check_request_limit)
    return limiter


def route_limits(
    table: Mapping[str, tuple[RateLimit, ...]],
) -> dict[str, list[tuple[LimitValue, KeyFunction]]]:
    """Per operation id: a (limit value, key function) pair per limit of ``table``."""
    return {
        op: [limit_functions(op, i) for i in range(len(limits))] for op, limits in table.items()
    }


def _times(value: str, factor: int) -> str:
    """``value`` multiplied by ``factor`` (HORDE_RATE_LIMIT_SCALE; 1 keeps it)."""
    if factor == 1:
        return value
    amount, rest = value.split(" ", 1)
    return f"{int(amount) * factor} {rest}"
