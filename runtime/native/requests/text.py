"""Text requests: create (with upstream's checks, concurrency, upfront kudos), status, cancel.

Bodies arrive validated against the route's schema with its defaults filled
(``runtime.native.api.body``); this module applies the checks a schema cannot express.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, func, select, update
from sqlalchemy.orm import Session

from generated.errors import (
    ExcessiveStopSequence,
    MissingFullSamplerOrder,
    MissingPrompt,
    TokenOverflow,
    TooManyStopSequences,
)
from generated.wire import DEFAULT_STATE
from runtime.native.accounts import kudos, shared_keys
from runtime.native.db.tables import (
    AnyWorker,
    Generation,
    SharedKey,
    User,
    WaitingPrompt,
    WorkerRow,
)
from runtime.native.queue.fit import VALIDATED_BACKENDS_KEY, worker_fits
from runtime.native.queue.jobs import raw_cursor
from runtime.native.queue.policy import Policy
from runtime.native.requests.countermeasures import Source
from runtime.native.requests.enqueue import enqueue_request
from runtime.native.requests.moderation import Screen
from runtime.native.requests.rows import (
    admit_jobs,
    find_request,
    queue_priority,
    running_jobs_free,
    unfinished,
)
from runtime.native.requests.status import queue_position, request_jobs, status_counts
from runtime.observability import context
from runtime.stores.raw_sql import raw_sql
from runtime.tables.route_schemas import DEFS

MAX_STOP_SEQUENCES = 128
MAX_STOP_SEQUENCE_CHARS = 2000
MIN_SAMPLER_ORDER = 7
REQUEST_TYPE = "Text Waiting Prompt"
SEED_UNSENT: int = DEFS["native"]["TextGeneration"]["properties"]["seed"]["default"]
"""A generation's seed when its worker sent none (upstream's submit parser's default)."""


@dataclass(frozen=True)
class Submitted:
    id: uuid.UUID | None
    kudos: Decimal


def check_text_params(prompt: str, params: dict[str, Any]) -> None:
    """Upstream's text validations that a JSON Schema does not express."""
    if not prompt.strip():
        raise MissingPrompt()
    if params["max_context_length"] < params["max_length"]:
        raise TokenOverflow(
            max_context_length=params["max_context_length"], max_length=params["max_length"]
        )
    stops = params.get("stop_sequence") or []
    if len(stops) > MAX_STOP_SEQUENCES:
        raise TooManyStopSequences(count=len(stops), limit=MAX_STOP_SEQUENCES)
    chars = sum(len(s) for s in stops)
    if chars > MAX_STOP_SEQUENCE_CHARS:
        raise ExcessiveStopSequence(chars=chars, limit=MAX_STOP_SEQUENCE_CHARS)
    order = params.get("sampler_order")
    if order is not None and len(set(order)) < MIN_SAMPLER_ORDER:
        raise MissingFullSamplerOrder(count=len(set(order)))


def create_text_request(
    session: Session,
    policy: Policy,
    user: User,
    body: dict[str, Any],
    *,
    client_agent: str,
    ipaddr: str,
    now: datetime,
    counted: int | None,
    moderation: Screen,
    source: Source,
    shared_key: SharedKey | None = None,
) -> Submitted:
    """Queue a text request (or quote it on dry_run); ``user`` must be locked FOR UPDATE
    (``requests.admission``, which reads its queued jobs as well: ``counted``; None has
    ``rows.admit_jobs`` count them). A ``source`` in timeout is refused, then the prompt
    passes the ``moderation`` screen. The row and the horde tax are one statement
    (``requests.enqueue``); ``user`` may be in no session. Sent with ``shared_key``, the
    request is held to its limits and its tax spends it."""
    params = dict(body["params"])
    check_text_params(body["prompt"], params)
    source.refuse_in_timeout()
    moderation.check(body["prompt"])
    n = int(params.pop("n", 1))
    models = list(body.get("models") or [])
    cost = kudos.quote(
        params["max_length"], params["max_context_length"], n, models, policy.horde_tax
    )
    shared_keys.check_request(shared_key, cost, params["max_length"])
    if body.get("dry_run"):
        return Submitted(id=None, kudos=cost)
    needs_upfront = admit_jobs(
        session,
        policy,
        user,
        n,
        params["max_length"],
        cost,
        source=ipaddr,
        slow_workers=bool(body.get("slow_workers", True)),
        counted=counted,
    )
    wp = WaitingPrompt(
        id=uuid.uuid4(),
        user_id=user.id,
        prompt=body["prompt"],
        params={**params, VALIDATED_BACKENDS_KEY: bool(body.get(VALIDATED_BACKENDS_KEY))},
        n=n,
        jobs=n,
        max_length=params["max_length"],
        max_context_length=params["max_context_length"],
        models=models,
        workers=[str(w) for w in body.get("workers") or []],
        worker_blacklist=bool(body.get("worker_blacklist")),
        trusted_workers=bool(body.get("trusted_workers")),
        slow_workers=bool(body.get("slow_workers", True)),
        extra_slow_workers=bool(body.get("extra_slow_workers")),
        nsfw=bool(body.get("nsfw")),
        softprompt=body.get("softprompt"),
        webhook=body.get("webhook"),
        origin_id=context.request_id.get(),
        sharedkey_id=shared_key.id if shared_key is not None else None,
        client_agent=client_agent[:255],
        ipaddr=ipaddr[:64],
        extra_priority=queue_priority(policy, user),
        kudos_estimate=cost,
        created=now,
        expiry=now + timedelta(seconds=policy.waiting_expiry_seconds),
    )
    enqueue_request(session, wp, Decimal(policy.horde_tax), None)
    shared_keys.spend(session, wp.sharedkey_id, Decimal(policy.horde_tax))
    if needs_upfront:
        kudos.hold_upfront(session, user.id, wp.id, cost)
    return Submitted(id=wp.id, kudos=cost)


def get_text_request(session: Session, request_id: str, *, lock: bool = False) -> WaitingPrompt:
    return find_request(session, request_id, is_chat=False, request_type=REQUEST_TYPE, lock=lock)


def finish_if_complete(session: Session, wp: WaitingPrompt) -> None:
    """Deactivate a request with nothing left to hand out or wait for; release its holds."""
    if wp.n > 0 and not (wp.faulted or wp.cancelled):
        return
    pending = session.scalar(
        select(func.count()).select_from(Generation).where(Generation.wp_id == wp.id, *unfinished())
    )
    if pending and not (wp.faulted or wp.cancelled):
        return
    wp.active = False
    kudos.release_holds(session, wp.id)


def cancel_text_request(session: Session, wp: WaitingPrompt) -> None:
    """Upstream's DELETE: nothing more is handed out; jobs in flight are cancelled unpaid
    (``wp`` found with ``lock``: its running jobs, then itself; a job a worker's payment
    holds at this moment is that payment's, ``rows.running_jobs_free``)."""
    wp.n = 0
    wp.cancelled = True
    session.execute(
        update(Generation)
        .where(Generation.__table__.c.id.in_(running_jobs_free(wp.id)))
        .values(cancelled=True)
    )
    finish_if_complete(session, wp)


def text_status(
    session: Session, policy: Policy, wp: WaitingPrompt, now: datetime
) -> dict[str, Any]:
    jobs = request_jobs(session, wp)
    restarted = sum(1 for g, _ in jobs.rows if g.aborted)
    fitting = []
    if wp.n > 0:
        online = online_workers(session, policy, now)
        fitting = [w for w, t in online if worker_fits(w, t, wp)]
    counts = status_counts(
        policy,
        wp,
        jobs,
        restarted,
        queue_position(session, policy, wp, fitting),
        is_possible=wp.n == 0 or bool(fitting),
    )
    return {
        **counts,
        "kudos": whole_kudos(counts["kudos"]),
        "generations": [text_generation_json(g, name) for g, name in jobs.landed],
    }


def whole_kudos(kudos: float | Decimal) -> int:
    """Kudos as upstream's text answers show them (its async answer and status round)."""
    return round(kudos)


def text_generation_json(g: Generation, worker_name: str) -> dict[str, Any]:
    """A landed text generation as the status (and its webhook) shows it."""
    return {
        "text": g.generation,
        "seed": SEED_UNSENT if g.seed is None else g.seed,
        "worker_id": str(g.worker_id),
        "worker_name": worker_name,
        "model": g.model,
        "id": str(g.id),
        "state": g.state or DEFAULT_STATE,
        "gen_metadata": g.gen_metadata or [],
    }


def online_workers(
    db: Session | Connection, policy: Policy, now: datetime
) -> list[tuple[AnyWorker, bool]]:
    """The workers online now (checked in within ``Policy.worker_stale_seconds``, not in
    maintenance) with their owners' trust, read as rows, not entities (``WorkerRow``)."""
    with raw_cursor(db) as cursor:
        cursor.execute(ONLINE_SQL.sql, online_values(policy, now))
        return online_rows(cursor.fetchall())


def online_values(policy: Policy, now: datetime) -> tuple[Any, ...]:
    """``ONLINE_SQL``'s values: the workers checked in within the stale window of ``now``."""
    return ONLINE_SQL.values({"since": now - timedelta(seconds=policy.worker_stale_seconds)})


def online_rows(rows: list[Any]) -> list[tuple[AnyWorker, bool]]:
    """``ONLINE_SQL``'s rows as ``online_workers`` answers them: each worker's row and its
    owner's trust."""
    return [(WorkerRow._make(row[:-1]), bool(row[-1])) for row in rows]


ONLINE_COLUMNS = ", ".join(f"workers.{name}" for name in WorkerRow._fields) + ", users.trusted"
"""``ONLINE_SQL``'s columns (``online_rows`` reads them): the worker's row, its owner's trust."""
ONLINE_FROM = (
    " FROM workers JOIN users ON users.id = workers.user_id"
    " WHERE workers.last_check_in > %(since)s AND workers.maintenance IS false"
)
"""``ONLINE_SQL`` but its columns: a statement may read more of the online workers' rows."""
ONLINE_SQL = raw_sql(f"SELECT {ONLINE_COLUMNS}{ONLINE_FROM}")
"""``online_workers``' statement, in Postgres's placeholders once (a chat submit sends it
with its find: ``queue.chat_find``; a chat request's admission reads these columns with the
user's queued jobs: ``requests.admission``); its last column is the owner's trust."""
