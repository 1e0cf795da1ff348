"""What one front process needs to know: where the native API and Redis are, and its budgets.

Defaults suit ``horde-chat up``; tests and the bench shorten the timings. Every value can
come from the environment through ``FrontConfig.from_env`` (variables in the table).

| variable | default | meaning |
| --- | --- | --- |
| HORDE_FRONT_NATIVE_ROOTS | http://127.0.0.1:7001 | native API roots, comma separated |
| HORDE_SERVICE_PASSKEY | (unset) | sent as X-Horde-Service-Passkey with the client's address |
| HORDE_FRONT_DEADLINE | 540 | seconds a request may wait for its reply (408 after) |
| HORDE_FRONT_GRACE | 20 | seconds is_possible may stay false (503 no_eligible_worker after) |
| HORDE_FRONT_SHUTDOWN_GRACE | 20 | seconds a stopping front lets submitted requests finish |
| HORDE_FRONT_POLL | 10 | fallback status poll period while waiting, in seconds |
| HORDE_FRONT_KEEPALIVE | 5 | seconds of silence on a stream before a keep-alive comment |
| HORDE_FRONT_PER_SOURCE | 64 | open requests per client address |
| HORDE_FRONT_GLOBAL | 20000 | open requests on this process |
| HORDE_FRONT_MAX_BODY_BYTES | derived | body cap (the spec's text and inline-image allowances) |
| HORDE_FRONT_FORWARDED_ALLOW_IPS | (none) | proxies trusted to set X-Forwarded-For (comma list) |
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from runtime.body_caps import DEFAULT_MAX_BODY_BYTES, MAX_INTAKE_SECONDS
from runtime.front.waiter import WaitBudget


def _float(env: dict[str, str], key: str, default: float) -> float:
    raw = env.get(key)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{key} must be a number, got {raw!r}") from exc


@dataclass(frozen=True)
class FrontConfig:
    """One front's wiring and budgets (seconds, bytes, counts)."""

    redis_url: str
    native_roots: tuple[str, ...] = ("http://127.0.0.1:7001",)
    service_passkey: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    body_timeout: float = 30.0
    per_source_cap: int = 64
    global_cap: int = 20000
    deadline: float = 540.0
    grace: float = 20.0
    poll_interval: float = 10.0
    keepalive_interval: float = 5.0
    queue_info_wait: float = 2.0
    submit_timeout: float = 30.0 + MAX_INTAKE_SECONDS  # the native API fetches image URLs
    read_timeout: float = 10.0
    submit_attempts: int = 3
    submit_patience: float = 10.0
    """Seconds a submit refused by the native API's rate limit is held and repeated."""
    client_agent: str = "horde-chat-front:0.1:local"
    forwarded_allow_ips: tuple[str, ...] = ()
    """Proxies whose X-Forwarded-For names the client; none: the client is the peer."""
    shutdown_grace: float = 20.0
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
        env: dict[str, str] | None = None,
        *,
        default_root: str = "http://127.0.0.1:7001",
    ) -> FrontConfig:
        env = dict(os.environ if env is None else env)
        roots = env.get("HORDE_FRONT_NATIVE_ROOTS") or default_root
        return cls(
            redis_url=redis_url,
            native_roots=tuple(r.strip().rstrip("/") for r in roots.split(",") if r.strip()),
            service_passkey=env.get("HORDE_SERVICE_PASSKEY") or None,
            deadline=_float(env, "HORDE_FRONT_DEADLINE", 540.0),
            grace=_float(env, "HORDE_FRONT_GRACE", 20.0),
            shutdown_grace=_float(env, "HORDE_FRONT_SHUTDOWN_GRACE", 20.0),
            poll_interval=_float(env, "HORDE_FRONT_POLL", 10.0),
            keepalive_interval=_float(env, "HORDE_FRONT_KEEPALIVE", 5.0),
            per_source_cap=int(_float(env, "HORDE_FRONT_PER_SOURCE", 64)),
            global_cap=int(_float(env, "HORDE_FRONT_GLOBAL", 20000)),
            max_body_bytes=int(_float(env, "HORDE_FRONT_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)),
            forwarded_allow_ips=tuple(
                ip.strip()
                for ip in env.get("HORDE_FRONT_FORWARDED_ALLOW_IPS", "").split(",")
                if ip.strip()
            ),
        )
