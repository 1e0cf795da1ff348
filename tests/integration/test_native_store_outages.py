"""The native API through store outages, on stores of this module's own
(they are stopped and started again; the session's stores are never touched).

Redis stopped: the rate limiter fails open to in-memory counting (one warning for the
outage, no 500 on any limited route) and a chat cancel still succeeds. Postgres stopped: a
request answers 503 StoreUnavailable in the native envelope (no traceback logged); once the
database is back the same service answers again, without a restart.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from sqlalchemy import make_url

from runtime.native.accounts.keys import create_user
from runtime.native.server import NativeService
from runtime.stores import database
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.embedded_postgres import EmbeddedPostgres
from runtime.stores.embedded_redis import EmbeddedRedis
from tests.conftest import reset_database
from tests.integration.chat_flow import chat_body, chat_pop
from tests.integration.native_flow import pop, submit, submit_text
from tests.support.native import running_native_with_objects
from tests.support.stores import running_stores

pytestmark = pytest.mark.integration

FALLBACK = "falling back to in-memory storage"  # flask-limiter's one line for an outage


@pytest.fixture(scope="module")
def stores() -> Iterator[EmbeddedStores]:
    with running_stores("horde-outages-") as stores:
        yield stores


@pytest.fixture
def service(stores: EmbeddedStores) -> Iterator[NativeService]:
    with running_native_with_objects(stores, "horde-outages-objects-") as native:
        reset_database(native.context.sessions)
        native.context.redis.flushdb()
        yield native


def _user(service: NativeService, name: str, kudos: float = 0) -> str:
    with transaction(service.context.sessions) as session:
        return create_user(session, name, kudos=kudos)[1]


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)


def test_redis_down_the_limiter_fails_open_and_a_cancel_succeeds(stores, service, caplog):
    requester, owner = _user(service, "requester", 1000), _user(service, "owner")
    api = f"{service.url}/api/v2"
    assert stores.redis is not None
    with httpx.Client(base_url=api, timeout=30) as client:
        chat_pop(client, owner)
        queued = client.post(
            "/generate/chat/async", headers={"apikey": requester}, json=chat_body()
        )
        assert queued.status_code == 202, queued.text
        request_id = queued.json()["id"]
        caplog.set_level(logging.INFO)
        stores.redis.stop()
        try:
            reads = [client.get(f"/generate/chat/status/{request_id}") for _ in range(5)]
            pops = [chat_pop(client, owner, name="other") for _ in range(3)]
            cancelled = client.delete(f"/generate/chat/status/{request_id}")
        finally:
            restarted = EmbeddedRedis.start(stores.redis.data_dir)
        assert restarted.url == stores.redis_url
        stores.redis = restarted
        assert [r.status_code for r in reads] == [200] * 5, reads[-1].text
        assert len(pops) == 3  # each answered 200 (chat_pop checks): one took the job
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["done"] is True
        after = client.get(f"/generate/chat/status/{request_id}")
        assert after.status_code == 200
        assert after.json()["done"] is True
    logged = _logged(caplog)
    assert logged.count(FALLBACK) == 1  # one line for the outage, not one per request
    assert "Traceback" not in logged


def test_redis_down_a_chat_submit_is_queued_unscreened_for_timeouts(stores, service, caplog):
    # The source's IP timeout is best effort, as upstream's without its Redis: unread, the
    # submit goes on (and its wake is lost: the waiting pop re-pops at its deadline).
    requester, owner = _user(service, "requester", 1000), _user(service, "owner")
    assert stores.redis is not None
    with httpx.Client(base_url=f"{service.url}/api/v2", timeout=30) as client:
        chat_pop(client, owner)  # its worker online
        caplog.set_level(logging.INFO)
        stores.redis.stop()
        try:
            queued = client.post(
                "/generate/chat/async", headers={"apikey": requester}, json=chat_body()
            )
        finally:
            stores.redis = EmbeddedRedis.start(stores.redis.data_dir)
    assert queued.status_code == 202, queued.text
    logged = _logged(caplog)
    assert "IP timeout of" in logged
    assert "Traceback" not in logged


def test_postgres_down_is_a_503_and_the_service_reconnects(stores, service, caplog):
    api = f"{service.url}/api/v2"
    owner = _user(service, "owner")
    assert stores.postgres is not None
    with httpx.Client(base_url=api, timeout=30) as client:
        assert client.get("/users/1").status_code in (200, 404)
        caplog.set_level(logging.INFO)
        data_dir, url = stores.postgres.data_dir, stores.postgres.url
        stores.postgres.stop()
        try:
            down = [
                client.get("/users/1"),
                client.post(
                    "/generate/text/pop",
                    headers={"apikey": owner},
                    json={"name": "w", "models": ["m"], "max_length": 80},
                ),
            ]
        finally:
            stores.postgres = EmbeddedPostgres.start(data_dir)
        assert stores.postgres.url == url
        for response in down:
            assert response.status_code == 503, response.text
            assert response.json()["rc"] == "StoreUnavailable"
            assert response.headers.get("Retry-After")
        popped = client.post(
            "/generate/text/pop",
            headers={"apikey": owner},
            json={"name": "w", "models": ["m"], "max_length": 80},
        )
        assert popped.status_code == 200, popped.text  # the same process, reconnected
    assert "Traceback" not in _logged(caplog)


POP = {"name": "w", "models": ["test-model-7B"], "max_length": 512}


def _end_client_connections(database_url: str) -> None:
    """Ends every client connection to the database but its own, as a restart does."""
    url = make_url(database_url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False)) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )


def test_a_lost_busy_connection_is_a_503_and_the_next_request_reconnects(
    stores, service, caplog, monkeypatch
):
    """A connection back in the pool a moment ago is not pinged (runtime.stores.database):
    lost, its request answers 503 (the driver's cursors too: the pop and the submit) and the
    pool is invalidated, so the next request reconnects."""
    monkeypatch.setattr(database, "PING_AFTER_IDLE_S", 3600.0)  # every connection busy
    api = f"{service.url}/api/v2"
    owner, requester = _user(service, "owner"), _user(service, "requester", 1000)
    with httpx.Client(base_url=api, timeout=30) as client:
        submit_text(client, requester)
        job = pop(client, owner, name="w")
        assert job["id"], job
        caplog.set_level(logging.INFO)
        requests = {
            "user": functools.partial(client.get, "/users/1"),
            "pop": functools.partial(
                client.post, "/generate/text/pop", headers={"apikey": owner}, json=POP
            ),
            "submit": functools.partial(submit, client, owner, job["id"]),
        }
        answers = {}
        for name, request in requests.items():
            _end_client_connections(stores.database_url)
            answers[name] = (request(), request())
    for name, (lost, reconnected) in answers.items():
        assert lost.status_code == 503, (name, lost.text)
        assert lost.json()["rc"] == "StoreUnavailable"
        assert reconnected.status_code in (200, 404), (name, reconnected.text)
    assert "Traceback" not in _logged(caplog)


def test_a_lost_idle_connection_is_replaced_before_use(stores, service, monkeypatch):
    """A connection idle past PING_AFTER_IDLE_S is pinged when checked out: lost, it is
    replaced (with every older one) and the request is served."""
    monkeypatch.setattr(database, "PING_AFTER_IDLE_S", 0.0)  # every connection idle
    api = f"{service.url}/api/v2"
    owner = _user(service, "owner")
    with httpx.Client(base_url=api, timeout=30) as client:
        pop = functools.partial(
            client.post, "/generate/text/pop", headers={"apikey": owner}, json=POP
        )
        assert pop().status_code == 200
        _end_client_connections(stores.database_url)
        assert client.get("/users/1").status_code in (200, 404)
        _end_client_connections(stores.database_url)
        assert pop().status_code == 200


def test_redis_down_met_first_by_the_workers_lane_falls_back_once_for_every_route(
    stores, service, caplog
):
    """The workers' lane counts its limits without flask-limiter's decorators
    (runtime.native.api.lane) but on the same limiter's state: an outage met first by pops
    and submits is the process's one fallback line, and a client route after them counts in
    memory too, with no second line and no 500."""
    owner = _user(service, "owner")
    api = f"{service.url}/api/v2"
    assert stores.redis is not None
    with httpx.Client(base_url=api, timeout=30) as client:
        assert client.get("/status/models").status_code == 200  # the limiter's script loaded
        caplog.set_level(logging.INFO)
        stores.redis.stop()
        try:
            pops = [
                client.post("/generate/text/pop", headers={"apikey": owner}, json=POP)
                for _ in range(3)
            ]
            submitted = submit(client, owner, "00000000-0000-0000-0000-000000000000")
            models = [client.get("/status/models") for _ in range(3)]
        finally:
            restarted = EmbeddedRedis.start(stores.redis.data_dir)
        assert restarted.url == stores.redis_url
        stores.redis = restarted
    assert [p.status_code for p in pops] == [200] * 3, pops[-1].text
    assert all("X-RateLimit-Remaining" in p.headers for p in pops)  # counted in memory
    assert submitted.status_code == 404, submitted.text
    assert [m.status_code for m in models] == [200] * 3, models[-1].text
    logged = _logged(caplog)
    assert logged.count(FALLBACK) == 1
    assert "Traceback" not in logged
