"""What the text and chat status routes share: a request's jobs with their workers' names,
the counts every status carries, and the queue position with its wait estimate.

The wait is queued work (max_length x n tokens) over the throughput of the workers that
could serve it: speed times threads, ``Policy.assumed_tokens_per_second`` a thread without
samples. The text status counts all work ahead plus its own over the fitting online workers
(upstream's "when done"); the chat status only the work ahead its eligible workers could
take (``takes``): when a worker could start it, which fail_fast compares with the time left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    UUID,
    ColumnElement,
    DateTime,
    Numeric,
    Select,
    and_,
    bindparam,
    func,
    or_,
    select,
)
from sqlalchemy.orm import Session

from generated.wire.native import RequestStatus
from runtime.native.db.tables import AnyWorker, Generation, WaitingPrompt, Worker
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
    rows = session.execute(_REQUEST_JOBS, {"wp_id": wp.id}).all()
    return Jobs([(g, name) for g, name in rows])


_REQUEST_JOBS = (
    select(Generation, Worker.name)
    .join(Worker, Worker.id == Generation.worker_id)
    .where(Generation.wp_id == bindparam("wp_id", type_=UUID(as_uuid=True)))
    .order_by(Generation.start_time)
)
"""``request_jobs``' statement, built once."""


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


def throughput(policy: Policy, workers: list[AnyWorker]) -> float:
    """Tokens per second of ``workers``: recorded speed (or the assumed one) x threads."""
    return sum(
        w.threads * (policy.assumed_tokens_per_second if w.speed is None else w.speed)
        for w in workers
    )


def queue_position(
    session: Session,
    policy: Policy,
    wp: WaitingPrompt,
    workers: list[AnyWorker],
    takes: ColumnElement[bool] | None = None,
) -> tuple[int, int]:
    """(requests ahead of ``wp``, estimated seconds), the work ahead counted in SQL (only
    the work ``takes`` selects, when given); (0, 0) once nothing is left to hand out."""
    if wp.n <= 0:
        return 0, 0
    count, tokens = session.execute(position_query(takes), position_values(wp)).one()
    return position_of(policy, workers, count, int(tokens) + wp.max_length * wp.n)


def position_query(takes: ColumnElement[bool] | None = None) -> Select[int, int]:
    """The statement counting the requests ahead of a request and their work (tokens;
    only the work ``takes`` selects, when given); the request's values are its parameters
    (``position_values``), so one statement serves every request."""
    ahead = and_(
        *queued(),
        WaitingPrompt.id != bindparam("wp_id", type_=UUID(as_uuid=True)),
        or_(
            WaitingPrompt.extra_priority > _PRIORITY,
            and_(WaitingPrompt.extra_priority == _PRIORITY, WaitingPrompt.created < _CREATED),
        ),
    )
    work: ColumnElement[int] = func.sum(WaitingPrompt.max_length * WaitingPrompt.n)
    if takes is not None:
        work = work.filter(takes)
    return select(func.count(), func.coalesce(work, 0)).where(ahead)


_PRIORITY = bindparam("wp_priority", type_=Numeric())
_CREATED = bindparam("wp_created", type_=DateTime(timezone=True))


POSITION_PARAMS = ("wp_id", "wp_priority", "wp_created")
"""``position_query``'s parameters for the request (``position_values``)."""


def position_values(wp: WaitingPrompt) -> dict[str, Any]:
    """``position_query``'s parameters for ``wp``."""
    return {"wp_id": wp.id, "wp_priority": wp.extra_priority, "wp_created": wp.created}


def position_of(
    policy: Policy, workers: list[AnyWorker], count: int, tokens: int
) -> tuple[int, int]:
    """(requests ahead, estimated seconds): ``position_query``'s count, and ``tokens`` of
    work over ``workers``' throughput."""
    rate = throughput(policy, workers)
    if rate <= 0:
        return int(count), 0
    return int(count), math.ceil(int(tokens) / rate)
