"""tests/support/workers.py: a wait for a worker to be online counts only a 200 listing.

GET /workers is rate limited; a poll that read any JSON body as the listing took a 429's
error envelope for an online worker and went on before the worker had popped.
"""

from __future__ import annotations

import httpx
import pytest

from generated.rate_limits import KEY_PEER
from runtime.native.server import NativeService
from runtime.tables.rate_limits import RateLimit
from tests.conftest import MadeUser
from tests.integration.chat_flow import chat_pop
from tests.support.native import route_limits
from tests.support.workers import listed_workers

pytestmark = pytest.mark.integration

ONCE = RateLimit("1 per hour", KEY_PEER)
"""GET /workers answered once, then 429: the test needs the limited answer (not a raise)."""


def test_a_rate_limited_listing_is_no_worker(
    native_service: NativeService, native_client: httpx.Client, owner: MadeUser
) -> None:
    with route_limits(native_service, "workers", ONCE):
        assert listed_workers(native_client) == []  # the one answer: nobody popped yet
        chat_pop(native_client, owner.api_key)  # now a worker is online
        limited = native_client.get("/workers")
        assert limited.status_code == 429, limited.text
        assert limited.json()  # a truthy body, which is not a listing
        assert listed_workers(native_client) == []


def test_a_worker_that_popped_is_listed(native_client: httpx.Client, owner: MadeUser) -> None:
    chat_pop(native_client, owner.api_key, name="listed")
    assert [worker["name"] for worker in listed_workers(native_client)] == ["listed"]
