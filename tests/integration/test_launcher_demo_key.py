"""``horde-chat up`` creates the demo worker's user once and keeps its key across restarts."""

from __future__ import annotations

import stat

import pytest
from sqlalchemy import select

from runtime.launcher import DEMO_USER, demo_worker_key
from runtime.native.accounts.keys import user_for_key
from runtime.native.db.tables import User
from runtime.stores.database import transaction
from tests.conftest import reset_database

pytestmark = pytest.mark.integration


def test_the_demo_key_is_kept_while_it_names_a_user_and_replaced_after_a_reset(
    horde_stores, native_db, tmp_path
):
    key_file = tmp_path / "data" / "demo-worker.key"

    first = demo_worker_key(horde_stores.database_url, key_file)

    assert key_file.read_text() == first + "\n"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    with transaction(native_db) as session:
        assert user_for_key(session, first).username == DEMO_USER
    assert demo_worker_key(horde_stores.database_url, key_file) == first
    with transaction(native_db) as session:
        assert len(session.scalars(select(User).where(User.username == DEMO_USER)).all()) == 1

    reset_database(native_db)  # the database was reset: the kept key names nobody
    second = demo_worker_key(horde_stores.database_url, key_file)

    assert second != first
    assert key_file.read_text() == second + "\n"
    with transaction(native_db) as session:
        assert user_for_key(session, second).username == DEMO_USER
