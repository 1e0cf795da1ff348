"""A request's webhook: each landed generation POSTed to the client's URL, as upstream does.

Upstream (``ProcessingGeneration.send_webhook``) POSTs, after the submit's commit, the
generation as its status shows it, with ``request`` (the id) and ``kudos`` (the reward); a
chat request's once, when done. ``SENDER`` sends on a few threads shared fairly by each
destination host and requester (spec/defences.yaml ``webhooks``), so hanging receivers delay
only their own; best effort, as upstream's.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from generated.defences import (
    WEBHOOK_ATTEMPT_SECONDS,
    WEBHOOK_ATTEMPTS,
    WEBHOOK_QUEUE,
    WEBHOOK_QUEUED_PER_SOURCE,
    WEBHOOK_RUNNING_PER_SOURCE,
    WEBHOOK_SENDERS,
)
from runtime.fair_shares import FairPool, PoolFull, ShareFull
from runtime.native.accounts.keys import ANONYMOUS_USER_ID
from runtime.native.db.tables import Generation, WaitingPrompt, Worker
from runtime.native.objects.fetch import FetchPolicy, FetchRefused, Unreachable, post_public
from runtime.native.requests.chat_status import generation_json
from runtime.native.requests.text import text_generation_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    url: str
    body: dict[str, Any]
    requester: str = ""
    """Whose share of the sender the delivery uses besides its host's (``requester_of``)."""

    def sources(self) -> tuple[str, ...]:
        host = (urlsplit(self.url).hostname or "").lower()
        return (f"host:{host}", f"requester:{self.requester}")


def requester_of(wp: WaitingPrompt) -> str:
    """A request's requester for the webhook shares: its user, or its address when the
    user is the anonymous one every keyless client shares."""
    if wp.user_id == ANONYMOUS_USER_ID:
        return f"address:{wp.ipaddr}"
    return f"user:{wp.user_id}"


def generation_delivery(
    session: Session, wp: WaitingPrompt, gen_id: uuid.UUID, reward: Decimal
) -> Delivery | None:
    """The webhook call for a generation that just landed, or None without a webhook."""
    if not wp.webhook:
        return None
    gen, name = session.execute(
        select(Generation, Worker.name)
        .join(Worker, Worker.id == Generation.worker_id)
        .where(Generation.id == gen_id)
    ).one()
    details: dict[str, Any] = dict(
        generation_json(gen, name) if wp.is_chat else text_generation_json(gen, name)
    )
    body = {**details, "request": str(wp.id), "id": str(gen.id), "kudos": float(reward)}
    return Delivery(url=wp.webhook, body=body, requester=requester_of(wp))


class WebhookSender:
    """The sender threads (started on first use), shared fairly between hosts and
    requesters."""

    def __init__(
        self,
        *,
        senders: int = WEBHOOK_SENDERS,
        size: int = WEBHOOK_QUEUE,
        running_per_source: int = WEBHOOK_RUNNING_PER_SOURCE,
        queued_per_source: int = WEBHOOK_QUEUED_PER_SOURCE,
    ) -> None:
        self.pool = FairPool(
            "horde-webhooks",
            workers=senders,
            queued=size,
            running_per_source=running_per_source,
            queued_per_source=queued_per_source,
        )

    def send(self, delivery: Delivery, *, allow_loopback: bool = False) -> None:
        """Queue ``delivery``; never blocks (dropped, and logged, past a share or the queue)."""
        policy = FetchPolicy(
            timeout_seconds=float(WEBHOOK_ATTEMPT_SECONDS), allow_loopback=allow_loopback
        )
        try:
            self.pool.submit(delivery.sources(), lambda: _logged(delivery, policy))
        except ShareFull as full:
            log.warning(
                "webhook share of %s full (%d); dropped the delivery for %s",
                full.source,
                full.held,
                delivery.body["id"],
            )
        except PoolFull:
            log.warning("webhook queue full; dropped the delivery for %s", delivery.body["id"])

    def drain(self) -> None:
        """Wait until every queued delivery was tried (tests)."""
        self.pool.join()


def _logged(delivery: Delivery, policy: FetchPolicy) -> None:
    try:
        deliver(delivery, policy)
    except Exception:  # a thread of the pool: log it, the next delivery goes on
        log.exception("webhook delivery for %s failed", delivery.body.get("id"))


def deliver(delivery: Delivery, policy: FetchPolicy) -> bool:
    """POST, retrying a failed attempt up to ``WEBHOOK_ATTEMPTS`` in all; True on a 2xx."""
    body = json.dumps(delivery.body).encode()
    for attempt in range(1, WEBHOOK_ATTEMPTS + 1):
        try:
            status = post_public(delivery.url, body, policy)
        except Unreachable as failed:
            log.info("webhook for %s: attempt %d: %s", delivery.body["id"], attempt, failed)
            continue
        except FetchRefused as refused:  # the guards refused the URL: retrying cannot help
            log.info("webhook for %s refused: %s", delivery.body["id"], refused)
            return False
        if 200 <= status < 300:
            return True
        log.info("webhook for %s: attempt %d answered %d", delivery.body["id"], attempt, status)
    return False


SENDER = WebhookSender()
