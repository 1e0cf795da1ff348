"""Images and offloaded messages end to end: the openai SDK -> the front -> the native API
(image intake, object store, transports at pop) -> the real chat worker (--vision) -> the
OpenAI backend double, which records what it received.

Every row of the transport table in docs/design.md ("Images") is taken, and each test checks
both what the worker was handed (messages_url, a signed URL per image, or the bytes inline)
and that the backend got every image in OpenAI's image_url form, as the stored JPEG. Refused
images are 400 naming the message and part (or, over a request's pixels, the messages), with
nothing queued and nothing left stored; a request's objects are deleted when it ends.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from generated.chat.names import LIMIT_MAX_IMAGE_BYTES, LIMIT_MAX_IMAGES
from generated.storage import (
    INTAKE_CAPS,
    MAX_IMAGE_PIXELS,
    MAX_REQUEST_PIXELS,
    TRANSPORT_BASE64,
    TRANSPORT_MESSAGES_URL,
    TRANSPORT_URL,
)
from generated.wire import ANONYMOUS_API_KEY
from runtime.front.server import FrontService
from runtime.native.db.tables import WaitingPrompt
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.objects_fs import FilesystemObjectStore
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.doubles.backend_script import Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.support.front import running_front
from tests.support.vision_stack import (
    VisionWorker,
    image_data_url,
    image_part,
    jpeg_color,
    native_with_objects,
    noisy_data_url,
    stored_files,
    text_part,
    user_turn,
)

pytestmark = pytest.mark.e2e

MODEL = "vision-model"
OFFLOAD_AT = 30_000  # bytes: a 16 px image stays inline, a 200 px noisy one is offloaded
RED, BLUE = (220, 20, 20), (20, 20, 220)
ANSWER = "A red square."


@pytest.fixture(scope="module")
def native(horde_stores: EmbeddedStores) -> Iterator[NativeService]:
    with native_with_objects(horde_stores, offload_bytes=OFFLOAD_AT) as service:
        yield service


@pytest.fixture(scope="module")
def front(horde_stores: EmbeddedStores, native: NativeService) -> Iterator[FrontService]:
    with running_front(
        horde_stores.redis_url,
        [native.url],
        service_passkey=SERVICE_PASSKEY,
        deadline=60,
        grace=20,
        poll_interval=1,
    ) as service:
        yield service


@pytest.fixture(scope="module")
def backend() -> Iterator[OpenAIBackendDouble]:
    with OpenAIBackendDouble(model=MODEL, default_reply=Reply(content=ANSWER)) as double:
        yield double


@pytest.fixture
def store(native: NativeService, native_db: sessionmaker[Session]) -> FilesystemObjectStore:
    objects = native.context.objects
    assert isinstance(objects, FilesystemObjectStore)
    for path in stored_files(objects):  # objects of an earlier test's truncated rows
        path.unlink()
    return objects


@pytest.fixture
def sdk(front: FrontService, make_user: Callable[..., MadeUser]) -> Iterator[OpenAI]:
    requester = make_user("alice", kudos=1000)
    with OpenAI(base_url=f"{front.url}/v1", api_key=requester.api_key, max_retries=0) as client:
        yield client


@pytest.fixture
def start_worker(
    native: NativeService, backend: OpenAIBackendDouble, make_user: Callable[..., MadeUser]
) -> Callable[..., VisionWorker]:
    owner = make_user("worker-owner")

    def start(transports: tuple[str, ...]) -> VisionWorker:
        return VisionWorker(native.url, owner.api_key, backend, transports=transports)

    return start


def _ask(sdk: OpenAI, messages: list[dict[str, Any]]) -> str | None:
    completion = sdk.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    return completion.choices[0].message.content


def _served_job(
    sdk: OpenAI,
    start_worker: Callable[..., VisionWorker],
    transports: tuple[str, ...],
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    """Ask through a worker with ``transports``, which must answer ANSWER; the one job it got."""
    with start_worker(transports) as worker:
        assert _ask(sdk, messages) == ANSWER
    (job,) = worker.jobs
    return job


def _backend_images(backend: OpenAIBackendDouble) -> list[str]:
    """The image URLs of the last conversation the backend received, in order."""
    messages = backend.chat_requests()[-1].body["messages"]
    return [
        part["image_url"]["url"]
        for message in messages
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


def _handed_images(job: dict[str, Any]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in job["payload"]["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


def _queued(native: NativeService) -> int:
    with native.context.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(WaitingPrompt)) or 0)


TWO_IMAGES = user_turn(
    text_part("Which is red?"), image_part(image_data_url(RED)), image_part(image_data_url(BLUE))
)


def test_a_url_worker_gets_a_signed_url_per_image_and_sends_them_inline(
    sdk: OpenAI,
    start_worker: Callable[..., VisionWorker],
    backend: OpenAIBackendDouble,
    native: NativeService,
    store: FilesystemObjectStore,
) -> None:
    job = _served_job(
        sdk, start_worker, (TRANSPORT_URL, TRANSPORT_BASE64, TRANSPORT_MESSAGES_URL), TWO_IMAGES
    )
    handed = _handed_images(job)
    assert len(handed) == 2
    assert all(u.startswith(f"{native.url}/api/v2/objects/") for u in handed)
    red, blue = _backend_images(backend)
    assert jpeg_color(red)[0] > 180
    assert jpeg_color(blue)[2] > 180
    assert stored_files(store) == []  # done: its objects are gone


def test_a_base64_only_worker_gets_the_bytes_inline(
    sdk: OpenAI,
    start_worker: Callable[..., VisionWorker],
    backend: OpenAIBackendDouble,
    store: FilesystemObjectStore,
) -> None:
    job = _served_job(sdk, start_worker, (TRANSPORT_BASE64,), TWO_IMAGES)
    handed = _handed_images(job)
    assert [jpeg_color(u)[0] > 180 for u in handed] == [True, False]
    assert _backend_images(backend) == handed  # nothing to fetch: passed on as received
    assert stored_files(store) == []


def test_without_images_the_messages_travel_inline(
    sdk: OpenAI, start_worker: Callable[..., VisionWorker], backend: OpenAIBackendDouble
) -> None:
    job = _served_job(
        sdk, start_worker, (TRANSPORT_BASE64,), [{"role": "user", "content": "Hello?"}]
    )
    assert job["payload"]["messages"] == [{"role": "user", "content": "Hello?"}]
    assert backend.chat_requests()[-1].body["messages"][-1]["content"] == "Hello?"


OFFLOADED = user_turn(text_part("Describe it."), image_part(noisy_data_url(200)))


def test_an_offloaded_request_goes_by_messages_url(
    sdk: OpenAI,
    start_worker: Callable[..., VisionWorker],
    backend: OpenAIBackendDouble,
    native: NativeService,
    store: FilesystemObjectStore,
) -> None:
    job = _served_job(sdk, start_worker, (TRANSPORT_URL, TRANSPORT_MESSAGES_URL), OFFLOADED)
    assert "messages" not in job["payload"]
    assert job["payload"][TRANSPORT_MESSAGES_URL].startswith(f"{native.url}/api/v2/objects/msg-")
    (image,) = _backend_images(backend)
    assert len(image) > OFFLOAD_AT // 2
    assert image.startswith("data:image/jpeg;base64,")
    assert backend.chat_requests()[-1].body["messages"][0]["content"][0]["text"] == "Describe it."
    assert stored_files(store) == []  # the image and the messages object


def test_an_offloaded_request_reaches_a_worker_without_messages_url_inline(
    sdk: OpenAI,
    start_worker: Callable[..., VisionWorker],
    backend: OpenAIBackendDouble,
    native: NativeService,
) -> None:
    job = _served_job(sdk, start_worker, (TRANSPORT_URL,), OFFLOADED)
    assert TRANSPORT_MESSAGES_URL not in job["payload"]
    (handed,) = _handed_images(job)
    assert handed.startswith(f"{native.url}/api/v2/objects/img-")
    (image,) = _backend_images(backend)
    assert image.startswith("data:image/jpeg;base64,")


def _refused(sdk: OpenAI, messages: list[dict[str, Any]]) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(sdk, messages)
    return caught.value


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("data:image/png;base64," + base64.b64encode(b"not an image at all").decode(), "not an"),
        ("http://127.0.0.1:9/cat.png", "loopback"),
        ("http://10.1.2.3/cat.png", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
    ],
)
def test_bad_and_private_images_are_400_naming_the_part(
    sdk: OpenAI,
    start_worker: Callable[..., VisionWorker],
    native: NativeService,
    store: FilesystemObjectStore,
    url: str,
    why: str,
) -> None:
    messages = user_turn(text_part("Look:"), image_part(image_data_url()), image_part(url))
    with start_worker((TRANSPORT_BASE64,)):
        error = _refused(sdk, messages)
    assert error.code == "ImageValidationFailed"
    assert "messages[0].content[2]" in error.message
    assert why in error.message
    assert _queued(native) == 0
    assert stored_files(store) == []  # the good image before it is deleted too


def test_an_oversized_image_is_refused(
    sdk: OpenAI, start_worker: Callable[..., VisionWorker], native: NativeService
) -> None:
    too_big = INTAKE_CAPS[LIMIT_MAX_IMAGE_BYTES] + 3
    url = "data:image/png;base64," + base64.b64encode(b"\0" * too_big).decode()
    with start_worker((TRANSPORT_BASE64,)):
        error = _refused(sdk, user_turn(image_part(url)))
    assert "messages[0].content[0]" in error.message
    assert "over the limit" in error.message
    assert _queued(native) == 0


def test_too_many_images_are_refused(
    sdk: OpenAI,
    start_worker: Callable[..., VisionWorker],
    native: NativeService,
    store: FilesystemObjectStore,
) -> None:
    cap = INTAKE_CAPS[LIMIT_MAX_IMAGES]
    parts = [image_part(image_data_url()) for _ in range(cap + 1)]
    with start_worker((TRANSPORT_BASE64,)):
        error = _refused(sdk, user_turn(*parts))
    assert f"{cap + 1} image parts; at most {cap}" in error.message
    assert _queued(native) == 0
    assert stored_files(store) == []


def test_images_over_the_requests_pixels_are_refused_on_both_surfaces(
    sdk: OpenAI,
    start_worker: Callable[..., VisionWorker],
    native: NativeService,
    store: FilesystemObjectStore,
) -> None:
    # Small PNGs of 25 megapixels each: their headers alone refuse them, nothing decoded.
    side = int(MAX_IMAGE_PIXELS**0.5)
    count = MAX_REQUEST_PIXELS // (side * side) + 1
    messages = user_turn(*[image_part(image_data_url(size=side))] * count)
    with start_worker((TRANSPORT_BASE64,)):
        error = _refused(sdk, messages)
        direct = httpx.post(
            f"{native.url}/api/v2/generate/chat/async",
            headers={"apikey": ANONYMOUS_API_KEY},
            json={"model": MODEL, "messages": messages},
            timeout=30,
        )
    assert error.code == "ImageValidationFailed"
    assert f"over the limit of {MAX_REQUEST_PIXELS} pixels per request" in error.message
    assert (direct.status_code, direct.json()["rc"]) == (400, "ImageValidationFailed")
    assert f"{MAX_REQUEST_PIXELS} pixels per request" in direct.json()["message"]
    assert _queued(native) == 0
    assert stored_files(store) == []
