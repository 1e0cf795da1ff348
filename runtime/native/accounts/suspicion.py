"""Upstream's worker suspicion for text (horde/suspicions.py, Worker.report_suspicion), with
spec/pricing.yaml's economy.suspicion: each suspicion adds one to the worker's count and its
owner's (the owner flagged); an untrusted owner's worker reaching SUSPICION_THRESHOLD is put
in maintenance (upstream pauses it), so it is handed no more jobs. Trusted owners' workers
are never suspicious. The reasons that fit text: a generation faster than its claimed model
allows (``kudos.unreasonably_fast``), and more aborted jobs in an hour than the limit.
"""

from __future__ import annotations

import logging
import uuid

from sqlalchemy import Connection, Text, case, cast, func, update
from sqlalchemy.orm import Session

from generated.pricing import SUSPICION_MAINTENANCE_REASON, SUSPICION_THRESHOLD
from runtime.native.db.tables import User, Worker

log = logging.getLogger(__name__)


def report(
    db: Session | Connection, worker_id: uuid.UUID, owner_id: int, trusted: bool, reason: str
) -> None:
    """Count one suspicion of ``reason`` against the worker and its owner (nothing for a
    trusted owner's); at the threshold, the worker goes into maintenance."""
    if trusted:
        return
    count = Worker.suspicion + 1
    reached = count >= SUSPICION_THRESHOLD
    paused = func.replace(
        SUSPICION_MAINTENANCE_REASON.replace("{reason}", reason), "{count}", cast(count, Text)
    )
    reason_text = case((reached, paused), else_=Worker.maintenance_reason)
    db.execute(
        update(Worker)
        .where(Worker.id == worker_id)
        .values(
            suspicion=count,
            maintenance=Worker.maintenance | reached,
            maintenance_reason=reason_text,
        )
    )
    db.execute(update(User).where(User.id == owner_id).values(suspicion=User.suspicion + 1))
    log.warning("worker %s suspicion increased: %s", worker_id, reason)
