"""Settings of the horde-chat services, read from the environment.

Each field is bound to its variable of spec/config.yaml (generated.config), which gives its
type, default and meaning (generated/docs/config.md is the operator's table); an S3 URL's
credentials come from boto3's usual chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
profiles).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from generated.config import (
    HORDE_DATA_DIR,
    HORDE_DATABASE_URL,
    HORDE_FRONT_HOST,
    HORDE_FRONT_PORT,
    HORDE_IMAGE_FETCH_ALLOW_LOOPBACK,
    HORDE_MAX_BODY_BYTES,
    HORDE_MESSAGES_OFFLOAD_BYTES,
    HORDE_MODERATION_DEFAULTS,
    HORDE_MODERATION_PATTERNS,
    HORDE_NATIVE_HOST,
    HORDE_NATIVE_PORT,
    HORDE_PUBLIC_URL,
    HORDE_RATE_LIMIT_SCALE,
    HORDE_RATE_LIMITS,
    HORDE_REDIS_URL,
    HORDE_SERVICE_PASSKEY,
    HORDE_STORAGE_SECRET,
    HORDE_STORAGE_URL,
    HORDE_SWEEP_SECONDS,
)
from runtime.tables.config import read_settings, setting


@dataclass(frozen=True)
class Settings:
    """Everything a service needs to know about where it runs."""

    database_url: str | None = setting(HORDE_DATABASE_URL)
    redis_url: str | None = setting(HORDE_REDIS_URL)
    data_dir: Path = setting(HORDE_DATA_DIR)
    native_host: str = setting(HORDE_NATIVE_HOST)
    native_port: int = setting(HORDE_NATIVE_PORT)
    front_host: str = setting(HORDE_FRONT_HOST)
    front_port: int = setting(HORDE_FRONT_PORT)
    rate_limits_enabled: bool = setting(HORDE_RATE_LIMITS)
    rate_limit_scale: int = setting(HORDE_RATE_LIMIT_SCALE)
    sweep_seconds: int = setting(HORDE_SWEEP_SECONDS)
    service_passkey: str | None = setting(HORDE_SERVICE_PASSKEY)
    moderation_patterns: tuple[str, ...] = setting(HORDE_MODERATION_PATTERNS)
    moderation_defaults: bool = setting(HORDE_MODERATION_DEFAULTS)
    storage_url: str | None = setting(HORDE_STORAGE_URL)
    storage_secret: str | None = setting(HORDE_STORAGE_SECRET)
    public_url: str | None = setting(HORDE_PUBLIC_URL)
    messages_offload_bytes: int | None = setting(HORDE_MESSAGES_OFFLOAD_BYTES)
    image_fetch_allow_loopback: bool = setting(HORDE_IMAGE_FETCH_ALLOW_LOOPBACK)
    max_body_bytes: int | None = setting(HORDE_MAX_BODY_BYTES)
    """None: runtime.body_caps.DEFAULT_MAX_BODY_BYTES."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        return read_settings(cls, env)
