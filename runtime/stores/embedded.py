"""Start the stores a service needs: the configured servers, or the embedded ones.

``EmbeddedStores.start(settings)`` starts an embedded server only for a URL that is
not configured, and ``stop()`` stops only what it started. It is a context manager.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

from runtime.config import Settings
from runtime.stores.embedded_postgres import EmbeddedPostgres, sqlalchemy_url
from runtime.stores.embedded_redis import EmbeddedRedis


@dataclass
class EmbeddedStores:
    database_url: str
    redis_url: str
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None

    @classmethod
    def start(cls, settings: Settings) -> EmbeddedStores:
        postgres = redis = None
        try:
            if settings.database_url:
                database_url = sqlalchemy_url(settings.database_url)
            else:
                postgres = EmbeddedPostgres.start(settings.data_dir / "postgres")
                database_url = postgres.url
            if settings.redis_url:
                redis_url = settings.redis_url
            else:
                redis = EmbeddedRedis.start(settings.data_dir / "redis")
                redis_url = redis.url
        except BaseException:
            if postgres is not None:
                postgres.stop()
            raise
        return cls(database_url=database_url, redis_url=redis_url, postgres=postgres, redis=redis)

    def describe(self) -> list[str]:
        """One line per store: where it listens and whether we started it."""
        pg = f"embedded, socket in {self.postgres.socket_dir}" if self.postgres else "external"
        rd = f"embedded, data in {self.redis.data_dir}" if self.redis else "external"
        return [f"postgres: {self.database_url} ({pg})", f"redis:    {self.redis_url} ({rd})"]

    def stop(self) -> None:
        errors: list[BaseException] = []
        for server in (self.redis, self.postgres):
            if server is None:
                continue
            try:
                server.stop()
            except Exception as exc:  # stop the other one anyway
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> EmbeddedStores:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
