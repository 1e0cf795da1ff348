"""Chat requests in the lifecycle sweep and the public listings: a TTL abort past the
fault limit and an expiry publish their completion signals; /status/models counts chat
workers, /workers says which declare chat_jobs."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from redis import Redis

from generated.signals import CHAT_SIGNALS
from runtime.native.queue.sweep import sweep, utcnow
from tests.integration.chat_flow import MODEL, chat_pop, chat_status, submit_chat
from tests.integration.native_flow import pop

pytestmark = pytest.mark.integration


def _next_event(pubsub: Any) -> dict[str, Any] | None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1.0)
        if message is not None:
            return CHAT_SIGNALS.parse(message["data"])
    return None


@pytest.fixture
def redis(native_service):
    client = Redis.from_url(native_service.context.settings.redis_url)
    yield client
    client.close()


def test_ttl_aborts_past_the_fault_limit_publish_faulted(
    native_client, native_db, native_service, make_user, redis
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key)
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CHAT_SIGNALS.channel(request_id))
    policy = native_service.context.policy
    later = utcnow()
    for _ in range(policy.fault_limit + 1):
        assert chat_pop(native_client, worker.api_key)["id"]
        later += timedelta(seconds=policy.generation_ttl_seconds + 1)
        sweep(native_db, policy, now=later, redis=redis)
    assert chat_status(native_client, request_id)["faulted"] is True
    assert _next_event(pubsub) == {"event": "faulted", "id": request_id}
    pubsub.close()


def test_an_expired_chat_request_publishes_expired(
    native_client, native_db, native_service, make_user, redis
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key)
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CHAT_SIGNALS.channel(request_id))
    policy = native_service.context.policy
    later = utcnow() + timedelta(seconds=policy.waiting_expiry_seconds + 1)
    assert sweep(native_db, policy, now=later, redis=redis).expired == 1
    assert _next_event(pubsub) == {"event": "expired", "id": request_id}
    assert native_client.get(f"/generate/chat/status/{request_id}").status_code == 404
    pubsub.close()


def test_listings_count_chat_workers(native_client, make_user):
    chat_worker, text_worker = make_user("c"), make_user("t")
    chat_pop(native_client, chat_worker.api_key, threads=2)
    pop(native_client, text_worker.api_key, name="text-only", models=[MODEL])
    models = {m["name"]: m for m in native_client.get("/status/models").json()}
    assert models[MODEL]["count"] == 3  # threads serving it, as upstream counts: 2 + 1
    assert models[MODEL]["chat_count"] == 1  # workers that take chat jobs
    workers = {w["name"]: w for w in native_client.get("/workers").json()}
    assert workers["chat-worker"]["chat_jobs"] is True
    assert workers["text-only"]["chat_jobs"] is False
