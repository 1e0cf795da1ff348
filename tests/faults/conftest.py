"""The fault suite's own stores and services: faults are injected into real processes.

A fault test kills and restarts servers, so it never touches the session's stores
(tests/conftest.py): ``fault_stores`` is an embedded PostgreSQL and redis-server of this
suite (a temp dir, schema at head), shared by its modules; ``fault_native`` is a native API
on them (shipped settings and rate limits, no background sweeper) on an emptied database
and Redis; ``front_url`` is a front on it; ``fault_user`` makes users on it (``users``: a
requester and a worker owner). Every test of the suite carries the ``faults`` marker (its
modules' pytestmark; ``make test`` runs it, ``pytest -m faults`` alone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import update

from runtime.native.accounts.keys import create_user
from runtime.native.db.tables import User
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import MODERATION_PATTERNS, SERVICE_PASSKEY, MadeUser, reset_database
from tests.support.front import running_front
from tests.support.native import running_native_with_objects
from tests.support.stores import running_stores


@pytest.fixture(scope="session")
def fault_stores() -> Iterator[EmbeddedStores]:
    with running_stores("horde-faults-") as stores:
        yield stores


@pytest.fixture
def fault_native(fault_stores: EmbeddedStores) -> Iterator[NativeService]:
    with running_native_with_objects(
        fault_stores,
        "horde-faults-objects-",
        service_passkey=SERVICE_PASSKEY,
        moderation_patterns=MODERATION_PATTERNS,
    ) as service:
        reset_database(service.context.sessions)
        service.context.redis.flushdb()
        yield service


@pytest.fixture
def front_url(fault_stores: EmbeddedStores, fault_native: NativeService) -> Iterator[str]:
    """A front on ``fault_native`` that presents its passkey (the client's address is
    forwarded), at the shipped settings."""
    with running_front(
        fault_stores.redis_url, [fault_native.url], service_passkey=SERVICE_PASSKEY
    ) as front:
        yield front.url


@pytest.fixture
def fault_user(fault_native: NativeService) -> Callable[..., MadeUser]:
    """A user; ``trusted`` for a worker's owner: these test workers answer at once, which an
    untrusted worker of a known model is paid less for and suspected of (spec/pricing.yaml
    economy: five such jobs pause it), and the faults here are not about the economy."""

    def make(name: str = "user", kudos: float = 0, trusted: bool = False) -> MadeUser:
        with transaction(fault_native.context.sessions) as session:
            user, api_key = create_user(session, name, kudos=kudos, concurrency=30)
            if trusted:
                session.execute(update(User).where(User.id == user.id).values(trusted=True))
            return MadeUser(id=user.id, api_key=api_key)

    return make


@pytest.fixture
def users(fault_user: Callable[..., MadeUser]) -> tuple[MadeUser, MadeUser]:
    """(requester with 10,000 kudos, a trusted worker owner without), as the session's
    fixtures: the owner is trusted since its test workers answer at once (see fault_user)."""
    return fault_user("requester", kudos=10_000), fault_user("worker-owner", trusted=True)
