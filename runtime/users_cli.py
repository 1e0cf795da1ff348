"""``horde-chat users create``: a user with a starting balance; prints its new API key.

The user must land in the database the running horde reads: ``HORDE_DATABASE_URL``'s, or
the embedded server of ``HORDE_DATA_DIR`` while ``horde-chat up`` (``make run``) runs it.
Without either the command refuses (``HordeNotRunning``) rather than start a fresh embedded
database in a folder the horde may never read (another working directory's ``./var``).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import TextIO

from runtime.config import Settings
from runtime.native.accounts.keys import create_user
from runtime.native.db.migrate import upgrade
from runtime.stores.database import make_engine, make_sessionmaker, transaction
from runtime.stores.embedded import EmbeddedStores


class HordeNotRunning(RuntimeError):
    """No database to create the user in: none configured, none running in the data folder."""


def running_postgres(data_dir: Path) -> bool:
    """Whether an embedded Postgres runs on ``data_dir``'s ``postgres`` folder: its
    ``postmaster.pid`` names a live process (a crash leaves a stale one)."""
    pid_file = data_dir / "postgres" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except PermissionError:  # alive, run by another user (the postgres system user)
        return True
    except (OSError, ValueError):
        return False
    return True


def check_reachable(settings: Settings) -> None:
    """Refuse (HordeNotRunning) unless a database is configured or the embedded one of the
    data folder runs."""
    if settings.database_url or running_postgres(settings.data_dir):
        return
    folder = settings.data_dir.resolve()
    raise HordeNotRunning(
        f"no horde database is running for the data folder {folder} (HORDE_DATA_DIR), and "
        "HORDE_DATABASE_URL is not set. Start the horde first (`make run`, or `horde-chat "
        "up`, from the same folder or with the same HORDE_DATA_DIR), or set "
        "HORDE_DATABASE_URL to its Postgres; the user is not created in a new database the "
        "running horde would not read."
    )


def create_user_command(
    settings: Settings, name: str, kudos: float, concurrency: int, out: TextIO = sys.stdout
) -> str:
    """Create the user in the configured database, or the embedded one ``horde-chat up``
    runs on the data folder (the server of a data folder is shared); returns the API key.

    Refused before anything starts: a NaN or infinite balance (ValueError), and a data
    folder with no running server when no database is configured (HordeNotRunning).
    """
    if not math.isfinite(kudos):
        raise ValueError(f"kudos must be a finite number, not {kudos}")
    check_reachable(settings)
    stores = EmbeddedStores.start(Settings(**{**vars(settings), "redis_url": "unused://"}))
    try:
        upgrade(stores.database_url)
        engine = make_engine(stores.database_url, pool_size=1)
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
