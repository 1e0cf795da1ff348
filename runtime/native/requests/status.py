"""What the text and chat status routes share: a request's jobs with their workers' names,
the counts every status carries, and the queue position with its wait estimate.

The wait is the queued work ahead (max_length x n, in tokens) plus the request's own, over
the throughput of the workers that could serve it: each one's recorded speed (the rolling
average of its speed samples, tokens per second) times its threads, or
``Policy.assumed_tokens_per_second`` per thread for a worker without samples. Which
queued work counts and which workers serve differ by kind: the text status counts all work
ahead and the online workers that fit; the chat status only the work its eligible workers
could take (``takes``), over those workers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from generated.wire.native import RequestStatus
from runtime.native.db.tables import Generation, WaitingPrompt, Worker
from runtime.native.queue.policy import Policy
from runtime.native.requests.rows import queued


@dataclass(frozen=True)
class Jobs:
    """A request's jobs, in start order, each with its worker's name."""

    rows: list[tuple[Generation, str]]

    @property
    def landed(self) -> list[tuple[Generation, str]]:
        return [(g, name) for g, name in self.rows if g.generation is not None]

    @property
    def processing(self) -> list[Generation]:
        return [g for g, _ in self.rows if g.generation is None and not (g.faulted or g.cancelled)]


def request_jobs(session: Session, wp: WaitingPrompt) -> Jobs:
    rows = session.execute(
        select(Generation, Worker.name)
        .join(Worker, Worker.id == Generation.worker_id)
        .where(Generation.wp_id == wp.id)
        .order_by(Generation.start_time)
    ).all()
    return Jobs([(g, name) for g, name in rows])


def status_counts(
    policy: Policy,
    wp: WaitingPrompt,
    jobs: Jobs,
    restarted: int,
    position: tuple[int, int],
    *,
    is_possible: bool,
) -> RequestStatus:
    """The fields every status starts with (``position``: requests ahead, wait seconds)."""
    landed = jobs.landed
    processing = jobs.processing
    done = wp.faulted or wp.cancelled or (wp.n == 0 and not processing)
    charged = sum((g.charge for g, _ in landed), Decimal(0)) + policy.horde_tax
    return {
        "finished": len(landed),
        "processing": len(processing),
        "restarted": restarted,
        "waiting": max(wp.n, 0),
        "done": bool(done),
        "faulted": wp.faulted,
        "wait_time": position[1],
        "queue_position": position[0],
        "kudos": float(charged),
        "is_possible": is_possible,
    }


def throughput(policy: Policy, workers: list[Worker]) -> float:
    """Tokens per second of ``workers``: recorded speed (or the assumed one) x threads."""
    return sum(
        w.threads * (policy.assumed_tokens_per_second if w.speed is None else w.speed)
        for w in workers
    )


def queue_position(
    session: Session,
    policy: Policy,
    wp: WaitingPrompt,
    workers: list[Worker],
    takes: ColumnElement[bool] | None = None,
) -> tuple[int, int]:
    """(requests ahead of ``wp``, estimated seconds), the work ahead counted in SQL (only
    the work ``takes`` selects, when given); (0, 0) once nothing is left to hand out."""
    if wp.n <= 0:
        return 0, 0
    ahead = and_(
        *queued(),
        WaitingPrompt.id != wp.id,
        or_(
            WaitingPrompt.extra_priority > wp.extra_priority,
            and_(
                WaitingPrompt.extra_priority == wp.extra_priority,
                WaitingPrompt.created < wp.created,
            ),
        ),
    )
    work: ColumnElement[int] = func.sum(WaitingPrompt.max_length * WaitingPrompt.n)
    if takes is not None:
        work = work.filter(takes)
    count, tokens = session.execute(select(func.count(), func.coalesce(work, 0)).where(ahead)).one()
    rate = throughput(policy, workers)
    if rate <= 0:
        return int(count), 0
    return int(count), math.ceil((int(tokens) + wp.max_length * wp.n) / rate)
