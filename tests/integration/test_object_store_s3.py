"""The S3 backend against a real S3-protocol server started locally (moto's standalone
server on a free port), not mocked calls.

moto does not check presigned signatures or expiry, so refusing a tampered or expired
presigned URL is the S3 service's part and is not asserted here; the URL's expiry is.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from moto.server import ThreadedMotoServer

from generated.errors import ObjectNotFound
from runtime.config import Settings
from runtime.stores.objects import JPEG, new_key, open_object_store
from runtime.stores.objects_s3 import S3ObjectStore

CREDENTIALS = {"access_key_id": "horde-test", "secret_access_key": "horde-test-secret"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_store(s3_endpoint: str) -> S3ObjectStore:
    store = S3ObjectStore(
        bucket=f"horde-{uuid.uuid4().hex[:12]}",
        prefix="chat",
        endpoint_url=s3_endpoint,
        **CREDENTIALS,
    )
    store.create_bucket()
    store.create_bucket()  # idempotent
    return store


def test_put_get_delete_round_trip(s3_store: S3ObjectStore) -> None:
    key = new_key("img", "jpg")
    s3_store.put(key, b"\xff\xd8jpeg", JPEG)
    stored = s3_store.get(key)
    assert (stored.data, stored.content_type) == (b"\xff\xd8jpeg", JPEG)
    listing = s3_store.client.list_objects_v2(Bucket=s3_store.bucket)
    assert [o["Key"] for o in listing["Contents"]] == [f"chat/{key}"]
    s3_store.delete(key)
    with pytest.raises(ObjectNotFound):
        s3_store.get(key)


def test_a_presigned_url_downloads_the_object(s3_store: S3ObjectStore) -> None:
    key = new_key("msg", "json")
    s3_store.put(key, b'[{"role":"user","content":"hi"}]', "application/json")
    url = s3_store.signed_url(key, 120)
    query = parse_qs(urlsplit(url).query)
    assert query["X-Amz-Expires"] == ["120"]
    assert urlsplit(url).path.endswith(f"/chat/{key}")
    reply = httpx.get(url)
    assert reply.status_code == 200
    assert reply.content == b'[{"role":"user","content":"hi"}]'


def test_the_storage_url_selects_the_s3_backend(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS["access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS["secret_access_key"])
    bucket = f"horde-{uuid.uuid4().hex[:12]}"
    settings = Settings(storage_url=f"s3://{bucket}/deep/prefix?endpoint={s3_endpoint}")
    store = open_object_store(settings, base_url="http://unused")
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix) == (bucket, "deep/prefix/")
    store.create_bucket()
    store.put("img-a.jpg", b"a", JPEG)
    assert httpx.get(store.signed_url("img-a.jpg", 60)).content == b"a"


def test_a_storage_url_without_bucket_is_refused() -> None:
    with pytest.raises(ValueError, match="names no bucket"):
        open_object_store(Settings(storage_url="s3://?endpoint=http://x"), base_url="http://a")
