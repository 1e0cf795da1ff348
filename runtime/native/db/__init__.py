"""The database: table definitions and the Alembic migrations that create them."""
