"""A chat request's stored objects through the native routes: what submit stores and
records, who may pop an image request, the transports' failures, and deletion at the end
(done end to end too; here done, cancel, fault, expiry, the sweep's catch-up, dry run and
an operation-key replay).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from generated.chat.names import (
    DECL_IMAGE_TRANSPORTS,
    FEATURE_VISION,
    GUARANTEE_PROMPT_OVERFLOW_REFUSED,
    LIMIT_MAX_IMAGE_BYTES,
    LIMIT_MAX_IMAGES,
)
from generated.errors import UnservableJob
from generated.storage import TRANSPORT_BASE64, TRANSPORT_MESSAGES_URL, TRANSPORT_URL
from runtime.native.db.tables import Generation, WaitingPrompt
from runtime.native.objects.intake import referenced_key
from runtime.native.queue.sweep import sweep, utcnow
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.objects_fs import FilesystemObjectStore
from runtime.worker.job import Job
from tests.conftest import MadeUser
from tests.doubles.backend_script import Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.integration.chat_flow import MODEL, chat_async, chat_pop, submit_reply
from tests.support.vision_stack import (
    VisionWorker,
    image_data_url,
    image_part,
    native_with_objects,
    noisy_data_url,
    stored_files,
    text_part,
    user_turn,
)

pytestmark = pytest.mark.integration

VISION = [FEATURE_VISION, GUARANTEE_PROMPT_OVERFLOW_REFUSED]
IMAGES = user_turn(
    text_part("Compare."), image_part(image_data_url()), image_part(image_data_url())
)


@pytest.fixture
def store(native_service: NativeService, native_db: sessionmaker[Session]) -> FilesystemObjectStore:
    objects = native_service.context.objects
    assert isinstance(objects, FilesystemObjectStore)
    for path in stored_files(objects):
        path.unlink()
    return objects


def _body(messages: list[dict[str, Any]] = IMAGES, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, **fields}


def _submit(
    client: httpx.Client, key: str, body: dict[str, Any], replay: bool = False, **headers: str
) -> str:
    response = chat_async(client, key, body, **headers)
    # a new request is queued (202); an operation key's replay answers the first one (200)
    assert response.status_code == (200 if replay else 202), response.text
    return str(response.json()["id"])


def _row(sessions: sessionmaker[Session], request_id: str) -> WaitingPrompt | None:
    with sessions() as session:
        return session.scalars(
            select(WaitingPrompt).where(WaitingPrompt.id == uuid.UUID(request_id))
        ).first()


def _vision_pop(client: httpx.Client, key: str, transports: list[str], **kw: Any) -> dict:
    return chat_pop(client, key, features=VISION, **{DECL_IMAGE_TRANSPORTS: transports}, **kw)


@pytest.fixture
def users(make_user: Callable[..., MadeUser]) -> tuple[MadeUser, MadeUser]:
    # trusted: one owner runs up to six workers here (an untrusted user may register three)
    return make_user("req", 1000), make_user("wk", trusted=True)


def test_submit_stores_jpegs_by_reference_with_their_measures(
    native_client, native_db, store, users
) -> None:
    requester, worker = users
    _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])
    wp = _row(native_db, _submit(native_client, requester.api_key, _body()))
    assert wp is not None
    with native_db() as session:
        messages = session.get(WaitingPrompt, wp.id).messages  # type: ignore[union-attr]
    keys = [referenced_key(p["image_url"]["url"]) for p in messages[0]["content"][1:]]
    assert keys == wp.object_keys
    assert all(keys)
    assert wp.messages_object is None
    sizes = [len(store.get(str(k)).data) for k in keys]
    assert wp.required_limits[LIMIT_MAX_IMAGES] == 2
    assert wp.required_limits[LIMIT_MAX_IMAGE_BYTES] == max(sizes)  # the stored JPEG's
    assert FEATURE_VISION in wp.required_features
    assert sorted(p.name for p in stored_files(store)) == sorted(map(str, keys))


def test_only_workers_that_can_receive_the_images_pop_them(
    native_client, native_db, store, users
) -> None:
    requester, worker = users
    _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])
    wp = _row(native_db, _submit(native_client, requester.api_key, _body()))
    assert wp is not None
    small = wp.required_limits[LIMIT_MAX_IMAGE_BYTES] - 1
    key = worker.api_key
    assert not chat_pop(native_client, key, name="blind")["id"]  # no vision
    assert not _vision_pop(native_client, key, [TRANSPORT_MESSAGES_URL], name="msgs")["id"]
    assert not _vision_pop(native_client, key, [], name="none")["id"]
    limits = {LIMIT_MAX_IMAGE_BYTES: small}
    assert not _vision_pop(native_client, key, [TRANSPORT_URL], name="s", limits=limits)["id"]
    job = _vision_pop(native_client, key, [TRANSPORT_URL], name="url")
    urls = [p["image_url"]["url"] for p in job["payload"]["messages"][0]["content"][1:]]
    assert all("/api/v2/objects/img-" in u and "signature=" in u for u in urls)


@pytest.mark.raised_limits(
    "chat_async",
    why="three submits in a row from one address and key; what is checked is their objects' fate",
)
def test_cancel_fault_and_expiry_delete_the_objects(
    native_client, native_db, native_service, store, users
) -> None:
    requester, worker = users
    policy = native_service.context.policy
    _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])
    cancelled = _submit(native_client, requester.api_key, _body())
    assert len(stored_files(store)) == 2
    assert native_client.delete(f"/generate/chat/status/{cancelled}").status_code == 200
    assert stored_files(store) == []

    faulted = _submit(native_client, requester.api_key, _body())
    for _ in range(policy.fault_limit + 1):
        job = _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])
        assert job["id"]
        assert len(stored_files(store)) == 2
        submit_reply(native_client, worker.api_key, job["id"], None, state="faulted")
    assert _row(native_db, faulted).faulted is True  # type: ignore[union-attr]
    assert stored_files(store) == []

    expired = _submit(native_client, requester.api_key, _body())
    later = utcnow() + timedelta(seconds=policy.waiting_expiry_seconds + 1)
    sweep(native_db, policy, now=later, objects=store)
    assert _row(native_db, expired) is None
    assert stored_files(store) == []


def test_a_landed_reply_deletes_the_objects_at_once(native_client, native_db, store, users) -> None:
    """The submit that ends a request releases its objects (not the sweep, later); the
    reply's request had stored some, which is what tells the submit to release."""
    requester, worker = users
    _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])  # online: none queued
    done = _submit(native_client, requester.api_key, _body())
    job = _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])
    assert job["id"]
    assert len(stored_files(store)) == 2
    landed = submit_reply(native_client, worker.api_key, job["id"])
    assert landed.status_code == 200, landed.text
    assert stored_files(store) == []
    assert _row(native_db, done).object_keys == []  # type: ignore[union-attr]


def test_the_sweep_releases_ended_requests_still_owning_objects(
    native_client, native_db, native_service, store, users
) -> None:
    requester, worker = users
    _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])
    request_id = _submit(native_client, requester.api_key, _body())
    with transaction(native_db) as session:  # ended by a path that did not release
        session.get(WaitingPrompt, uuid.UUID(request_id)).active = False  # type: ignore[union-attr]
    assert len(stored_files(store)) == 2
    sweep(native_db, native_service.context.policy, objects=store)
    assert stored_files(store) == []
    assert _row(native_db, request_id).object_keys == []


@pytest.mark.raised_limits(
    "chat_async",
    why="six submits in a row from one address and key; what is checked is what each leaves stored",
)
def test_dry_runs_refusals_and_replays_leave_nothing_behind(
    native_client, native_db, store, users
) -> None:
    requester, worker = users
    _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])
    dry = chat_async(native_client, requester.api_key, _body(horde={"dry_run": True}))
    assert dry.status_code == 200
    assert stored_files(store) == []
    unknown = chat_async(native_client, requester.api_key, {**_body(), "model": "no-such"})
    assert unknown.status_code == 404
    assert stored_files(store) == []
    bad_key = chat_async(native_client, "not-a-key", _body())
    assert bad_key.status_code == 401
    assert stored_files(store) == []
    first = _submit(native_client, requester.api_key, _body(), **{"X-Operation-Key": "op-1"})
    owned = {p.name for p in stored_files(store)}
    again = _submit(
        native_client, requester.api_key, _body(), replay=True, **{"X-Operation-Key": "op-1"}
    )
    assert again == first  # the fingerprint is over the body as sent, not the new keys
    assert {p.name for p in stored_files(store)} == owned


def test_a_job_whose_objects_are_gone_is_faulted_with_the_reason(
    native_client, native_db, store, users
) -> None:
    requester, worker = users
    _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])
    request_id = _submit(native_client, requester.api_key, _body())
    for path in stored_files(store):
        path.unlink()
    assert _vision_pop(native_client, worker.api_key, [TRANSPORT_BASE64])["id"] is None
    with native_db() as session:
        (gen,) = session.scalars(
            select(Generation).where(Generation.wp_id == uuid.UUID(request_id))
        ).all()
    assert gen.faulted
    assert gen.gen_metadata[0]["type"] == UnservableJob.code


@pytest.fixture(scope="module")
def offloading(horde_stores: EmbeddedStores) -> Iterator[NativeService]:
    with native_with_objects(horde_stores, offload_bytes=30_000) as service:
        yield service


def test_a_messages_url_only_worker_takes_offloaded_image_requests(
    offloading, native_db, users
) -> None:
    requester, worker = users
    with httpx.Client(base_url=f"{offloading.url}/api/v2", timeout=30) as client:
        _vision_pop(client, worker.api_key, [TRANSPORT_MESSAGES_URL])
        small = _submit(client, requester.api_key, _body())
        large = _submit(
            client, requester.api_key, _body(user_turn(image_part(noisy_data_url(200))))
        )
        job = _vision_pop(client, worker.api_key, [TRANSPORT_MESSAGES_URL])
        assert job["payload"][TRANSPORT_MESSAGES_URL]
        assert "messages" not in job["payload"]
        assert _row(native_db, large).messages_object is not None  # type: ignore[union-attr]
        assert not _vision_pop(client, worker.api_key, [TRANSPORT_MESSAGES_URL])["id"]
        assert _row(native_db, small).n == 1  # type: ignore[union-attr]


def test_the_worker_faults_a_job_it_cannot_fetch(
    native_client, native_db, native_service, store, users
) -> None:
    requester, owner = users
    with OpenAIBackendDouble(model=MODEL, default_reply=Reply(content="Seen.")) as backend:
        worker = VisionWorker(native_service.url, owner.api_key, backend, transports=("url",))
        answer = worker.horde.pop(worker.loop.body)
        assert answer["id"] is None
        request_id = _submit(native_client, requester.api_key, _body())
        job = Job.from_pop(worker.horde.pop(worker.loop.body))
        assert job is not None
        for path in stored_files(store):  # the signed URLs now lead nowhere
            path.unlink()
        assert worker.loop.runner.run(job) is False
        assert backend.chat_requests()[-1].body["messages"] != IMAGES  # only the probes
        worker.horde.close()
        worker.backend.close()
    with native_db() as session:
        gen = session.scalars(
            select(Generation).where(Generation.wp_id == uuid.UUID(request_id))
        ).one()
    (reason,) = gen.gen_metadata  # the worker's fault entry (runtime.worker.horde)
    assert gen.faulted
    assert reason["ref"].startswith(f"{UnservableJob.code}: ")
    assert "HTTP 404" in reason["ref"]
