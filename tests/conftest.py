"""Shared fixtures: the embedded stores and the live native API.

Session-wide (started once, lazily, only when a test asks):

``horde_stores``
    ``EmbeddedStores`` (runtime.stores.embedded): a real embedded PostgreSQL and our own
    redis-server, data in a temp dir (tests/support/stores.py), unix sockets only (no
    ports), schema upgraded to head. ``.database_url`` (SQLAlchemy/psycopg URL) and
    ``.redis_url`` (``unix://``).
``native_service``
    ``NativeService`` (runtime.native.server): the native API (its Flask app behind the ASGI
    shell, runtime.native.asgi) on uvicorn on a free 127.0.0.1 port (``.app.hub``: its
    waiting pops and wake subscription), the shipped rate limits, no background sweeper,
    the filesystem object store in a temp dir (``.context.objects``) (call
    ``runtime.native.queue.sweep.sweep(native_db, native_service.context.policy, now=...)``).
    ``.url``, ``.context`` (engine, sessions, redis, policy). Its service passkey is
    ``SERVICE_PASSKEY`` and its moderation screen ``MODERATION_PATTERNS`` (below).
``native_url``
    ``http://127.0.0.1:<port>/api/v2``.

Per test:

``native_db``
    A ``sessionmaker`` on the test database, after every table was emptied (truncate) and
    the anonymous user 0 (key ``0000000000``) put back, and Redis flushed.
``native_client``
    An ``httpx.Client`` with ``base_url=native_url`` on that clean database.
``make_user``
    ``make_user(name="user", kudos=0, concurrency=30, trusted=False) -> MadeUser(id, api_key)``.
``requester`` / ``owner``
    ``make_user("requester", kudos=10_000)`` / ``make_user("worker-owner")``.

Chat tables and routes added later are emptied by the same truncate (it walks the
models' metadata), so new fixtures can build on these.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import text, update
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.accounts.keys import ANONYMOUS_API_KEY, ANONYMOUS_USER_ID, create_user
from runtime.native.db.tables import Base, User
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores
from tests.support.native import raised_limits, running_native_with_objects
from tests.support.stores import running_stores

RAISED_LIMITS = "raised_limits"
"""``@pytest.mark.raised_limits("chat_async", ..., why="...")`` on a test (or a module's
pytestmark): the native_service's limits of those routes raised a thousandfold while it
runs. The suite runs at the shipped limits (spec/rate_limits.yaml); a test that needs more
of one route says why and raises only that one."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{RAISED_LIMITS}(*operation_ids, why): " + "raise them")


@pytest.fixture(autouse=True)
def _raised_limits(request: pytest.FixtureRequest) -> Iterator[None]:
    marker = request.node.get_closest_marker(RAISED_LIMITS)
    if marker is None:
        yield
        return
    if not marker.kwargs.get("why"):
        raise ValueError(f"{request.node.nodeid}: raised_limits needs why=...")
    service: NativeService = request.getfixturevalue("native_service")
    with raised_limits(service, *marker.args):
        yield


@pytest.fixture(scope="session")
def horde_stores() -> Iterator[EmbeddedStores]:
    with running_stores("horde-test-") as stores:
        yield stores


SERVICE_PASSKEY = "test-service-passkey"
"""The native_service's X-Horde-Service-Passkey (what a front under test presents)."""
MODERATION_PATTERNS = (r"\bforbidden-word\b",)
"""The native_service's moderation screen: a chat submission mentioning it is refused."""


@pytest.fixture(scope="session")
def native_service(horde_stores: EmbeddedStores) -> Iterator[NativeService]:
    with running_native_with_objects(
        horde_stores,
        "horde-objects-",  # the filesystem store
        service_passkey=SERVICE_PASSKEY,
        moderation_patterns=MODERATION_PATTERNS,
    ) as service:
        yield service


@pytest.fixture(scope="session")
def native_url(native_service: NativeService) -> str:
    return f"{native_service.url}/api/v2"


def reset_database(sessions: sessionmaker[Session]) -> None:
    """Empty every table, then put the anonymous user and its key back."""
    tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with transaction(sessions) as session:
        session.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        session.execute(
            text("INSERT INTO users (id, username, concurrency) VALUES (:id, 'Anonymous', 30)"),
            {"id": ANONYMOUS_USER_ID},
        )
        session.execute(
            text("INSERT INTO api_keys (key_hash, user_id) VALUES (:h, :id)"),
            {"h": hashlib.sha256(ANONYMOUS_API_KEY.encode()).hexdigest(), "id": ANONYMOUS_USER_ID},
        )


@pytest.fixture
def native_db(native_service: NativeService) -> sessionmaker[Session]:
    sessions = native_service.context.sessions
    reset_database(sessions)
    native_service.context.redis.flushdb()
    native_service.context.kept.clear()  # the public figures kept from an earlier test
    return sessions


@pytest.fixture
def native_client(native_url: str, native_db: sessionmaker[Session]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=native_url, timeout=30) as client:
        yield client


@dataclass(frozen=True)
class MadeUser:
    id: int
    api_key: str


@pytest.fixture
def make_user(native_db: sessionmaker[Session]) -> Callable[..., MadeUser]:
    def make(
        name: str = "user", kudos: float = 0, concurrency: int = 30, trusted: bool = False
    ) -> MadeUser:
        with transaction(native_db) as session:
            user, api_key = create_user(session, name, kudos=kudos, concurrency=concurrency)
            if trusted:
                session.execute(update(User).where(User.id == user.id).values(trusted=True))
            return MadeUser(id=user.id, api_key=api_key)

    return make


@pytest.fixture
def requester(make_user: Callable[..., MadeUser]) -> MadeUser:
    """A user with 10,000 kudos, the one sending chat requests."""
    return make_user("requester", kudos=10_000)


@pytest.fixture
def owner(make_user: Callable[..., MadeUser]) -> MadeUser:
    """A user without kudos, the one whose workers serve."""
    return make_user("worker-owner")
