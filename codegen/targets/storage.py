"""spec/storage/objects.yaml (+ the transport and image-part names of the chat contract)
-> generated/storage.py: intake caps, signed URL lives, offload threshold, names."""

from __future__ import annotations

from typing import Any

from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec

STORAGE = "storage/objects.yaml"
DECLARATION = "workers/declaration.yaml"
MESSAGES = "chat/messages.yaml"
IMAGE_PART = "image_url"


def _image_part_names(spec: Spec) -> tuple[str, str]:
    """The image part's type and the key of its URL, as spec/chat/messages.yaml spells them."""
    part = spec[MESSAGES]["content_parts"].get(IMAGE_PART)
    if part is None or IMAGE_PART not in part.get("keys", {}):
        raise SpecErrors(
            [SpecError(f"spec/{MESSAGES}", f"content_parts.{IMAGE_PART}", "missing", "define it")]
        )
    required = part["keys"][IMAGE_PART].get("required", [])
    if len(required) != 1:
        raise SpecErrors(
            [
                SpecError(
                    f"spec/{MESSAGES}",
                    f"content_parts.{IMAGE_PART}.keys.{IMAGE_PART}.required",
                    "must name exactly the URL key",
                    "list the one required key (the URL)",
                )
            ]
        )
    return IMAGE_PART, required[0]


def build(spec: Spec) -> list[Output]:
    data: dict[str, Any] = spec[STORAGE]
    transports = spec[DECLARATION]["declaration"]["image_transports"]["schema"]["items"]["enum"]
    part_type, url_key = _image_part_names(spec)
    return [
        render(
            "storage.py.j2",
            spec.sources(STORAGE, DECLARATION, MESSAGES),
            "storage.py",
            intake=data["intake"],
            body=data["body"],
            signed=data["signed_urls"],
            offload=data["offload"],
            reference_prefix=data["reference_prefix"],
            transports=transports,
            part_type=part_type,
            url_key=url_key,
        )
    ]
