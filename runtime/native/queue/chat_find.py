"""A chat submit's reads in one round trip: its key's user, its job and the online pool.

They were three round trips and ORM loads on the path from a worker's reply to the client's
(docs/performance.md). ``find_chat_job`` sends two statements in one psycopg pipeline, both
before the payment; the pool is then the one a status read saw just before the request
ended, which the payment does not change. The job's rows are built as the ORM's loader
builds them (``db.detached``, no identity map), so the payment's values reach them through
``land_job``, not ``synchronize``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import RawCursor
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from runtime.native.db.detached import column_names, detached
from runtime.native.db.tables import AnyWorker, Generation, WaitingPrompt
from runtime.native.queue.jobs import driver_of
from runtime.native.queue.policy import Policy
from runtime.native.queue.submit import JobWorker, job_id, key_and_job
from runtime.native.requests.text import ONLINE_SQL, online_rows, online_values

GEN_COLUMNS = column_names(Generation)
WP_COLUMNS = column_names(WaitingPrompt, leave=frozenset({"messages", "submitted_prompt"}))
"""A chat request's columns a submit reads: all but its conversation (the kept messages,
as long as the client's, and the full flattened submission), which a reply is not checked
against and its status does not show. They are left unset on the built row."""
WORKER_COLUMNS = JobWorker._fields

_FIND = key_and_job(f"""
    SELECT {", ".join(f"processing_gens.{c}" for c in GEN_COLUMNS)},
        {", ".join(f"workers.{c}" for c in WORKER_COLUMNS)},
        {", ".join(f"waiting_prompts.{c}" for c in WP_COLUMNS)}
    FROM processing_gens
    JOIN workers ON workers.id = processing_gens.worker_id
    JOIN waiting_prompts ON waiting_prompts.id = processing_gens.wp_id
    WHERE processing_gens.id = %(gen_id)s AND waiting_prompts.is_chat
""")
"""``find_chat_job``'s first statement: the key's user and the chat job."""


@dataclass(frozen=True)
class ChatJob:
    """A handed-out chat job as its submit needs it: the job, its worker, its request."""

    gen: Generation
    worker: JobWorker
    wp: WaitingPrompt


@dataclass(frozen=True)
class FoundChat:
    """A chat submit's key and job, and the online pool, read together (``find_chat_job``)."""

    owner_id: int | None
    """The key's user (None: no such key)."""
    trusted: bool
    job: ChatJob | None
    """None: no such job, a text job, or not a job id."""
    online: list[tuple[AnyWorker, bool]]
    """The online workers with their owners' trust (``requests.text.online_workers``)."""


def find_chat_job(
    db: Session | Connection, key_hash: str, generation_id: str, policy: Policy, now: datetime
) -> FoundChat:
    """The submit's key's user, its chat job (with its worker and request) and the online
    pool as of ``now``, in one round trip (two statements in a pipeline, in autocommit each
    its own snapshot, or both in the caller's transaction)."""
    driver = driver_of(db)
    params = {"key_hash": key_hash, "gen_id": job_id(generation_id)}
    with RawCursor(driver) as find, RawCursor(driver) as pool:
        with driver.pipeline():
            find.execute(_FIND.sql, _FIND.values(params))
            pool.execute(ONLINE_SQL.sql, online_values(policy, now))
        row = find.fetchone()
        online = online_rows(pool.fetchall())
    assert row is not None
    owner_id, trusted, *job = row
    return FoundChat(owner_id, bool(trusted), _chat_job(job), online)


def _chat_job(values: list[Any]) -> ChatJob | None:
    if values[0] is None:
        return None
    at = len(GEN_COLUMNS)
    then = at + len(WORKER_COLUMNS)
    return ChatJob(
        gen=detached(Generation, GEN_COLUMNS, values[:at]),
        worker=JobWorker._make(values[at:then]),
        wp=detached(WaitingPrompt, WP_COLUMNS, values[then:]),
    )
