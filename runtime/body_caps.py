"""How large a chat request body may be, on the native API and on the front.

The spec (spec/storage/objects.yaml, ``body``) gives two allowances, the text and the inline
images; the default body cap is their sum, so a larger body is refused 413 before it is
parsed (HORDE_MAX_BODY_BYTES, HORDE_FRONT_MAX_BODY_BYTES change it). Within the cap each
allowance is held on its own (``check_allowances``): from the raw bytes before the parse
(``inline_image_bound``), exactly after it (``inline_image_bytes_in``).
"""

from __future__ import annotations

import math
from typing import Any

from generated.chat.names import LIMIT_MAX_IMAGES, PARAM_MESSAGES
from generated.errors import PayloadTooLarge
from generated.storage import (
    BODY_INLINE_IMAGE_BYTES,
    BODY_TEXT_BYTES,
    FETCH_TIMEOUT_SECONDS,
    IMAGE_URL_KEY,
    INTAKE_CAPS,
    PART_IMAGE,
)

TEXT_BODY_BYTES = BODY_TEXT_BYTES
"""Everything but the inline images: messages, tools, schemas and the rest of the request."""
INLINE_IMAGE_BYTES = BODY_INLINE_IMAGE_BYTES
"""Every inline image's data URL (with its JSON quotes), all together."""
DATA_URL_HEADER_BYTES = 64
"""``data:image/<type>;base64,`` and the JSON around one image part, with room to spare."""
DATA_URL = "data:"

DATA_IMAGE = b'"data:image'
"""How a JSON string holding an image data URL begins."""


def inline_image_bytes(max_image_bytes: int) -> int:
    """The length of one image of ``max_image_bytes`` as a data URL."""
    return 4 * math.ceil(max_image_bytes / 3) + DATA_URL_HEADER_BYTES


def default_max_body_bytes() -> int:
    return TEXT_BODY_BYTES + INLINE_IMAGE_BYTES


DEFAULT_MAX_BODY_BYTES = default_max_body_bytes()

MAX_INTAKE_SECONDS = INTAKE_CAPS[LIMIT_MAX_IMAGES] * FETCH_TIMEOUT_SECONDS
"""The longest the native API may spend fetching a request's image URLs: the front's
submit timeout leaves room for it."""
"""The longest image intake at submit: every image URL fetched at its timeout, in turn."""


def inline_image_bound(raw: bytes) -> int:
    """Bytes of ``raw`` from each ``"data:image`` to the next quote, both counted: at least
    the inline images' bytes, found without parsing or copying (two ``find`` per image).

    Whatever such a span holds costs the parser one string: it is either inside a string
    (no quote ends it before the next quote), or it follows a quote that closed a string,
    where the JSON is invalid at its first letter and the parse stops there. So a body
    whose text is over its allowance by this bound is refused without being parsed."""
    total = 0
    start = raw.find(DATA_IMAGE)
    while start >= 0:
        end = raw.find(b'"', start + 1)
        if end < 0:
            break
        total += end + 1 - start
        start = raw.find(DATA_IMAGE, end + 1)
    return total


def inline_image_bytes_in(body: Any) -> int:
    """Bytes the image parts' data URLs of a parsed body took in its JSON (quotes included;
    a data URL is ASCII, so its length is its bytes, escaped slashes aside). Reads only
    messages -> content parts -> image URL, whatever else the body holds."""
    total = 0
    messages = body.get(PARAM_MESSAGES) if isinstance(body, dict) else None
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if not isinstance(part, dict) or part.get("type") != PART_IMAGE:
                continue
            image = part.get(PART_IMAGE)
            url = image.get(IMAGE_URL_KEY) if isinstance(image, dict) else None
            if isinstance(url, str) and url.startswith(DATA_URL):
                total += len(url) + 2
    return total


def check_allowances(size: int, inline: int) -> None:
    """Refuse (413) a body of ``size`` bytes of which ``inline`` are inline images, when its
    text or its inline images are over their allowance."""
    if inline > INLINE_IMAGE_BYTES:
        raise PayloadTooLarge(
            f"The inline images (data URLs) of the request take {inline} bytes, over the limit"
            f" of {INLINE_IMAGE_BYTES} bytes; send larger images by URL.",
            limit=INLINE_IMAGE_BYTES,
        )
    if size - inline > TEXT_BODY_BYTES:
        raise PayloadTooLarge(
            f"The request's text (everything but inline images) takes {size - inline} bytes,"
            f" over the limit of {TEXT_BODY_BYTES} bytes.",
            limit=TEXT_BODY_BYTES,
        )
