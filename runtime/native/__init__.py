"""The native API (upstream AI Horde's ``/api/v2`` text flow) on Postgres and Redis."""
