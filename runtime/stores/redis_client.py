"""Sync redis-py clients (the native API's side; the front uses redis.asyncio)."""

from __future__ import annotations

import redis


def redis_client(url: str) -> redis.Redis:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URLs, answering str."""
    return redis.Redis.from_url(url, decode_responses=True)


def limiter_storage_uri(url: str) -> str:
    """The same server spelled for flask-limiter's ``limits`` storage."""
    if url.startswith("unix://"):
        return "redis+unix://" + url[len("unix://") :]
    return url
