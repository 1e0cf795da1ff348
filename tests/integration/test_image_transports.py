"""Transports at pop and the worker's fetcher, over the live native API's signed URLs:
url (a signed URL per image), base64 (bytes inline), messages_url (offloaded messages)."""

from __future__ import annotations

import base64
import io
import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from PIL import Image

from generated.errors import UnservableJob
from generated.storage import MESSAGES_URL_TTL_SECONDS, TRANSPORT_BASE64, TRANSPORT_URL
from runtime.config import Settings
from runtime.native.objects.intake import take_in_images
from runtime.native.objects.offload import (
    messages_url,
    offload_if_large,
    offload_threshold,
    serialised,
)
from runtime.native.objects.transport import for_transports, referenced_keys
from runtime.native.server import NativeService
from runtime.stores.objects import JPEG, new_key
from runtime.stores.objects_fs import FilesystemObjectStore
from runtime.worker.fetch import fetch_messages, fetch_signed, inline_image_urls, job_messages

pytestmark = pytest.mark.integration


def _png_url(color: tuple[int, int, int]) -> str:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), color).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


@pytest.fixture
def store(native_service: NativeService) -> FilesystemObjectStore:
    objects = native_service.context.objects
    assert isinstance(objects, FilesystemObjectStore)
    return objects


@pytest.fixture
def stored_messages(store: FilesystemObjectStore) -> list[dict[str, Any]]:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare."},
                {"type": "image_url", "image_url": {"url": _png_url((255, 0, 0))}},
                {"type": "image_url", "image_url": {"url": _png_url((0, 0, 255))}},
            ],
        }
    ]
    return take_in_images(messages, store).messages


def _urls(messages: list[dict[str, Any]]) -> list[str]:
    return [p["image_url"]["url"] for p in messages[0]["content"][1:]]


def _color(jpeg: bytes) -> tuple[int, ...]:
    with Image.open(io.BytesIO(jpeg)) as image:
        return image.convert("RGB").getpixel((8, 8))


def test_a_url_worker_gets_one_signed_url_per_image(
    store: FilesystemObjectStore, stored_messages: list[dict[str, Any]]
) -> None:
    sent = for_transports(stored_messages, store, [TRANSPORT_URL, TRANSPORT_BASE64])
    urls = _urls(sent)
    assert len(urls) == 2
    assert all(u.startswith(store.base_url) for u in urls)
    red, ctype = fetch_signed(urls[0])
    assert ctype == JPEG
    assert _color(red)[0] > 200
    assert stored_messages[0]["content"][1]["image_url"]["url"] != urls[0]  # row untouched
    inlined = job_messages({"messages": sent})
    data = [u.split(",", 1) for u in _urls(inlined)]
    assert all(head == "data:image/jpeg;base64" for head, _ in data)
    assert _color(base64.b64decode(data[1][1]))[2] > 200  # blue stays second


def test_a_base64_worker_gets_the_bytes_inline(
    store: FilesystemObjectStore, stored_messages: list[dict[str, Any]]
) -> None:
    sent = for_transports(stored_messages, store, [TRANSPORT_BASE64])
    keys = referenced_keys(stored_messages)
    for url, key in zip(_urls(sent), keys, strict=True):
        assert url == "data:image/jpeg;base64," + base64.b64encode(store.get(key).data).decode()
    assert inline_image_urls(sent) == sent  # nothing left to fetch


def test_messages_offload_above_the_threshold(
    store: FilesystemObjectStore, stored_messages: list[dict[str, Any]]
) -> None:
    inline = for_transports(stored_messages, store, [TRANSPORT_BASE64])
    size = len(serialised(inline))
    assert offload_if_large(stored_messages, store, threshold=size) is None
    key = offload_if_large(stored_messages, store, threshold=size - 1)
    assert key is not None
    url = messages_url(store, key)
    query = parse_qs(urlsplit(url).query)
    lifetime = int(query["expires"][0]) - int(time.time())
    assert MESSAGES_URL_TTL_SECONDS - 5 <= lifetime <= MESSAGES_URL_TTL_SECONDS == 120
    assert fetch_messages(url) == inline
    assert job_messages({"messages_url": url}) == inline
    assert offload_threshold(Settings(messages_offload_bytes=10)) == 10


def test_the_worker_faults_on_a_failed_fetch(store: FilesystemObjectStore) -> None:
    key = new_key("msg", "json")
    store.put(key, json.dumps([{"role": "user", "content": "hi"}]).encode(), "application/json")
    with pytest.raises(UnservableJob, match="HTTP 403"):
        fetch_messages(store.signed_url(key, -1))  # expired
    with pytest.raises(UnservableJob, match="over 5 bytes"):
        fetch_messages(store.signed_url(key, 60), max_bytes=5)
    store.put(key, b"{not json", "application/json")
    with pytest.raises(UnservableJob, match="not JSON"):
        fetch_messages(store.signed_url(key, 60))
    store.put(key, b'{"role": "user"}', "application/json")
    with pytest.raises(UnservableJob, match="not a messages array"):
        fetch_messages(store.signed_url(key, 60))
    with pytest.raises(UnservableJob, match="could not be fetched"):
        fetch_signed("http://127.0.0.1:9/unreachable", timeout=2)
    with pytest.raises(UnservableJob, match="neither messages nor a messages_url"):
        job_messages({})
    store.put(key, b"[]", "application/json")
    wrong_type = [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]
    wrong_type[0]["content"][0]["image_url"]["url"] = store.signed_url(key, 60)
    with pytest.raises(UnservableJob, match="served application/json"):
        inline_image_urls(wrong_type)
    assert UnservableJob.code == "unservable_job"
