"""What every view of the native app needs, kept on ``app.extensions``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask import current_app
from redis import Redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from runtime.config import Settings
from runtime.native.queue.policy import Policy
from runtime.native.stats.cache import Kept

if TYPE_CHECKING:
    from runtime.stores.objects import ObjectStore

EXTENSION = "horde_native"


@dataclass
class NativeContext:
    settings: Settings
    engine: Engine
    autocommit: Engine
    """The same database without transactions (``stores.database.autocommit_engine``)."""
    sessions: sessionmaker[Session]
    snapshots: sessionmaker[Session]
    """Read-only transactions that see one snapshot (``stores.database.snapshot_sessionmaker``):
    a status, whose request row and jobs must agree."""
    redis: Redis
    policy: Policy
    objects: ObjectStore | None = None  # set once the service knows its URL
    kept: dict[str, Kept[Any]] = field(default_factory=dict)
    """The public figures this process keeps for a few seconds, by route (``stats``)."""

    def keep(self, name: str) -> Kept[Any]:
        """The kept figure ``name`` (kept for ``Policy.public_stats_seconds``)."""
        return self.kept.setdefault(name, Kept(self.policy.public_stats_seconds))

    def close(self) -> None:
        """Close the database pools and the Redis client."""
        self.engine.dispose()
        self.autocommit.dispose()
        self.redis.close()


def native() -> NativeContext:
    ctx: NativeContext = current_app.extensions[EXTENSION]
    return ctx
