"""What one front process needs to know: where the native API and Redis are, and its budgets.

Defaults suit ``horde-chat up``; tests and the bench shorten the timings. The fields bound
to a variable of spec/config.yaml (generated.config: its type, default and meaning) come
from the environment through ``FrontConfig.from_env``; the others are the front's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from generated.config import (
    HORDE_FRONT_DEADLINE,
    HORDE_FRONT_FORWARDED_ALLOW_IPS,
    HORDE_FRONT_GLOBAL,
    HORDE_FRONT_GRACE,
    HORDE_FRONT_KEEPALIVE,
    HORDE_FRONT_MAX_BODY_BYTES,
    HORDE_FRONT_NATIVE_ROOTS,
    HORDE_FRONT_PER_SOURCE,
    HORDE_FRONT_POLL,
    HORDE_FRONT_SHUTDOWN_GRACE,
    HORDE_SERVICE_PASSKEY,
)
from generated.defences import BODY_DEADLINE_SECONDS
from runtime.body_caps import DEFAULT_MAX_BODY_BYTES, MAX_INTAKE_SECONDS
from runtime.front.waiter import WaitBudget
from runtime.tables.config import derived_setting, read_settings, setting


@dataclass(frozen=True)
class FrontConfig:
    """One front's wiring and budgets (seconds, bytes, counts)."""

    redis_url: str
    native_roots: tuple[str, ...] = setting(HORDE_FRONT_NATIVE_ROOTS)
    service_passkey: str | None = setting(HORDE_SERVICE_PASSKEY)
    max_body_bytes: int = derived_setting(HORDE_FRONT_MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES)
    body_timeout: float = BODY_DEADLINE_SECONDS
    per_source_cap: int = setting(HORDE_FRONT_PER_SOURCE)
    global_cap: int = setting(HORDE_FRONT_GLOBAL)
    deadline: float = setting(HORDE_FRONT_DEADLINE)
    grace: float = setting(HORDE_FRONT_GRACE)
    poll_interval: float = setting(HORDE_FRONT_POLL)
    keepalive_interval: float = setting(HORDE_FRONT_KEEPALIVE)
    queue_info_wait: float = 2.0
    submit_timeout: float = 30.0 + MAX_INTAKE_SECONDS  # the native API fetches image URLs
    read_timeout: float = 10.0
    submit_attempts: int = 3
    submit_patience: float = 10.0
    """Seconds a submit refused by the native API's rate limit is held and repeated."""
    client_agent: str = "horde-chat-front:0.1:local"
    forwarded_allow_ips: tuple[str, ...] = setting(HORDE_FRONT_FORWARDED_ALLOW_IPS)
    """Proxies whose X-Forwarded-For names the client; none: the client is the peer."""
    shutdown_grace: float = setting(HORDE_FRONT_SHUTDOWN_GRACE)
    """Seconds a stopping front (SIGTERM) lets submitted requests finish before it cancels
    them and answers 503 front_shutting_down (20 + the cancel's wait fits a 30 s stop)."""

    def proxy_options(self) -> dict[str, Any]:
        """uvicorn's proxy settings: X-Forwarded-For (and -Proto) are read only from the
        configured proxies, and not at all without one, so a client (a local one included:
        uvicorn trusts loopback by default) cannot pick the address the per-source caps and
        the native API see."""
        return {
            "proxy_headers": bool(self.forwarded_allow_ips),
            "forwarded_allow_ips": list(self.forwarded_allow_ips),
        }

    @property
    def budget(self) -> WaitBudget:
        return WaitBudget(self.deadline, self.grace, self.poll_interval, self.queue_info_wait)

    @classmethod
    def from_env(
        cls,
        redis_url: str,
        env: Mapping[str, str] | None = None,
        *,
        default_root: str | None = None,
    ) -> FrontConfig:
        """The front's settings from ``env``; ``default_root`` (the native API ``up``
        started) stands for HORDE_FRONT_NATIVE_ROOTS when that is unset."""
        unset = {} if default_root is None else {"native_roots": (default_root,)}
        return read_settings(cls, env, redis_url=redis_url, **unset)
