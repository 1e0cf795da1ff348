"""flask-limiter on the Redis store: upstream's limits per IP and per API key.

The chat routes count per source: the connection's address, or the forwarded client
address when the chat front presents the service passkey (``service_passkey``).
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask, request
from flask_limiter import Limiter

from generated.routes import HEADER_APIKEY
from runtime.native.accounts.keys import hash_key
from runtime.native.api.context import native
from runtime.native.api.service_passkey import source_address
from runtime.native.queue.policy import RateLimits
from runtime.stores.redis_client import limiter_storage_uri


def remote_address() -> str:
    return request.remote_addr or "unknown"


def source_identity() -> str:
    """The client's source: forwarded by a trusted front, else the connection's address."""
    return source_address(native().settings)


def api_key_identity() -> str:
    """The key's digest (never the key itself), or the address when no key is sent."""
    key = request.headers.get(HEADER_APIKEY)
    return f"key:{hash_key(key)}" if key else f"ip:{remote_address()}"


def make_limiter(app: Flask, redis_url: str, enabled: bool) -> Limiter:
    return Limiter(
        remote_address,
        app=app,
        storage_uri=limiter_storage_uri(redis_url),
        strategy="fixed-window",
        key_prefix="horde:limits",
        headers_enabled=True,
        enabled=enabled,
    )


def route_limits(limits: RateLimits) -> dict[str, list[tuple[str, Callable[[], str]]]]:
    """Per operation id: (limit, key function) pairs."""
    status = [(limits.status, remote_address)]
    pop_submit = [(limits.pop_submit_ip, remote_address)]
    return {
        "text_async": [
            (limits.text_async_ip, remote_address),
            (limits.text_async_key, api_key_identity),
        ],
        "text_status": status,
        "text_cancel": status,
        "text_pop": pop_submit,
        "text_submit": pop_submit,
        "chat_async": [
            (limits.text_async_ip, source_identity),
            (limits.text_async_key, api_key_identity),
        ],
        "chat_status": [(limits.status, source_identity)],
        "chat_cancel": [(limits.status, source_identity)],
        "text_progress": pop_submit,
    }
