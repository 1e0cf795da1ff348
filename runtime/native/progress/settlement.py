"""The cancel settlement of streamed generations (docs/design.md, "Pricing" and "Streaming").

A cancelled request's generations still in flight that posted progress are settled on the
text posted before the cancel, which the Horde measured: the worker paid for it and the
requester charged for it as for a submitted reply, the job not counted as dropped, and the
posted text kept as the generation's, so the status shows what was charged. A posted
text faster than its claimed model allows counts a suspicion, as a submit does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from generated.chat.tables_reply import CHARGE_BASIS
from generated.streaming import STREAMED_REASONING_PART, STREAMED_REPLY_PART
from generated.wire import STATE_OK
from runtime.contract.pricing import output_estimate
from runtime.native.accounts import kudos, shared_keys, suspicion
from runtime.native.db.tables import Generation, User, WaitingPrompt, Worker
from runtime.native.progress.protocol import mark_cancelled, posted, read_lease
from runtime.native.requests.rows import unfinished

log = logging.getLogger(__name__)

SETTLED_STATE = STATE_OK


@dataclass(frozen=True)
class Settled:
    generation_id: str
    text: str
    tokens: int
    reward: Decimal


def settle_generation(
    session: Session, redis: Redis, wp: WaitingPrompt, gen: Generation, now: datetime
) -> Settled | None:
    """Cancel one streamed generation and settle it on its posted text (None: nothing posted)."""
    generation_id = str(gen.id)
    try:
        lease = read_lease(redis, generation_id)
        mark_cancelled(redis, generation_id)
        sent = posted(redis, str(wp.id), generation_id)
    except (RedisError, OSError) as exc:  # the cancel does not need Redis to succeed
        log.warning("cancel of %s settles nothing posted: Redis: %s", generation_id, exc)
        return None  # cancelled unpaid: the posted text was not relayed either
    text = sent.content
    if not text and not sent.reasoning:
        return None
    worker, owner = session.execute(
        select(Worker, User).join(User, User.id == Worker.user_id).where(Worker.id == gen.worker_id)
    ).one()
    reply: dict[str, str | None] = {STREAMED_REPLY_PART: text}
    if sent.reasoning:  # reasoning is generated output, priced with the content
        reply[STREAMED_REASONING_PART] = sent.reasoning
    tokens = output_estimate(reply, wp.max_length)
    serving = kudos.Serving(
        requester_id=wp.user_id, owner_id=owner.id, trusted=owner.trusted,
        request_address=wp.ipaddr, worker_address=lease.worker_address if lease else None,
        seconds=(now - gen.start_time).total_seconds(),
    )  # fmt: skip
    reward = kudos.earned(wp, tokens, gen.model, bridge_agent=worker.bridge_agent, serving=serving)
    values: dict[str, Any] = {
        "generation": text,
        "state": SETTLED_STATE,
        "reward": reward,
        "charge": reward,
        "cancelled": True,
        "completed_at": now,
    }
    if wp.is_chat:  # the status shows the posted content, without a finish reason
        values |= {"reply": reply, "charge_basis": CHARGE_BASIS}
    claimed = session.execute(
        update(Generation)
        .where(Generation.id == gen.id, *unfinished())
        .values(**values)
        .returning(Generation.id)
    ).first()
    if claimed is None:
        return None
    kudos.apply_kudos(
        session, owner.id, reward, "reward", wp_id=wp.id, generation_id=gen.id, worker_id=worker.id
    )
    kudos.apply_kudos(session, wp.user_id, -reward, "charge", wp_id=wp.id, generation_id=gen.id)
    shared_keys.spend(session, wp.sharedkey_id, reward)
    session.execute(
        update(Worker)
        .where(Worker.id == worker.id)
        .values(kudos=Worker.kudos + reward, contributions=Worker.contributions + tokens)
    )
    fast = kudos.unreasonably_fast(tokens, gen.model, serving)
    if fast is not None:
        suspicion.report(session, worker.id, owner.id, owner.trusted, fast)
    return Settled(generation_id, text, tokens, reward)


def settle_cancelled_streams(
    session: Session, redis: Redis, wp: WaitingPrompt, now: datetime
) -> list[Settled]:
    """Settle every generation of ``wp`` still in flight on what it posted.

    Call it inside the cancel's transaction, before the generations still in flight are
    marked cancelled unpaid (``cancel_text_request`` does that for the rest). It first sets
    each lease's cancel flag, so nothing more is appended and the worker's next
    acknowledgement says ``cancelled: true``; a retried cancel settles the same text once
    (the settlement claims the generation with a compare-and-set). The worker is paid by
    ``kudos.earned`` with the address its lease kept from the pop. With Redis unreachable
    nothing posted can be read (nor was it relayed), so the generation is cancelled unpaid."""
    gens = session.scalars(
        select(Generation)
        .where(Generation.wp_id == wp.id, *unfinished())
        .order_by(Generation.start_time)
        .with_for_update(skip_locked=True)  # the cancel holds them; one a payment holds is its
    ).all()
    settled = [settle_generation(session, redis, wp, gen, now) for gen in gens]
    return [s for s in settled if s is not None]
