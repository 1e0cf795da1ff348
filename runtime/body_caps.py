"""How large a chat request body may be, on the native API and on the front.

Images arrive inline as data URLs, so the default cap is the text cap (what a request
without images may send) plus the spec's image intake caps (``generated.storage``): every
image at its largest, base64-encoded, with its data URL header. Both services read the
default from here and let the operator change it (HORDE_MAX_BODY_BYTES on the native API,
HORDE_FRONT_MAX_BODY_BYTES on the front). The front's submit timeout likewise leaves room
for the native API to fetch every image URL at its fetch timeout (``MAX_INTAKE_SECONDS``).
"""

from __future__ import annotations

import math

from generated.chat.names import LIMIT_MAX_IMAGE_BYTES, LIMIT_MAX_IMAGES
from generated.storage import FETCH_TIMEOUT_SECONDS, INTAKE_CAPS

TEXT_BODY_BYTES = 1024 * 1024
"""Everything but the images: messages, tools, schemas and the rest of the request."""
DATA_URL_HEADER_BYTES = 64
"""``data:image/<type>;base64,`` and the JSON around one image part, with room to spare."""


def inline_image_bytes(max_image_bytes: int) -> int:
    """The length of one image of ``max_image_bytes`` as a data URL."""
    return 4 * math.ceil(max_image_bytes / 3) + DATA_URL_HEADER_BYTES


def default_max_body_bytes() -> int:
    images = INTAKE_CAPS[LIMIT_MAX_IMAGES]
    return TEXT_BODY_BYTES + images * inline_image_bytes(INTAKE_CAPS[LIMIT_MAX_IMAGE_BYTES])


DEFAULT_MAX_BODY_BYTES = default_max_body_bytes()

MAX_INTAKE_SECONDS = INTAKE_CAPS[LIMIT_MAX_IMAGES] * FETCH_TIMEOUT_SECONDS
"""The longest image intake at submit: every image URL fetched at its timeout, in turn."""
