"""The native API's tables (SQLAlchemy 2 declarative models; Alembic migrations in
``migrations/versions``, each saying what it added, checked equal to these by a test).

Money is ``Numeric(16, 2)`` so a balance equals the sum of its ledger rows exactly.
``waiting_prompts`` is upstream's TextWaitingPrompt: text and chat requests share it, told
apart by ``is_chat``; a chat row holds its validated request and messages (deferred: the
queue never loads them) and the requirements computed once at creation.
``operation_keys`` makes a chat submit idempotent per user.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple, TypeAlias

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from runtime.observability.context import MAX_REQUEST_ID

Money = Numeric(16, 2)


def _now() -> Any:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


def _false() -> Any:
    return mapped_column(Boolean, server_default=text("false"), nullable=False, default=False)


OWNS_OBJECTS = "object_keys <> '[]'::jsonb"
"""A request still owns stored objects (the sweep releases ended ones)."""
UNFINISHED = "generation IS NULL AND faulted IS false AND cancelled IS false"
"""A job still running, spelled as ``requests.rows.unfinished`` renders it, so a count of a
user's running jobs (every submit's ``queued_jobs``) is planned on the few running ones'
index, not on a scan of every job kept until its request expires."""


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(100), nullable=False)
    kudos: Mapped[Decimal] = mapped_column(Money, server_default=text("0"), nullable=False)
    concurrency: Mapped[int] = mapped_column(Integer, server_default=text("30"), nullable=False)
    trusted: Mapped[bool] = _false()
    created: Mapped[datetime] = _now()
    suspicion: Mapped[int] = mapped_column(Integer, server_default=text("0"), nullable=False)
    """Suspicions its workers earned (``accounts.suspicion``): the owner flagged."""


class SharedKey(Base):
    """A user's shared key (upstream's user_sharedkeys): its id is the key a requester sends
    as apikey, spending the owner's kudos within the key's own limits (-1: none)."""

    __tablename__ = "shared_keys"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str | None] = mapped_column(String(255))
    kudos: Mapped[Decimal] = mapped_column(Money, nullable=False)
    """What the key may still spend; -1 unlimited."""
    utilized: Mapped[Decimal] = mapped_column(Money, server_default=text("0"), nullable=False)
    expiry: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    max_image_pixels: Mapped[int] = mapped_column(Integer, nullable=False)
    max_image_steps: Mapped[int] = mapped_column(Integer, nullable=False)
    max_text_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    created: Mapped[datetime] = _now()


class KudosTransfer(Base):
    """A kudos transfer (upstream's KudosTransferLog), with the sender's Idempotency-Key."""

    __tablename__ = "kudos_transfers"
    __table_args__ = (
        UniqueConstraint("source_id", "idempotency_key", name="uq_kudos_transfers_source_key"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    dest_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    sharedkey_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    """The shared key the transfer was sent to, if it named one (its limit grew by it)."""
    amount: Mapped[Decimal] = mapped_column(Money, nullable=False)
    idempotency_key: Mapped[str | None] = mapped_column(String(128))
    created: Mapped[datetime] = _now()


class ApiKey(Base):
    """API keys, stored as SHA-256 digests only."""

    __tablename__ = "api_keys"

    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created: Mapped[datetime] = _now()


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(100), unique=True, nullable=False)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    models: Mapped[list[str]] = mapped_column(JSONB, nullable=False, default=list)
    max_length: Mapped[int] = mapped_column(Integer, nullable=False)
    max_context_length: Mapped[int] = mapped_column(Integer, nullable=False)
    threads: Mapped[int] = mapped_column(Integer, server_default=text("1"), nullable=False)
    nsfw: Mapped[bool] = _false()
    bridge_agent: Mapped[str] = mapped_column(String(255), nullable=False, default="")
    maintenance: Mapped[bool] = _false()
    maintenance_reason: Mapped[str | None] = mapped_column(Text)
    kudos: Mapped[Decimal] = mapped_column(Money, server_default=text("0"), nullable=False)
    fulfilments: Mapped[int] = mapped_column(Integer, server_default=text("0"), nullable=False)
    contributions: Mapped[int] = mapped_column(BigInteger, server_default=text("0"), nullable=False)
    aborted_jobs: Mapped[int] = mapped_column(Integer, server_default=text("0"), nullable=False)
    chat_declaration: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """The parsed chat declaration of the last pop; None when it did not send chat_jobs."""
    prompt_jobs: Mapped[bool] = mapped_column(Boolean, server_default=text("true"), default=True)
    speed: Mapped[float | None] = mapped_column(Float)
    """Tokens per second: the average of the newest speed samples; None before the first."""
    extra_slow_worker: Mapped[bool] = _false()
    """Declared on pop: serves only requests that accept extra slow workers."""
    last_check_in: Mapped[datetime] = _now()
    created: Mapped[datetime] = _now()
    uptime: Mapped[float] = mapped_column(Float, server_default=text("0"), nullable=False)
    """Seconds online: each pop adds the time since the last one when the worker was online
    then and is not in maintenance (``queue.jobs.checked_in``, upstream's check_in)."""
    suspicion: Mapped[int] = mapped_column(Integer, server_default=text("0"), nullable=False)
    """Its suspicions (``accounts.suspicion``); at the threshold, maintenance."""


class WorkerRow(NamedTuple):
    """A worker's columns read without the ORM (``requests.text.online_workers``: a status
    read or a chat submit's final status loaded every online worker as an entity, costly
    in CPU: docs/performance.md): ``Worker``'s columns, in its table's order, under the
    same names and types, which is all the fit rules and the pool's readers read of a
    worker (``AnyWorker``). tests/unit/test_worker_row.py holds it to the table."""

    id: uuid.UUID
    name: str
    user_id: int
    models: list[str]
    max_length: int
    max_context_length: int
    threads: int
    nsfw: bool
    bridge_agent: str
    maintenance: bool
    maintenance_reason: str | None
    kudos: Decimal
    fulfilments: int
    contributions: int
    aborted_jobs: int
    chat_declaration: dict[str, Any] | None
    prompt_jobs: bool
    speed: float | None
    extra_slow_worker: bool
    last_check_in: datetime
    created: datetime
    uptime: float
    suspicion: int


AnyWorker: TypeAlias = Worker | WorkerRow
"""A worker as the fit rules and the pool read it: an entity, or an online pool's row."""


class WaitingPrompt(Base):
    """A text or chat request (upstream TextWaitingPrompt); ``n``: jobs not yet handed out."""

    __tablename__ = "waiting_prompts"
    __table_args__ = (
        Index(
            "ix_waiting_prompts_queue",
            text("extra_priority DESC"),
            "created",
            postgresql_where=text("active AND n > 0"),
        ),
        Index("ix_waiting_prompts_user_active", "user_id", "active"),
        Index(
            "ix_waiting_prompts_objects",
            "id",
            postgresql_where=text(f"NOT active AND {OWNS_OBJECTS}"),
        ),
        Index(
            "ix_waiting_prompts_sharedkey",
            "sharedkey_id",
            postgresql_where=text("sharedkey_id IS NOT NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    is_chat: Mapped[bool] = _false()
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    prompt: Mapped[str] = mapped_column(Text, nullable=False)
    params: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    n: Mapped[int] = mapped_column(Integer, nullable=False)
    jobs: Mapped[int] = mapped_column(Integer, nullable=False)
    max_length: Mapped[int] = mapped_column(Integer, nullable=False)
    max_context_length: Mapped[int] = mapped_column(Integer, nullable=False)
    models: Mapped[list[str]] = mapped_column(JSONB, nullable=False, default=list)
    workers: Mapped[list[str]] = mapped_column(JSONB, nullable=False, default=list)
    worker_blacklist: Mapped[bool] = _false()
    trusted_workers: Mapped[bool] = _false()
    slow_workers: Mapped[bool] = mapped_column(Boolean, server_default=text("true"), default=True)
    extra_slow_workers: Mapped[bool] = _false()
    nsfw: Mapped[bool] = _false()
    softprompt: Mapped[str | None] = mapped_column(String(255))
    client_agent: Mapped[str] = mapped_column(String(255), nullable=False, default="")
    ipaddr: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    extra_priority: Mapped[Decimal] = mapped_column(Money, nullable=False, default=0)
    kudos_estimate: Mapped[Decimal] = mapped_column(Money, nullable=False, default=0)
    active: Mapped[bool] = mapped_column(Boolean, server_default=text("true"), default=True)
    faulted: Mapped[bool] = _false()
    cancelled: Mapped[bool] = _false()
    created: Mapped[datetime] = _now()
    expiry: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    # Chat requests (is_chat): the validated request without its messages, the kept messages,
    # the full flattened submission, and the requirements computed once at creation.
    chat_request: Mapped[dict[str, Any] | None] = mapped_column(JSONB, deferred=True)
    messages: Mapped[list[Any] | None] = mapped_column(JSONB, deferred=True)
    submitted_prompt: Mapped[str | None] = mapped_column(Text, deferred=True)
    required_features: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'"), default=list
    )
    required_limits: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb"), default=dict
    )
    conformance: Mapped[str | None] = mapped_column(String(20))
    max_tokens_lowered_to: Mapped[int | None] = mapped_column(Integer)
    # Object storage (migration 0003): the offloaded messages' key, and every object the
    # request owns (images, offloaded messages), deleted when it ends.
    messages_object: Mapped[str | None] = mapped_column(String(200))
    object_keys: Mapped[list[str]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb"), default=list
    )
    webhook: Mapped[str | None] = mapped_column(String(1024))
    """Each landed generation is POSTed here (migration 0004)."""
    origin_id: Mapped[str | None] = mapped_column(String(MAX_REQUEST_ID))
    """The request id of the call that submitted it (the front's own id through the front);
    handed to its workers in the pop payload (migration 0005)."""
    sharedkey_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("shared_keys.id", ondelete="SET NULL")
    )
    """The shared key it was sent with: its charges spend the key's limit too (migration
    0008). A deleted key leaves its requests running, charged to the owner alone."""


class Generation(Base):
    """One job handed to a worker (upstream ProcessingGeneration)."""

    __tablename__ = "processing_gens"
    __table_args__ = (
        Index("ix_processing_gens_worker_aborted", "worker_id", "aborted_at"),
        Index(
            "ix_processing_gens_unfinished",
            "wp_id",
            postgresql_where=text(UNFINISHED),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    wp_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("waiting_prompts.id", ondelete="CASCADE"), index=True
    )
    worker_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("workers.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(255), nullable=False, default="")
    start_time: Mapped[datetime] = _now()
    ttl: Mapped[int] = mapped_column(Integer, nullable=False)
    generation: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str | None] = mapped_column(String(20))
    seed: Mapped[int | None] = mapped_column(BigInteger)
    gen_metadata: Mapped[list[Any]] = mapped_column(JSONB, nullable=False, default=list)
    reward: Mapped[Decimal] = mapped_column(Money, server_default=text("0"), nullable=False)
    charge: Mapped[Decimal] = mapped_column(Money, server_default=text("0"), nullable=False)
    faulted: Mapped[bool] = _false()
    aborted: Mapped[bool] = _false()
    cancelled: Mapped[bool] = _false()
    censored: Mapped[bool] = _false()
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    aborted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """When the job ended by its worker's fault (ran out of time, or faulted by the worker):
    these count toward the worker's abort limit. ``aborted`` alone means it ran out of time."""
    reply: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """A chat generation's verified structured reply (content, reasoning, tool calls, finish)."""
    reported_usage: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """Token counts the worker reported: stored and shown, never charged."""
    charge_basis: Mapped[str | None] = mapped_column(String(40))


class WorkerPerformance(Base):
    """One speed sample: a generation's output estimate over its time, pop to submit
    (upstream's worker_performances); the newest ``Policy.speed_samples`` make the speed."""

    __tablename__ = "worker_performances"
    __table_args__ = (Index("ix_worker_performances_worker_id", "worker_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    worker_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("workers.id", ondelete="CASCADE"), nullable=False
    )
    performance: Mapped[float] = mapped_column(Float, nullable=False)
    created: Mapped[datetime] = _now()


class TextGenStat(Base):
    """One text job that ended (upstream's text_gen_stats): delivered, or faulted, timed out
    or cancelled. Written by the trigger of migration 0009, never by the code; it outlives
    the request."""

    __tablename__ = "text_gen_stats"
    __table_args__ = (Index("ix_text_gen_stats_finished", "finished"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    finished: Mapped[datetime] = _now()
    model: Mapped[str] = mapped_column(String(255), nullable=False)
    max_length: Mapped[int] = mapped_column(Integer, nullable=False)
    """The request's max_length: the tokens upstream's statistics count."""
    delivered: Mapped[bool] = mapped_column(Boolean, nullable=False)


class TextGenStatArchive(Base):
    """Per model, the ``text_gen_stats`` rows older than every period but the total, folded
    by the sweep (``stats.text_stats.fold_old_stats``) so that table keeps only a month."""

    __tablename__ = "text_gen_stats_archive"

    model: Mapped[str] = mapped_column(String(255), primary_key=True)
    requests: Mapped[int] = mapped_column(BigInteger, nullable=False)
    tokens: Mapped[int] = mapped_column(BigInteger, nullable=False)


class KudosLedger(Base):
    """Every kudos change; a user's balance is the sum of their rows."""

    __tablename__ = "kudos_ledger"
    __table_args__ = (
        Index(
            "ix_kudos_ledger_anonymous_charges",
            "created",
            postgresql_where=text("user_id = 0 AND reason = 'charge'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    delta: Mapped[Decimal] = mapped_column(Money, nullable=False)
    balance_after: Mapped[Decimal] = mapped_column(Money, nullable=False)
    reason: Mapped[str] = mapped_column(String(40), nullable=False)
    wp_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), index=True)
    generation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    worker_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created: Mapped[datetime] = _now()


class KudosHold(Base):
    """Upfront kudos held for a large request, keyed by a unique business id."""

    __tablename__ = "kudos_holds"

    business_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    wp_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), index=True)
    amount: Mapped[Decimal] = mapped_column(Money, nullable=False)
    released: Mapped[bool] = _false()
    created: Mapped[datetime] = _now()
    released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class OperationKey(Base):
    """A chat submit's operation key, scoped to its user: one request per (user, key)."""

    __tablename__ = "operation_keys"
    __table_args__ = (UniqueConstraint("user_id", "key", name="uq_operation_keys_user_key"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128), nullable=False)
    fingerprint: Mapped[str] = mapped_column(String(128), nullable=False)
    wp_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("waiting_prompts.id", ondelete="CASCADE"), index=True
    )
    """NULL: the key was retired by a cancel that found no request under it."""
    kudos: Mapped[Decimal] = mapped_column(Money, nullable=False)
    created: Mapped[datetime] = _now()
