"""Images on the worker: the --vision probe, and images in the fit count.

No backend route says whether a multimodal projector is loaded, and a text-only backend
may answer an image part without seeing it, so the operator asserts vision (``--vision``)
and the probe checks that the backend takes an image at all. The probe's prompt tokens with
and without the image measure what one image costs; the fit check counts the text with the
image parts left out, plus that cost per image.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from generated.errors import HordeError
from generated.storage import PART_IMAGE
from runtime.worker.backend import BackendClient
from runtime.worker.backend_kinds import WIRE_TEXT, BackendKind, backend_messages
from runtime.worker.counter import prompt_tokens_of

PROBE_IMAGE_TEXT = "What colour is this picture?"
PROBE_IMAGE_SIDE = 32


class VisionRefused(RuntimeError):
    """The backend did not take the probe image (the message says how it refused)."""


def probe_image_url() -> str:
    """A small PNG as a data URL, made here (no file to ship)."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (PROBE_IMAGE_SIDE, PROBE_IMAGE_SIDE), (200, 30, 30)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def probe_vision(client: BackendClient, kind: BackendKind, model: str) -> int:
    """Context tokens the probe image took (0 when the backend reports no usage); raises
    VisionRefused when the backend refused it."""
    text_part = {"type": WIRE_TEXT, WIRE_TEXT: PROBE_IMAGE_TEXT}
    image_part = {"type": PART_IMAGE, PART_IMAGE: {"url": probe_image_url()}}
    with_image = [{"role": "user", "content": [text_part, image_part]}]
    without = [{"role": "user", "content": [text_part]}]
    try:
        seen = prompt_tokens_of(client, model, backend_messages(kind, with_image))
        unseen = prompt_tokens_of(client, model, backend_messages(kind, without))
    except HordeError as exc:
        raise VisionRefused(str(exc)) from None
    return max(0, seen - unseen) if seen is not None and unseen is not None else 0


def without_images(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The messages with every image part left out, and how many there were."""
    images = 0
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            kept = [p for p in content if not (isinstance(p, dict) and p.get("type") == PART_IMAGE)]
            images += len(content) - len(kept)
            message = {**message, "content": kept}
        out.append(message)
    return out, images
