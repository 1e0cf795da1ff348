"""``horde-chat users create``: a user with a starting balance; prints its new API key."""

from __future__ import annotations

import math
import sys
from typing import TextIO

from runtime.config import Settings
from runtime.native.accounts.keys import create_user
from runtime.native.db.migrate import upgrade
from runtime.stores.database import make_engine, make_sessionmaker, transaction
from runtime.stores.embedded import EmbeddedStores


def create_user_command(
    settings: Settings, name: str, kudos: float, concurrency: int, out: TextIO = sys.stdout
) -> str:
    """Create the user in the configured (or embedded) database; returns the API key.

    With the embedded Postgres, ``horde-chat up`` may already run it: the server of a data
    folder is shared, so this works with or without ``up`` running. A NaN or infinite
    balance is refused (ValueError) before anything starts.
    """
    if not math.isfinite(kudos):
        raise ValueError(f"kudos must be a finite number, not {kudos}")
    stores = EmbeddedStores.start(Settings(**{**vars(settings), "redis_url": "unused://"}))
    try:
        upgrade(stores.database_url)
        engine = make_engine(stores.database_url, pool_size=1, max_overflow=0)
        try:
            with transaction(make_sessionmaker(engine)) as session:
                user, api_key = create_user(session, name, kudos=kudos, concurrency=concurrency)
                user_id = user.id
        finally:
            engine.dispose()
    finally:
        stores.stop()
    print(f"user {name}#{user_id} created with {kudos:g} kudos", file=sys.stderr)
    print(api_key, file=out)
    return api_key
