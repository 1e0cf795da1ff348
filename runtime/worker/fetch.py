"""The worker's side of object storage: fetch what a chat job points at.

A job carries either ``messages`` (image parts may hold signed URLs, when the worker
declared url) or ``messages_url`` (one signed URL to the whole messages array, images
inlined). ``job_messages(payload)`` returns the messages with every image as a data URL
in OpenAI's image_url form, ready for any OpenAI-compatible backend (which may not reach
the object store itself). A failed fetch raises ``UnservableJob`` with the reason; the
worker submits the job faulted with it.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from generated.chat.names import LIMIT_MAX_IMAGE_BYTES, LIMIT_MAX_IMAGES, PARAM_MESSAGES
from generated.errors import UnservableJob
from generated.storage import IMAGE_URL_KEY, INTAKE_CAPS, PART_IMAGE, TRANSPORT_MESSAGES_URL

DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_IMAGE_FETCH_BYTES = INTAKE_CAPS[LIMIT_MAX_IMAGE_BYTES] * 2  # a JPEG may outgrow its source
# Every image inlined (base64 grows by 4/3), plus the text around them.
MAX_MESSAGES_FETCH_BYTES = INTAKE_CAPS[LIMIT_MAX_IMAGES] * MAX_IMAGE_FETCH_BYTES * 4 // 3 + (
    4 * 1024 * 1024
)
CHUNK = 64 * 1024
FETCHED_SCHEMES = ("http://", "https://")


def fetch_signed(
    url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    max_bytes: int = MAX_IMAGE_FETCH_BYTES,
    client: httpx.Client | None = None,
) -> tuple[bytes, str]:
    """The body and content type at ``url``; UnservableJob on any failure."""
    deadline = time.monotonic() + timeout
    own = client is None
    http = client or httpx.Client(timeout=timeout, follow_redirects=True)
    try:
        with http.stream("GET", url, timeout=timeout) as response:
            if response.status_code != 200:
                raise UnservableJob(
                    detail=f"fetching a signed URL answered HTTP {response.status_code}"
                )
            body = bytearray()
            for chunk in response.iter_bytes(CHUNK):
                body += chunk
                if len(body) > max_bytes:
                    raise UnservableJob(detail=f"a signed URL's object is over {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise UnservableJob(detail=f"a signed URL was not fetched within {timeout} s")
            content_type = response.headers.get("content-type", "").split(";", 1)[0].strip()
            return bytes(body), content_type
    except httpx.HTTPError as exc:
        raise UnservableJob(detail=f"a signed URL could not be fetched ({exc!r})") from None
    finally:
        if own:
            http.close()


def fetch_messages(url: str, **options: Any) -> list[dict[str, Any]]:
    """The offloaded messages array behind a messages_url."""
    options.setdefault("max_bytes", MAX_MESSAGES_FETCH_BYTES)
    body, _type = fetch_signed(url, **options)
    try:
        messages = json.loads(body)
    except ValueError:
        raise UnservableJob(detail="the messages_url object is not JSON") from None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise UnservableJob(detail="the messages_url object is not a messages array")
    return messages


def inline_image_urls(
    messages: list[dict[str, Any]],
    fetch: Callable[[str], tuple[bytes, str]] = fetch_signed,
) -> list[dict[str, Any]]:
    """The messages with every http(s) image URL fetched and replaced by a data URL."""
    out = copy.deepcopy(messages)
    for message in out:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            holder = part.get(PART_IMAGE) if isinstance(part, dict) else None
            if not isinstance(holder, dict):
                continue
            url = holder.get(IMAGE_URL_KEY)
            if isinstance(url, str) and url.startswith(FETCHED_SCHEMES):
                data, content_type = fetch(url)
                if not content_type.startswith("image/"):
                    raise UnservableJob(detail=f"an image URL served {content_type or 'no type'}")
                encoded = base64.b64encode(data).decode("ascii")
                holder[IMAGE_URL_KEY] = f"data:{content_type};base64,{encoded}"
    return out


def job_messages(payload: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    """The job's messages, fetched from messages_url when offloaded, images inlined."""
    url = payload.get(TRANSPORT_MESSAGES_URL)
    if isinstance(url, str):
        messages = fetch_messages(url, **options)
    elif isinstance(payload.get(PARAM_MESSAGES), list):
        messages = payload[PARAM_MESSAGES]
    else:
        raise UnservableJob(detail="the job has neither messages nor a messages_url")
    return inline_image_urls(messages, lambda u: fetch_signed(u, **options))
