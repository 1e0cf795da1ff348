"""Images of a stored request, sent by the popping worker's declared transport.

Called at pop after the commits that release the queue's row lock (docs/design.md, "Images"):
``url`` gives one signed URL per image, ``base64`` only inlines the JPEG bytes as data
URLs. Messages without references come back unchanged.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterable
from typing import Any

from generated.storage import (
    IMAGE_URL_KEY,
    IMAGE_URL_TTL_SECONDS,
    PART_IMAGE,
    TRANSPORT_BASE64,
    TRANSPORT_URL,
)
from runtime.native.objects.intake import referenced_key
from runtime.stores.objects import JPEG, ObjectStore


def referenced_keys(messages: list[dict[str, Any]]) -> list[str]:
    """The object keys the stored messages refer to, in order."""
    return [key for _holder, key in _references(messages)]


def has_images(messages: list[dict[str, Any]]) -> bool:
    return bool(referenced_keys(messages))


def with_signed_urls(
    messages: list[dict[str, Any]], store: ObjectStore, ttl_seconds: int = IMAGE_URL_TTL_SECONDS
) -> list[dict[str, Any]]:
    return _replaced(messages, lambda key: store.signed_url(key, ttl_seconds))


def with_inline_images(messages: list[dict[str, Any]], store: ObjectStore) -> list[dict[str, Any]]:
    return _replaced(messages, lambda key: data_url(store.get(key).data))


def for_transports(
    messages: list[dict[str, Any]], store: ObjectStore, transports: Iterable[str]
) -> list[dict[str, Any]]:
    """The messages as a worker declaring ``transports`` receives them inline: signed URLs
    when it declares url, else the bytes inlined (base64, every worker's default)."""
    declared = set(transports)
    if not has_images(messages):
        return messages
    if TRANSPORT_URL in declared:
        return with_signed_urls(messages, store)
    if TRANSPORT_BASE64 in declared:
        return with_inline_images(messages, store)
    raise ValueError("the worker declares no image transport; eligibility should exclude it")


def data_url(jpeg: bytes) -> str:
    return f"data:{JPEG};base64,{base64.b64encode(jpeg).decode('ascii')}"


def _references(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    found = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            holder = part.get(PART_IMAGE) if isinstance(part, dict) else None
            if isinstance(holder, dict):
                key = referenced_key(str(holder.get(IMAGE_URL_KEY, "")))
                if key is not None:
                    found.append((holder, key))
    return found


def _replaced(
    messages: list[dict[str, Any]], url_for: Callable[[str], str]
) -> list[dict[str, Any]]:
    out = copy.deepcopy(messages)
    for holder, key in _references(out):
        holder[IMAGE_URL_KEY] = url_for(key)
    return out
