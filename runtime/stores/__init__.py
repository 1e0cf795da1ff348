"""The stores every service shares: Postgres (SQLAlchemy 2, psycopg 3) and Redis (redis-py).

``EmbeddedStores`` starts the embedded servers (or takes the configured URLs);
``database`` makes engines and transactions; ``redis_client`` makes sync clients.
"""
