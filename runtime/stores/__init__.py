"""The stores the services share: Postgres (SQLAlchemy 2, psycopg 3), Redis (redis-py) and
object storage.

``EmbeddedStores`` starts the embedded servers (or takes the configured URLs);
``database`` makes engines and transactions; ``redis_client`` makes sync clients;
``objects`` opens the object store (``objects_fs``: files under the data folder with
``url_signing``'s HMAC-signed URLs; ``objects_s3``: any S3-compatible service).
"""
