"""Waiting for an event in a test: poll a condition until it holds, with a deadline that
only bounds a failure (never a figure the test asserts on)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

POLL = 0.02


def until(condition: Callable[[], Any], what: str, seconds: float = 30, poll: float = POLL) -> Any:
    """``condition()``'s first truthy value, asked every ``poll`` seconds; AssertionError
    naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds} s"
        time.sleep(poll)


def waiting_for_a_lock(sessions: sessionmaker[Session]) -> bool:
    """Whether another Postgres backend waits for a lock now (a statement of the service
    under test, blocked on a row a test's transaction holds)."""
    return lock_waiters(sessions) > 0


def lock_waiters(sessions: sessionmaker[Session], statement_like: str = "%") -> int:
    """How many other Postgres backends wait for a lock now, of those whose statement is
    LIKE ``statement_like``."""
    with sessions() as session:
        waiting = session.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND pid <> pg_backend_pid() AND query LIKE :statement"
            ),
            {"statement": statement_like},
        )
    return int(waiting or 0)
