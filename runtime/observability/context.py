"""The request being served: its id and, once a key was resolved, its user id.

Context variables: a thread (waitress) or task (asyncio) sees its own request's values.
A service resets both when a request starts (``begin``).
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from decimal import Decimal
from typing import Any

REQUEST_ID_HEADER = "x-request-id"
MAX_REQUEST_ID = 128
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

request_id: ContextVar[str | None] = ContextVar("horde_request_id", default=None)
user_id: ContextVar[int | None] = ContextVar("horde_user_id", default=None)


def accepted_request_id(header: str | None, prefix: str) -> str:
    """The caller's request id when it is a plain token, else a new one named ``prefix...``."""
    if header and _SAFE_ID.match(header):
        return header
    return prefix + uuid.uuid4().hex


def begin(new_request_id: str) -> None:
    """A request starts: its id, and no user yet."""
    request_id.set(new_request_id)
    user_id.set(None)


def set_user(value: int) -> None:
    """The request's key belongs to user ``value`` (called where keys are resolved)."""
    user_id.set(value)


KUDOS_MOVES = "horde.kudos_moves"
"""A database session's ``info`` key: the (ledger reason, delta) its transaction recorded."""


def note_kudos(session_info: dict[str, Any], reason: str, delta: Decimal) -> None:
    """Where the ledger is written: the service counts it once the transaction commits."""
    session_info.setdefault(KUDOS_MOVES, []).append((reason, delta))


WORKER_FAULTS = "horde.worker_faults"
"""A database session's ``info`` key: how many jobs of each kind its transaction recorded as
faulted by their worker."""
KIND_TEXT, KIND_CHAT = "text", "chat"
"""The kinds of job a worker pops and faults (the ``kind`` label of pops and faults)."""


def note_worker_fault(session_info: dict[str, Any], kind: str) -> None:
    """Where a worker's fault is recorded: the service counts it once the transaction commits."""
    faults: dict[str, int] = session_info.setdefault(WORKER_FAULTS, {})
    faults[kind] = faults.get(kind, 0) + 1
