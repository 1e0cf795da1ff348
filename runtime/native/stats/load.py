"""The horde's load (/status/performance, upstream's HordePerformance): the text jobs
waiting or being generated and their tokens, the text workers checked in within the stale
window (maintenance or not, as upstream counts them) and their threads, and the tokens
delivered in the past minute. Image and interrogation figures are 0: this horde has none.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from generated.wire.native import HordePerformance
from runtime.native.db.tables import Generation, WaitingPrompt, Worker
from runtime.native.queue.policy import Policy
from runtime.native.requests.rows import queued, unfinished
from runtime.native.stats.text_stats import past_minute_tokens


def horde_load(session: Session, policy: Policy, now: datetime) -> HordePerformance:
    since = now - timedelta(seconds=policy.worker_stale_seconds)
    workers, threads = session.execute(
        select(func.count(), func.coalesce(func.sum(Worker.threads), 0)).where(
            Worker.last_check_in > since
        )
    ).one()
    waiting_jobs, waiting_tokens = session.execute(
        select(
            func.coalesce(func.sum(WaitingPrompt.n), 0),
            func.coalesce(func.sum(WaitingPrompt.n * WaitingPrompt.max_length), 0),
        ).where(*queued())
    ).one()
    running_jobs, running_tokens = session.execute(
        select(func.count(), func.coalesce(func.sum(WaitingPrompt.max_length), 0))
        .select_from(Generation)
        .join(WaitingPrompt, WaitingPrompt.id == Generation.wp_id)
        .where(*unfinished(), WaitingPrompt.active.is_(True))
    ).one()
    return HordePerformance(
        queued_requests=0,
        queued_text_requests=int(waiting_jobs) + int(running_jobs),
        worker_count=0,
        text_worker_count=int(workers),
        thread_count=0,
        text_thread_count=int(threads),
        queued_megapixelsteps=0.0,
        past_minute_megapixelsteps=0.0,
        queued_forms=0.0,
        interrogator_count=0,
        interrogator_thread_count=0,
        queued_tokens=float(int(waiting_tokens) + int(running_tokens)),
        past_minute_tokens=float(past_minute_tokens(session.connection())),
    )
