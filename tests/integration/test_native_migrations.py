"""The Alembic migrations build exactly the schema the SQLAlchemy models describe."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from runtime.native.db.migrate import current_revision
from runtime.native.db.tables import Base
from runtime.stores.embedded_postgres import sqlalchemy_url

pytestmark = pytest.mark.integration


def test_migrated_schema_matches_the_models(horde_stores):
    engine = create_engine(sqlalchemy_url(horde_stores.database_url))
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []
    assert current_revision(horde_stores.database_url) is not None
