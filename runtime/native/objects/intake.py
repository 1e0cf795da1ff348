"""Image intake at submit (docs/design.md, "Images").

Every image part of a request (an https URL or a data URL) is fetched, checked against the
caps from its header before any decode, decoded on one of a few slots, normalised to JPEG
and stored; its reference replaces its URL. A bad image is ImageValidationFailed (400)
naming the message and part, and nothing stored for the request is left behind.
"""

from __future__ import annotations

import base64
import binascii
import copy
import io
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageOps, UnidentifiedImageError

from generated.chat.names import LIMIT_MAX_IMAGE_BYTES, LIMIT_MAX_IMAGES, PARAM_MESSAGES
from generated.chat.tables import LIMITS
from generated.errors import ImageValidationFailed, IntakeBusy
from generated.storage import (
    CONCURRENT_DECODES,
    DECODE_WAIT_SECONDS,
    IMAGE_URL_KEY,
    INPUT_FORMATS,
    INTAKE_CAPS,
    JPEG_QUALITY,
    MAX_IMAGE_PIXELS,
    MAX_REQUEST_PIXELS,
    PART_IMAGE,
    REFERENCE_PREFIX,
)
from runtime.contract.messages import image_parts
from runtime.native.objects.fetch import FETCHES, FetchPolicy, FetchRefused, fetch_public
from runtime.stores.objects import JPEG, ObjectStore, new_key

IMAGE_KIND = "img"
DATA_PREFIX = "data:"
_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}


class BadImage(Exception):
    """Why one image was refused (before the part's position is known)."""


@dataclass(frozen=True)
class IntakePolicy:
    max_images: int = INTAKE_CAPS[LIMIT_MAX_IMAGES]
    max_pixels: int = MAX_IMAGE_PIXELS
    max_request_pixels: int = MAX_REQUEST_PIXELS
    fetch: FetchPolicy = field(default_factory=FetchPolicy)

    @property
    def max_bytes(self) -> int:
        return self.fetch.max_bytes


@dataclass(frozen=True)
class StoredImage:
    key: str
    size: int  # bytes of the stored JPEG
    width: int
    height: int


@dataclass(frozen=True)
class IntakeResult:
    messages: list[dict[str, Any]]  # image URLs replaced by references
    images: list[StoredImage]

    def limit_measures(self) -> dict[str, int]:
        """The request's measures of the image limits, by chat_limits name (the stored
        JPEG's size is what a worker receives)."""
        if not self.images:
            return {}
        measures = {LIMIT_MAX_IMAGES: len(self.images)}
        measures[LIMIT_MAX_IMAGE_BYTES] = max(image.size for image in self.images)
        return {name: value for name, value in measures.items() if name in LIMITS}


def reference(key: str) -> str:
    return REFERENCE_PREFIX + key


def referenced_key(url: str) -> str | None:
    """The object key of a stored part's reference, None for any other URL."""
    return url[len(REFERENCE_PREFIX) :] if url.startswith(REFERENCE_PREFIX) else None


def take_in_images(
    messages: list[dict[str, Any]],
    store: ObjectStore,
    policy: IntakePolicy | None = None,
    *,
    source: str = "",
) -> IntakeResult:
    """``messages`` with their images taken in; ``source`` names the requester whose share
    of the fetch pool the remote images use.

    Remote images are fetched on the bounded pool within one deadline for them all. Each is
    checked as a real image within the count, byte and pixel caps, and all of them within
    the request's pixel budget, from their headers before any is decoded (a decode costs
    about 3 bytes a pixel, and a small PNG can hold 25 megapixels). Decodes run one at a
    time on the process's ``DECODES`` slots (503 IntakeBusy when none comes free in time).
    Images stored before a bad one are deleted, so the caller, which queues nothing, leaves
    nothing."""
    policy = policy or IntakePolicy()
    located = _located_parts(messages)
    if len(located) > policy.max_images:
        raise ImageValidationFailed(
            reason=f"{len(located)} image parts; at most {policy.max_images} are accepted",
            param=PARAM_MESSAGES,
        )
    out = copy.deepcopy(messages)
    holders = [out[i]["content"][j][PART_IMAGE] for i, j in located]
    wheres = [f"messages[{i}].content[{j}]" for i, j in located]
    raws = _raw_images([holder[IMAGE_URL_KEY] for holder in holders], wheres, policy, source)
    _check_request_pixels(raws, wheres, policy)
    stored: list[StoredImage] = []
    try:
        for holder, where, raw in zip(holders, wheres, raws, strict=True):
            try:
                with DECODES.slot():
                    image = _store(normalise(raw, policy), store)
            except BadImage as exc:
                raise ImageValidationFailed(reason=f"{where}: {exc}", param=where) from None
            stored.append(image)
            holder[IMAGE_URL_KEY] = reference(image.key)
    except BaseException:
        for image in stored:
            store.delete(image.key)
        raise
    return IntakeResult(out, stored)


def _raw_images(
    urls: list[str], wheres: list[str], policy: IntakePolicy, source: str
) -> list[bytes]:
    """Every image's bytes, in order: the data URLs decoded, the rest fetched."""
    fetched = iter(_fetch_remote(urls, policy, source))
    raws: list[bytes] = []
    for url, where in zip(urls, wheres, strict=True):
        try:
            raws.append(decode_data_url(url, policy.max_bytes) if _is_data(url) else next(fetched))
        except BadImage as exc:
            raise ImageValidationFailed(reason=f"{where}: {exc}", param=where) from None
    return raws


def _check_request_pixels(raws: list[bytes], wheres: list[str], policy: IntakePolicy) -> None:
    """Each image a real one within the per-image caps, and all of them within the
    request's pixels, read from their headers: nothing is decoded yet."""
    total = 0
    for raw, where in zip(raws, wheres, strict=True):
        try:
            width, height = probe(raw, policy)
        except BadImage as exc:
            raise ImageValidationFailed(reason=f"{where}: {exc}", param=where) from None
        total += width * height
    if total > policy.max_request_pixels:
        raise ImageValidationFailed(
            reason=f"the request's {len(raws)} images hold {total} pixels together, over the"
            f" limit of {policy.max_request_pixels} pixels per request",
            param=PARAM_MESSAGES,
        )


class DecodeSlots:
    """The images this process decodes at once: a request waits for a slot up to the
    decode wait, then is refused IntakeBusy (nothing was queued or stored for it)."""

    def __init__(self, slots: int = CONCURRENT_DECODES, wait: float = DECODE_WAIT_SECONDS) -> None:
        self._slots = threading.BoundedSemaphore(slots)
        self.wait = wait

    @contextmanager
    def slot(self) -> Iterator[None]:
        if not self._slots.acquire(timeout=self.wait):
            raise IntakeBusy(seconds=IntakeBusy.default_retry_after)
        try:
            yield
        finally:
            self._slots.release()


DECODES = DecodeSlots()
"""This process's decode slots."""


def _located_parts(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(message index, part index) of every image part, in order."""
    wanted = {id(part) for part in image_parts(messages)}
    return [
        (i, j)
        for i, message in enumerate(messages)
        if isinstance(message.get("content"), list)
        for j, part in enumerate(message["content"])
        if id(part) in wanted
    ]


def _is_data(url: str) -> bool:
    return url.startswith(DATA_PREFIX)


def _fetch_remote(urls: list[str], policy: IntakePolicy, source: str) -> Iterator[bytes]:
    """The bodies of the remote URLs, in order, fetched on the bounded pool within
    ``source``'s share (``fetch.FETCHES``: TooManyImageFetches or IntakeBusy at once) within
    one deadline for them all; the first refused one raises BadImage where its part is
    reached."""
    remote = [url for url in urls if not _is_data(url)]
    if not remote:
        return iter(())
    deadline = time.monotonic() + policy.fetch.timeout_seconds

    def fetch_all() -> list[bytes | FetchRefused]:
        bodies: list[bytes | FetchRefused] = []
        for url in remote:
            try:
                bodies.append(fetch_public(url, policy.fetch, deadline))
            except FetchRefused as refused:
                bodies.append(refused)
                break  # its part is refused: the rest are not fetched
        return bodies

    return _raising(FETCHES.run(source, fetch_all))


def _raising(bodies: list[bytes | FetchRefused]) -> Iterator[bytes]:
    for body in bodies:
        if isinstance(body, FetchRefused):
            raise BadImage(body.reason)
        yield body


def decode_data_url(url: str, max_bytes: int) -> bytes:
    header, sep, data = url.partition(",")
    if not sep or not header.endswith(";base64"):
        raise BadImage("a data URL must be base64 (data:image/...;base64,...)")
    if len(data) * 3 // 4 > max_bytes + 2:
        raise BadImage(f"the image is over the limit of {max_bytes} bytes")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadImage("the data URL is not valid base64") from None
    if len(raw) > max_bytes:
        raise BadImage(f"the image is {len(raw)} bytes, over the limit of {max_bytes}")
    return raw


def _opened(raw: bytes, policy: IntakePolicy) -> Image.Image:
    """The image opened from its header (nothing decoded), of an accepted format and
    within the per-image pixel cap."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            source = Image.open(io.BytesIO(raw))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise BadImage(f"the image has more than {policy.max_pixels} pixels") from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise BadImage("the data is not an image") from None
    if source.format not in INPUT_FORMATS:
        source.close()
        accepted = ", ".join(sorted(INPUT_FORMATS))
        raise BadImage(f"{source.format} images are not accepted ({accepted} are)")
    width, height = source.size
    if width * height > policy.max_pixels:
        source.close()
        raise BadImage(
            f"the image is {width}x{height}, over the limit of {policy.max_pixels} pixels"
        )
    return source


def probe(raw: bytes, policy: IntakePolicy) -> tuple[int, int]:
    """The image's width and height, read from its header, nothing decoded (BadImage for
    one that is not an accepted image within the per-image caps)."""
    with _opened(raw, policy) as source:
        return source.size


def normalise(raw: bytes, policy: IntakePolicy) -> tuple[bytes, int, int]:
    """The image as JPEG (first frame, EXIF orientation applied, alpha on white), checked
    for format and pixel count before it is decoded."""
    with _opened(raw, policy) as source:
        try:
            source.seek(0)
            source.load()
            ImageOps.exif_transpose(source, in_place=True)  # no copy of the pixels
            jpeg = _as_jpeg(source)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
            raise BadImage("the image could not be decoded") from None
        return jpeg, source.width, source.height


def _as_jpeg(image: Image.Image) -> bytes:
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in _ALPHA_MODES:
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.getchannel("A"))
        image = flat
    elif image.mode != "RGB":
        image = image.convert("RGB")
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    return out.getvalue()


def _store(normalised: tuple[bytes, int, int], store: ObjectStore) -> StoredImage:
    jpeg, width, height = normalised
    key = new_key(IMAGE_KIND, "jpg")
    store.put(key, jpeg, JPEG)
    return StoredImage(key=key, size=len(jpeg), width=width, height=height)
