"""Image intake at submit: real images become stored JPEGs; bad ones are a clear 400 naming
the message and part, and leave nothing stored. A request's images are held to its pixel
budget from their headers before any is decoded, and decodes wait for one of a few slots."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from generated.chat.names import LIMIT_MAX_IMAGE_BYTES, LIMIT_MAX_IMAGES
from generated.errors import ImageValidationFailed, IntakeBusy
from generated.storage import INTAKE_CAPS, MAX_IMAGE_PIXELS, MAX_REQUEST_PIXELS, REFERENCE_PREFIX
from runtime.native.objects.fetch import FetchPolicy
from runtime.native.objects.intake import DecodeSlots, IntakePolicy, take_in_images
from runtime.stores.objects import JPEG
from runtime.stores.objects_fs import FilesystemObjectStore


def image_bytes(fmt: str, size: tuple[int, int] = (32, 24), mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, color=(200, 30, 30, 128)[: len(mode)] if mode != "L" else 7).save(
        out, format=fmt
    )
    return out.getvalue()


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def conversation(*urls: str) -> list[dict[str, Any]]:
    parts = [{"type": "image_url", "image_url": {"url": u, "detail": "low"}} for u in urls]
    return [
        {"role": "system", "content": "Describe images."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, *parts]},
    ]


@pytest.fixture
def store(tmp_path: Path) -> FilesystemObjectStore:
    return FilesystemObjectStore(tmp_path / "objects", base_url="http://horde", secret="s")


def stored_keys(store: FilesystemObjectStore) -> list[str]:
    return sorted(p.name for p in store.root.rglob("*") if p.is_file() and p.name[0] != ".")


@pytest.mark.parametrize(
    ("fmt", "mode", "mime"),
    [
        ("PNG", "RGB", "image/png"),
        ("PNG", "RGBA", "image/png"),
        ("GIF", "P", "image/gif"),
        ("WEBP", "RGB", "image/webp"),
        ("JPEG", "L", "image/jpeg"),
    ],
)
def test_a_good_image_is_stored_as_jpeg(
    store: FilesystemObjectStore, fmt: str, mode: str, mime: str
) -> None:
    messages = conversation(data_url(image_bytes(fmt, mode=mode), mime))
    result = take_in_images(messages, store)
    (image,) = result.images
    part = result.messages[1]["content"][1]
    assert part["image_url"] == {"url": REFERENCE_PREFIX + image.key, "detail": "low"}
    assert messages[1]["content"][1]["image_url"]["url"].startswith("data:")  # input untouched
    stored = store.get(image.key)
    assert stored.content_type == JPEG
    with Image.open(io.BytesIO(stored.data)) as decoded:
        assert (decoded.format, decoded.mode, decoded.size) == ("JPEG", "RGB", (32, 24))
    assert (image.width, image.height, image.size) == (32, 24, len(stored.data))
    assert result.limit_measures() == {LIMIT_MAX_IMAGES: 1, LIMIT_MAX_IMAGE_BYTES: image.size}


def test_transparency_is_flattened_on_white(store: FilesystemObjectStore) -> None:
    out = io.BytesIO()
    Image.new("RGBA", (4, 4), (0, 0, 0, 0)).save(out, format="PNG")
    (image,) = take_in_images(conversation(data_url(out.getvalue())), store).images
    with Image.open(io.BytesIO(store.get(image.key).data)) as decoded:
        assert min(decoded.getpixel((1, 1))) > 245  # white, not black


def test_messages_without_images_are_returned_as_they_are(store: FilesystemObjectStore) -> None:
    messages = [{"role": "user", "content": "hi"}]
    result = take_in_images(messages, store)
    assert (result.messages, result.images, result.limit_measures()) == (messages, [], {})


def _refused(store: FilesystemObjectStore, messages: list[dict[str, Any]], **policy: Any) -> str:
    with pytest.raises(ImageValidationFailed) as info:
        take_in_images(messages, store, IntakePolicy(**policy))
    assert info.value.native_status == 400
    assert info.value.front_status == 400
    assert info.value.message.startswith("Image validation failed: ")
    assert stored_keys(store) == []  # nothing left behind
    return info.value.message


def test_not_an_image_names_the_message_and_part(store: FilesystemObjectStore) -> None:
    good = data_url(image_bytes("PNG"))
    bad = data_url(b"%PDF-1.4 definitely not an image")
    message = _refused(store, conversation(good, bad))
    assert "messages[1].content[2]: the data is not an image" in message


def test_a_truncated_image_is_refused(store: FilesystemObjectStore) -> None:
    raw = image_bytes("PNG", size=(300, 300))
    message = _refused(store, conversation(data_url(raw[: len(raw) // 2])))
    assert "messages[1].content[1]" in message


def test_an_unaccepted_format_is_refused(store: FilesystemObjectStore) -> None:
    message = _refused(store, conversation(data_url(image_bytes("BMP"), "image/bmp")))
    assert "BMP images are not accepted" in message


def test_too_many_pixels_are_refused_before_decoding(store: FilesystemObjectStore) -> None:
    side = int(MAX_IMAGE_PIXELS**0.5) + 1
    raw = image_bytes("PNG", size=(side, side), mode="L")
    message = _refused(store, conversation(data_url(raw)))
    assert f"{side}x{side}, over the limit of {MAX_IMAGE_PIXELS} pixels" in message


def test_too_many_images_are_refused(store: FilesystemObjectStore) -> None:
    cap = INTAKE_CAPS[LIMIT_MAX_IMAGES]
    urls = [data_url(image_bytes("PNG"))] * (cap + 1)
    message = _refused(store, conversation(*urls))
    assert f"{cap + 1} image parts; at most {cap} are accepted" in message


def test_oversized_bytes_are_refused_before_decoding(store: FilesystemObjectStore) -> None:
    cap = INTAKE_CAPS[LIMIT_MAX_IMAGE_BYTES]
    message = _refused(store, conversation(data_url(b"\0" * (cap + 3))))
    assert f"over the limit of {cap} bytes" in message


def test_a_smaller_policy_cap_applies_to_the_decoded_size(store: FilesystemObjectStore) -> None:
    raw = image_bytes("PNG")
    message = _refused(
        store, conversation(data_url(raw)), fetch=FetchPolicy(max_bytes=len(raw) - 1)
    )
    assert f"the image is {len(raw)} bytes" in message


@pytest.mark.parametrize(
    "url", ["data:image/png,notbase64", "data:image/png;base64,!!!!", "data:image/png;base64"]
)
def test_malformed_data_urls_are_refused(store: FilesystemObjectStore, url: str) -> None:
    assert "messages[1].content[1]" in _refused(store, conversation(url))


def test_a_failure_after_good_images_deletes_them(store: FilesystemObjectStore) -> None:
    good = data_url(image_bytes("PNG"))
    _refused(store, conversation(good, good, data_url(b"nope")))


SIDE = int(MAX_IMAGE_PIXELS**0.5)
"""The side of the largest square image accepted alone (5000)."""


def largest_png() -> bytes:
    """A PNG of SIDE x SIDE pixels of one colour: tens of kilobytes holding 25 megapixels."""
    return image_bytes("PNG", size=(SIDE, SIDE), mode="L")


def test_a_requests_images_are_held_to_its_pixels_before_any_is_decoded(
    store: FilesystemObjectStore,
) -> None:
    count = MAX_REQUEST_PIXELS // (SIDE * SIDE) + 1
    message = _refused(store, conversation(*[data_url(largest_png())] * count))
    assert f"{count} images hold {count * SIDE * SIDE} pixels together" in message
    assert f"over the limit of {MAX_REQUEST_PIXELS} pixels per request" in message
    assert stored_keys(store) == []


def test_a_request_within_its_pixels_is_taken_in(store: FilesystemObjectStore) -> None:
    count = MAX_REQUEST_PIXELS // (SIDE * SIDE)
    result = take_in_images(conversation(*[data_url(largest_png())] * count), store)
    assert [(i.width, i.height) for i in result.images] == [(SIDE, SIDE)] * count


MEASURE = """
import sys
from pathlib import Path
from runtime.native.objects.intake import take_in_images
from runtime.stores.objects_fs import FilesystemObjectStore
from tests.unit.test_image_intake import conversation, data_url

def peak():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
url = data_url(Path(sys.argv[1]).read_bytes())
store = FilesystemObjectStore(Path(sys.argv[2]), base_url="http://horde", secret="s")
before = peak()
try:
    take_in_images(conversation(*[url] * 8), store)
    print("accepted", peak() - before)
except Exception as refused:
    print(type(refused).__name__, peak() - before)
"""
"""Takes eight of the largest images in, in a fresh process, and prints how far its peak
resident memory rose (MiB): the images are refused from their headers alone."""


def test_eight_of_the_largest_images_cost_no_decode(tmp_path: Path) -> None:
    png = tmp_path / "largest.png"
    png.write_bytes(largest_png())
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(png), str(tmp_path / "objects")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    outcome, growth = done.stdout.split()
    # one decode of them holds 25 MB of pixels (and its JPEG's encoder more)
    assert int(growth) < 16, done.stdout
    assert outcome == "ImageValidationFailed"


def test_a_decode_waits_for_a_slot_then_is_refused_intake_busy() -> None:
    # The shipped wait is 10 s; a short one shows the same refusal without waiting for it.
    slots = DecodeSlots(slots=1, wait=0.2)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with slots.slot():
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)
    with pytest.raises(IntakeBusy), slots.slot():
        pass
    release.set()
    holder.join(30)
    with slots.slot():  # free again once the holder is done
        pass
