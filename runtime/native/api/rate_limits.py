"""flask-limiter on the Redis store, with generated.rate_limits (spec/rate_limits.yaml).

Each limit names what it is counted on (``key``): ``client_route`` the client's address
(forwarded by the chat front beside the right service passkey, else the connection's) with
the method and path; ``key_route`` the API key's digest with the method and path; ``peer``
the connection's address. The anonymous key gets a ``key_route`` limit's ``anonymous``
value. A call presenting the right service passkey on a route with a ``service`` budget is
the front's own traffic: it is counted on the front (its connection's address) against
that budget instead of on the client. The values are read from the service's policy
(``Policy.rate_limits``, the generated table) on every call, so a test that needs more of
one route's limit raises that one in the running service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flask import Flask, request
from flask_limiter import Limiter

from generated.rate_limits import KEY_CLIENT_ROUTE, KEY_KEY_ROUTE, KEY_PEER, RateLimit
from generated.routes import HEADER_APIKEY
from generated.wire import ANONYMOUS_API_KEY
from runtime.native.accounts.keys import hash_key
from runtime.native.api.context import native
from runtime.native.api.limit_storage import storage_uri
from runtime.native.api.service_passkey import presents_passkey, source_address
from runtime.native.asgi import pop_attempt
from runtime.stores.redis_client import limiter_storage_uri

KeyFunction = Callable[[], str]
LimitValue = Callable[[], str]


def remote_address() -> str:
    """The connection's address (``peer``)."""
    return request.remote_addr or "unknown"


def _route() -> str:
    return f"{request.method}@{request.path}"


def client_route() -> str:
    """The client's address, the method and the path (upstream's get_request_path)."""
    return f"{source_address(native().settings)}@{_route()}"


def _api_key() -> str:
    return request.headers.get(HEADER_APIKEY) or ANONYMOUS_API_KEY


def key_route() -> str:
    """The API key's digest (never the key), the method and the path (upstream's
    get_request_api_key; no key counts as the anonymous one)."""
    return f"key:{hash_key(_api_key())}@{_route()}"


KEY_FUNCTIONS: dict[str, KeyFunction] = {
    KEY_CLIENT_ROUTE: client_route,
    KEY_KEY_ROUTE: key_route,
    KEY_PEER: remote_address,
}


def _front_service() -> bool:
    return presents_passkey(native().settings)


def service_key() -> str:
    """The chat front's service budget: its connection's address (the route is the scope)."""
    return f"service:{remote_address()}"


def current_limit(operation_id: str, index: int) -> RateLimit:
    """The route's limit as the service's policy holds it now (a test may raise one)."""
    return native().policy.rate_limits[operation_id][index]


def limit_functions(operation_id: str, index: int) -> tuple[LimitValue, KeyFunction]:
    """flask-limiter's (limit value, key function) for one limit of the table, read from the
    policy on every call."""

    def value() -> str:
        limit = current_limit(operation_id, index)
        if limit.service is not None and _front_service():
            chosen = limit.service
        elif limit.anonymous is not None and _api_key() == ANONYMOUS_API_KEY:
            chosen = limit.anonymous
        else:
            chosen = limit.limit
        return _times(chosen, native().settings.rate_limit_scale)

    def key() -> str:
        limit = current_limit(operation_id, index)
        if limit.service is not None and _front_service():
            return service_key()
        return KEY_FUNCTIONS[limit.key]()

    return value, key


def is_retry() -> bool:
    """A waiting pop popping again after a wake (runtime.native.asgi): the pop that waits
    was counted once, when it came in."""
    attempt = pop_attempt(request.environ)
    return attempt is not None and attempt.retry


def make_limiter(app: Flask, redis_url: str, enabled: bool) -> Limiter:
    """flask-limiter on ``app``, its limits only the routes' decorators (``route_limits``).

    flask-limiter checks every request twice: in a before_request hook (the default and
    application limits, the routes' own being left to their decorators) and in the route's
    decorator. This limiter has no default or application limits, so the hook counted
    nothing and found nothing (~10% of the workers' lane's server time, issue 14): it is
    removed. The decorators' check is the same (it also notices Redis coming back)."""
    limiter = Limiter(
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
