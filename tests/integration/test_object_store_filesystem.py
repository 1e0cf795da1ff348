"""The filesystem object store and its signed URLs, served by the live native API."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from runtime.config import Settings
from runtime.native.server import NativeService
from runtime.stores.objects import JPEG, new_key, open_object_store
from runtime.stores.objects_fs import FilesystemObjectStore

pytestmark = pytest.mark.integration


@pytest.fixture
def store(native_service: NativeService) -> FilesystemObjectStore:
    objects = native_service.context.objects
    assert isinstance(objects, FilesystemObjectStore)
    return objects


def _with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()} | changes
    return parts._replace(query=urlencode(query)).geturl()


def test_a_signed_url_downloads_its_object(store: FilesystemObjectStore) -> None:
    key = new_key("img", "jpg")
    store.put(key, b"\xff\xd8jpeg bytes", JPEG)
    url = store.signed_url(key, 60)
    assert url.startswith(store.base_url + "/api/v2/objects/" + key + "?")
    reply = httpx.get(url)
    assert reply.status_code == 200
    assert reply.content == b"\xff\xd8jpeg bytes"
    assert reply.headers["content-type"] == JPEG
    assert reply.headers["cache-control"] == "private, no-store"


def test_an_expired_url_is_refused(store: FilesystemObjectStore) -> None:
    key = new_key("img", "jpg")
    store.put(key, b"x", JPEG)
    reply = httpx.get(store.signed_url(key, -10))
    assert reply.status_code == 403
    assert reply.json()["rc"] == "ObjectURLExpired"


def test_a_tampered_url_is_refused(store: FilesystemObjectStore) -> None:
    key = new_key("img", "jpg")
    store.put(key, b"x", JPEG)
    url = store.signed_url(key, 60)
    signature = parse_qs(urlsplit(url).query)["signature"][0]
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]
    for bad in (
        _with_query(url, signature=flipped),
        _with_query(url, expires=str(int(parse_qs(urlsplit(url).query)["expires"][0]) + 3600)),
        url.split("?")[0],
    ):
        reply = httpx.get(bad)
        assert reply.status_code == 403, bad
        body = reply.json()
        assert body["rc"] == "ObjectURLInvalid"
        assert body["message"].startswith("This object URL is not valid")


def test_a_url_cannot_be_reused_for_another_object(store: FilesystemObjectStore) -> None:
    mine, other = new_key("img", "jpg"), new_key("img", "jpg")
    store.put(mine, b"mine", JPEG)
    store.put(other, b"other", JPEG)
    url = store.signed_url(mine, 60)
    reply = httpx.get(url.replace(mine, other))
    assert reply.status_code == 403
    assert reply.json()["rc"] == "ObjectURLInvalid"


def test_a_deleted_object_is_not_found(store: FilesystemObjectStore) -> None:
    key = new_key("msg", "json")
    store.put(key, b"[]", "application/json")
    url = store.signed_url(key, 60)
    store.delete(key)
    store.delete(key)  # deleting twice is fine
    reply = httpx.get(url)
    assert reply.status_code == 404
    assert reply.json() == {"message": f"No stored object '{key}'.", "rc": "ObjectNotFound"}


def test_replicas_on_one_folder_share_the_kept_secret(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    first = open_object_store(settings, base_url="http://a")
    second = open_object_store(settings, base_url="http://b")
    assert isinstance(first, FilesystemObjectStore)
    assert isinstance(second, FilesystemObjectStore)
    assert first.root == tmp_path.resolve() / "objects"
    query = parse_qs(urlsplit(first.signed_url("img-a.jpg", 60)).query)
    second.verify("img-a.jpg", query["expires"][0], query["signature"][0])


def test_a_configured_secret_and_public_url_are_used(tmp_path: Path) -> None:
    settings = Settings(
        storage_url=(tmp_path / "elsewhere").as_uri(),
        storage_secret="configured",
        public_url="https://horde.example",
    )
    store = open_object_store(settings, base_url="http://127.0.0.1:1")
    assert isinstance(store, FilesystemObjectStore)
    assert store.root == tmp_path / "elsewhere"
    assert store.signed_url("img-a.jpg", 60).startswith("https://horde.example/api/v2/objects/")
    assert not (tmp_path / "elsewhere" / ".signing-secret").exists()


@pytest.mark.parametrize("key", ["../etc", ".hidden", "a/b", ""])
def test_keys_that_could_leave_the_folder_are_refused(tmp_path: Path, key: str) -> None:
    store = FilesystemObjectStore(tmp_path, base_url="http://a", secret="s")
    with pytest.raises(ValueError, match="not a valid object key"):
        store.put(key, b"x", JPEG)


def test_an_unknown_storage_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="file:// or s3://"):
        open_object_store(Settings(storage_url="ftp://x"), base_url="http://a")
