"""Whether the native API's stores can serve it: Postgres reachable at the schema's head
revision, Redis answering. ``problems`` lists what is wrong (empty: ready); ``/readyz``
answers it and ``horde-chat native`` refuses to start on it."""

from __future__ import annotations

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from runtime.native.db.migrate import head_revision, revision_on

HEAD = head_revision()


def database_problems(engine: Engine) -> list[str]:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            current = revision_on(conn)
    except SQLAlchemyError as exc:
        return [f"postgres unreachable: {type(exc).__name__}: {_first_line(exc)}"]
    if current != HEAD:
        return [
            f"schema behind: the database is at revision {current or 'none'}, this code needs "
            f"{HEAD} (run horde-chat migrate)"
        ]
    return []


def redis_problems(redis: Redis) -> list[str]:
    try:
        redis.ping()
    except RedisError as exc:
        return [f"redis unreachable: {type(exc).__name__}: {_first_line(exc)}"]
    return []


def problems(engine: Engine, redis: Redis) -> list[str]:
    return database_problems(engine) + redis_problems(redis)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]
