"""The lifecycle sweep: stale jobs aborted and requeued, faults counted, requests expired.

A job ended by its worker's fault (out of time, or faulted) counts toward its abort limit:
over ``Policy.abort_limit_per_hour`` in an hour puts the worker in maintenance, with a
reason its operator reads on /workers and in the pop's WorkerMaintenance error.
``sweep`` does one pass (tests call it with a ``now``); ``Sweeper`` runs it periodically in
a daemon thread started with the app.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from redis import Redis
from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from generated.pricing import SUSPICION_TOO_MANY_JOBS_ABORTED
from generated.signals import CHAT_EVENT_EXPIRED, CHAT_EVENT_FAULTED
from runtime.native.accounts import kudos, suspicion
from runtime.native.db.tables import Generation, OperationKey, User, WaitingPrompt, Worker
from runtime.native.objects.lifecycle import delete_objects, ended_with_objects, release_ended
from runtime.native.progress.protocol import mark_ended
from runtime.native.queue.policy import Policy
from runtime.native.queue.wake import wake_workers
from runtime.native.requests.signals import publish_chat_event
from runtime.native.stats.text_stats import fold_old_stats
from runtime.stores.database import transaction
from runtime.stores.objects import ObjectStore

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


def fault_generation(
    session: Session,
    policy: Policy,
    gen_id: uuid.UUID,
    now: datetime,
    *,
    aborted: bool,
    worker_fault: bool = True,
) -> None:
    """Fault a job and give its request the slot back; fault the request past the limit.

    ``aborted``: the job ran out of time. ``worker_fault``: the worker caused it (it ran out
    of time, or the worker faulted it: an overflow, a refused reply, a backend error); these
    count toward the worker's abort limit (a job the horde itself could not send does not).
    """
    gen = session.scalars(select(Generation).where(Generation.id == gen_id)).one()
    gen.faulted = True
    if aborted:
        gen.aborted = True
    if aborted or worker_fault:
        gen.aborted_at = now
    wp = session.scalars(
        select(WaitingPrompt).where(WaitingPrompt.id == gen.wp_id).with_for_update()
    ).one()
    faults = session.execute(
        select(func.count())
        .select_from(Generation)
        .where(Generation.wp_id == wp.id, Generation.faulted.is_(True))
    ).scalar_one()
    if wp.active and not wp.cancelled:
        wp.n += 1
    if faults > policy.fault_limit:
        wp.faulted = True
        wp.n = 0
        wp.active = False
        kudos.release_holds(session, wp.id)
    if aborted or worker_fault:
        _count_abort(session, policy, gen.worker_id, now)


def count_worker_fault(
    session: Session, policy: Policy, gen_id: uuid.UUID, worker_id: uuid.UUID, now: datetime
) -> None:
    """Count a landed job as its worker's fault (toward the abort limit) without faulting
    it: a reply that broke the worker's own stream, paid only for what its client got."""
    session.execute(update(Generation).where(Generation.id == gen_id).values(aborted_at=now))
    _count_abort(session, policy, worker_id, now)


def maintenance_reason(count: int, limit: int) -> str:
    """What an operator reads on /workers and in the worker's pop error."""
    return (
        f"{count} jobs in the last hour ended by this worker's fault (ran out of time or "
        f"faulted), more than the limit of {limit}: check its backend (each faulted job's "
        "gen_metadata says why) and consider fewer threads"
    )


def _count_abort(session: Session, policy: Policy, worker_id: uuid.UUID, now: datetime) -> None:
    """Count a job ended by the worker's fault; past the hourly limit, maintenance."""
    recent = session.execute(
        select(func.count())
        .select_from(Generation)
        .where(
            Generation.worker_id == worker_id,
            Generation.aborted_at > now - timedelta(hours=1),
        )
    ).scalar_one()
    values: dict[str, object] = {"aborted_jobs": Worker.aborted_jobs + 1}
    too_many = recent > policy.abort_limit_per_hour
    if too_many:
        values |= {
            "maintenance": True,
            "maintenance_reason": maintenance_reason(recent, policy.abort_limit_per_hour),
        }
    session.execute(update(Worker).where(Worker.id == worker_id).values(**values))
    if too_many:  # upstream's TOO_MANY_JOBS_ABORTED suspicion, on the worker and its owner
        owner_id, trusted = session.execute(
            select(User.id, User.trusted)
            .join(Worker, Worker.user_id == User.id)
            .where(Worker.id == worker_id)
        ).one()
        suspicion.report(session, worker_id, owner_id, trusted, SUSPICION_TOO_MANY_JOBS_ABORTED)


@dataclass(frozen=True)
class SweepReport:
    aborted: int
    expired: int


def sweep(
    sessions: sessionmaker[Session],
    policy: Policy,
    now: datetime | None = None,
    redis: Redis | None = None,
    objects: ObjectStore | None = None,
) -> SweepReport:
    """One pass. With ``redis``, it ends the progress lease of every streamed generation it
    aborted (ended marker and faulted entry, so a relaying front stops at once) and publishes
    the completion signal of every chat request it faulted or expired. With ``objects``, it
    deletes an expired request's objects with its row and releases those of other ended
    requests that still own some (a release the routes missed). It also forgets operation
    keys a cancel retired once a request would have expired, and folds text statistics
    older than a month into their archive."""
    now = now or utcnow()
    aborted = 0
    with transaction(sessions) as session:
        stale = session.execute(
            select(Generation.id, Generation.wp_id)
            .where(
                Generation.generation.is_(None),
                Generation.faulted.is_(False),
                Generation.cancelled.is_(False),
                Generation.start_time + func.make_interval(0, 0, 0, 0, 0, 0, Generation.ttl) < now,
            )
            .with_for_update(skip_locked=True, of=Generation)
        ).all()
        for gen_id, _wp_id in stale:
            fault_generation(session, policy, gen_id, now, aborted=True)
            aborted += 1
        faulted_chats = session.scalars(
            select(WaitingPrompt.id).where(
                WaitingPrompt.id.in_({wp_id for _gen_id, wp_id in stale}),
                WaitingPrompt.is_chat.is_(True),
                WaitingPrompt.faulted.is_(True),
            )
        ).all()
    with transaction(sessions) as session:
        pending = exists().where(
            Generation.wp_id == WaitingPrompt.id,
            Generation.generation.is_(None),
            Generation.faulted.is_(False),
            Generation.cancelled.is_(False),
        )
        rows = session.execute(
            select(WaitingPrompt.id, WaitingPrompt.is_chat, WaitingPrompt.object_keys)
            .where(WaitingPrompt.expiry < now, ~pending)
            .with_for_update(skip_locked=True)
        ).all()
        expired = [wp_id for wp_id, _is_chat, _keys in rows]
        for wp_id in expired:
            kudos.release_holds(session, wp_id)
        if objects is not None:  # before the rows go: a failed commit retries the whole
            delete_objects(objects, [key for _id, _chat, keys in rows for key in keys or ()])
        if expired:
            session.execute(delete(WaitingPrompt).where(WaitingPrompt.id.in_(expired)))
        retired_before = now - timedelta(seconds=policy.waiting_expiry_seconds)
        session.execute(  # keys retired by a cancel: no submit is on its way any more
            delete(OperationKey).where(
                OperationKey.wp_id.is_(None), OperationKey.created < retired_before
            )
        )
        fold_old_stats(session, now)  # text statistics past every period but the total
    if aborted:
        wake_workers(redis)  # the aborted jobs' requests got their slots back
    if redis is not None:
        for gen_id, _wp_id in stale:  # no-op for a generation that holds no lease
            mark_ended(redis, str(gen_id))
        for wp_id in faulted_chats:
            publish_chat_event(redis, wp_id, CHAT_EVENT_FAULTED)
        for wp_id, is_chat, _keys in rows:
            if is_chat:
                publish_chat_event(redis, wp_id, CHAT_EVENT_EXPIRED)
    if objects is not None:
        with transaction(sessions) as session:
            ended = ended_with_objects(session)
        release_ended(sessions, objects, ended)
    return SweepReport(aborted=aborted, expired=len(expired))


class Sweeper:
    """Runs ``sweep`` every ``period`` seconds in a daemon thread until ``stop()``."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        policy: Policy,
        period: float,
        redis: Redis | None = None,
        objects: ObjectStore | None = None,
    ) -> None:
        self._sessions, self._policy, self._period = sessions, policy, period
        self._redis, self._objects = redis, objects
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="horde-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            try:
                sweep(self._sessions, self._policy, redis=self._redis, objects=self._objects)
            except Exception:  # keep sweeping; the next pass retries
                log.exception("lifecycle sweep failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
