"""Settings of the horde-chat services, read from the environment.

| variable | default | meaning |
| --- | --- | --- |
| HORDE_DATABASE_URL | (unset) | a Postgres URL; unset starts the embedded server |
| HORDE_REDIS_URL | (unset) | a Redis URL; unset starts the embedded server |
| HORDE_DATA_DIR | ./var | where the embedded servers keep their data (survives restarts) |
| HORDE_NATIVE_HOST / HORDE_NATIVE_PORT | 127.0.0.1 / 7001 | the native API |
| HORDE_FRONT_HOST / HORDE_FRONT_PORT | 127.0.0.1 / 7002 | the chat front |
| HORDE_RATE_LIMITS | on | "off" disables flask-limiter (never in production) |
| HORDE_RATE_LIMIT_SCALE | 1 | multiplies every rate limit (load rigs; the suite runs at 1) |
| HORDE_SWEEP_SECONDS | 10 | period of the lifecycle sweep (TTL, expiry) |
| HORDE_SERVICE_PASSKEY | (unset) | the front's passkey: with it, X-Forwarded-For is trusted |
| HORDE_MODERATION_PATTERNS | (unset) | regexes, one per line, refused in chat submissions |
| HORDE_STORAGE_URL | file://<data dir>/objects | object storage (`file:///path`, `s3://...`) |
| HORDE_STORAGE_SECRET | (unset) | signs filesystem-store URLs; unset: a kept random one |
| HORDE_PUBLIC_URL | (unset) | the native API's URL for workers; unset: the bound address |
| HORDE_MESSAGES_OFFLOAD_BYTES | spec | messages (images inlined) above this are offloaded |
| HORDE_IMAGE_FETCH_ALLOW_LOOPBACK | off | tests only: "on" lets image URLs reach loopback |
| HORDE_MAX_BODY_BYTES | derived | the native API's body cap (text + inline-image allowances) |
| HORDE_LOG_FORMAT | plain | the access log of both services: plain or json (JSON lines) |

An S3 URL is ``s3://bucket[/prefix]?endpoint=URL&region=NAME``; its credentials come from
boto3's usual chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, profiles).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _int(env: dict[str, str], key: str, default: int) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{key} must be an integer, got {raw!r}") from exc


@dataclass(frozen=True)
class Settings:
    """Everything a service needs to know about where it runs."""

    database_url: str | None = None
    redis_url: str | None = None
    data_dir: Path = field(default_factory=lambda: Path("var"))
    native_host: str = "127.0.0.1"
    native_port: int = 7001
    front_host: str = "127.0.0.1"
    front_port: int = 7002
    rate_limits_enabled: bool = True
    rate_limit_scale: int = 1
    sweep_seconds: int = 10
    service_passkey: str | None = None
    moderation_patterns: tuple[str, ...] = ()
    storage_url: str | None = None
    storage_secret: str | None = None
    public_url: str | None = None
    messages_offload_bytes: int | None = None
    image_fetch_allow_loopback: bool = False
    max_body_bytes: int | None = None  # None: runtime.body_caps.DEFAULT_MAX_BODY_BYTES

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        return cls(
            database_url=env.get("HORDE_DATABASE_URL") or None,
            redis_url=env.get("HORDE_REDIS_URL") or None,
            data_dir=Path(env.get("HORDE_DATA_DIR") or "var"),
            native_host=env.get("HORDE_NATIVE_HOST") or "127.0.0.1",
            native_port=_int(env, "HORDE_NATIVE_PORT", 7001),
            front_host=env.get("HORDE_FRONT_HOST") or "127.0.0.1",
            front_port=_int(env, "HORDE_FRONT_PORT", 7002),
            rate_limits_enabled=(env.get("HORDE_RATE_LIMITS") or "on").lower() != "off",
            rate_limit_scale=max(1, _int(env, "HORDE_RATE_LIMIT_SCALE", 1)),
            sweep_seconds=max(1, _int(env, "HORDE_SWEEP_SECONDS", 10)),
            service_passkey=env.get("HORDE_SERVICE_PASSKEY") or None,
            moderation_patterns=tuple(
                line for line in (env.get("HORDE_MODERATION_PATTERNS") or "").splitlines() if line
            ),
            storage_url=env.get("HORDE_STORAGE_URL") or None,
            storage_secret=env.get("HORDE_STORAGE_SECRET") or None,
            public_url=(env.get("HORDE_PUBLIC_URL") or "").rstrip("/") or None,
            messages_offload_bytes=_int(env, "HORDE_MESSAGES_OFFLOAD_BYTES", 0) or None,
            image_fetch_allow_loopback=(
                (env.get("HORDE_IMAGE_FETCH_ALLOW_LOOPBACK") or "off").lower() == "on"
            ),
            max_body_bytes=_int(env, "HORDE_MAX_BODY_BYTES", 0) or None,
        )
