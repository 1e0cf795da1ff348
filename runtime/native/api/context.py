"""What every view of the native app needs, kept on ``app.extensions``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flask import current_app
from redis import Redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from runtime.config import Settings
from runtime.native.queue.policy import Policy

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

    def close(self) -> None:
        """Close the database pools and the Redis client."""
        self.engine.dispose()
        self.autocommit.dispose()
        self.redis.close()


def native() -> NativeContext:
    ctx: NativeContext = current_app.extensions[EXTENSION]
    return ctx
