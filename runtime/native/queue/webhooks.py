"""A request's webhook: each landed generation POSTed to the client's URL, as upstream does.

Upstream (``ProcessingGeneration.send_webhook``) POSTs, after the submit's commit, the
generation's details as its status shows them (for text: text, seed, worker_id,
worker_name, model, id, state, gen_metadata; for chat: the chat status's generation) with
``request`` (the request id) and ``kudos`` (the worker's reward). A chat request has one
generation, so its webhook is called once, when it is done.

``generation_delivery`` builds that body inside the submit's transaction (it reads rows);
the route hands it to ``SENDER`` after the commit. The sender is one daemon thread behind a
bounded queue (``QUEUE_SIZE``; a delivery past it is dropped and logged), so a slow
receiver never holds a submit open: up to ``ATTEMPTS`` POSTs of at most
``ATTEMPT_TIMEOUT_SECONDS`` each, each through the address guards of the image fetch
(``runtime.native.objects.fetch.post_public``: https, public addresses only). A refused URL
is not retried; delivery is best effort, as upstream's.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from runtime.native.db.tables import Generation, WaitingPrompt, Worker
from runtime.native.objects.fetch import FetchPolicy, FetchRefused, Unreachable, post_public
from runtime.native.requests.chat_status import generation_json
from runtime.native.requests.text import text_generation_json

log = logging.getLogger(__name__)

QUEUE_SIZE = 256
ATTEMPTS = 3
ATTEMPT_TIMEOUT_SECONDS = 3.0


@dataclass(frozen=True)
class Delivery:
    url: str
    body: dict[str, Any]


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
    return Delivery(url=wp.webhook, body=body)


class WebhookSender:
    """One daemon thread delivering queued webhooks; started on first use."""

    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self._queue: queue.Queue[tuple[Delivery, FetchPolicy]] = queue.Queue(maxsize=size)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def send(self, delivery: Delivery, *, allow_loopback: bool = False) -> None:
        """Queue ``delivery``; never blocks (dropped, and logged, when the queue is full)."""
        policy = FetchPolicy(timeout_seconds=ATTEMPT_TIMEOUT_SECONDS, allow_loopback=allow_loopback)
        self._ensure_thread()
        try:
            self._queue.put_nowait((delivery, policy))
        except queue.Full:
            log.warning("webhook queue full; dropped the delivery for %s", delivery.body["id"])

    def drain(self) -> None:
        """Wait until every queued delivery was tried (tests)."""
        self._queue.join()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="horde-webhooks", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            delivery, policy = self._queue.get()
            try:
                deliver(delivery, policy)
            except Exception:  # keep the thread alive for the next delivery
                log.exception("webhook delivery for %s failed", delivery.body.get("id"))
            finally:
                self._queue.task_done()


def deliver(delivery: Delivery, policy: FetchPolicy) -> bool:
    """POST once, retrying a failed attempt up to ``ATTEMPTS`` in all; True when a 2xx came."""
    body = json.dumps(delivery.body).encode()
    for attempt in range(1, ATTEMPTS + 1):
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
