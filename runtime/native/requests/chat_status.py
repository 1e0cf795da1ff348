"""A chat request's status: progress, structured generations and availability.

Availability is measured against the online pool now: ``eligible_threads`` (fail_fast reads
it), the pool gap (``missing_features`` / ``exceeded_limits``), ``is_possible``,
``queue_position`` (as upstream) and ``wait_time``: the work ahead this request's eligible
workers could take over their throughput, not its own generation (a request with nothing
ahead waits 0 s, however large its max_tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, String, and_, exists, false, func, literal, or_, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Session

from generated.chat.names import (
    REPLY_CONTENT,
    REPLY_FINISH_REASON,
    REPLY_REASONING_CONTENT,
    REPLY_TOOL_CALLS,
)
from generated.chat.tables_reply import CHARGE_BASIS
from generated.wire import DEFAULT_STATE, STATE_FAULTED
from generated.wire.native import ChatGeneration, ChatStatus, ExceededLimit, ReportedUsage
from runtime.contract.requirements import pool_gap
from runtime.native.db.tables import AnyWorker, Generation, WaitingPrompt
from runtime.native.queue.fit import (
    SHARED_RULES,
    TEXT_RULES,
    WORKER_LIST,
    Rule,
    chat_queue_filters,
    chat_shape,
    chat_values,
    chat_worker_fits,
    queue_filters,
    serving_declarations,
    term_values,
)
from runtime.native.queue.jobs import DIALECT, driver_cursor
from runtime.native.queue.policy import Policy
from runtime.native.requests.status import (
    POSITION_PARAMS,
    Jobs,
    position_of,
    position_query,
    position_values,
    request_jobs,
    status_counts,
)
from runtime.native.requests.text import online_workers


@dataclass(frozen=True)
class Availability:
    eligible: list[tuple[AnyWorker, bool]]
    missing_features: list[str]
    exceeded_limits: list[ExceededLimit]

    @property
    def threads(self) -> int:
        return sum(w.threads for w, _ in self.eligible)


def availability(
    session: Session, policy: Policy, wp: WaitingPrompt, now: datetime
) -> Availability:
    return pool_availability(online_workers(session, policy, now), wp)


def pool_availability(online: list[tuple[AnyWorker, bool]], wp: WaitingPrompt) -> Availability:
    """``availability`` against the ``online`` workers (``online_workers``' list)."""
    eligible = [(w, t) for w, t in online if chat_worker_fits(w, t, wp)]
    serving = serving_declarations(online, list(wp.models))
    gap = pool_gap(serving, list(wp.required_features), dict(wp.required_limits))
    missing: list[str] = []
    exceeded: list[ExceededLimit] = []
    if gap is not None and gap.kind == "features":
        missing = list(gap.missing)
    elif gap is not None:
        # a limits gap always names them (PoolGap types them optional for the features kind)
        exceeded = [{"limit": gap.limit, "value": gap.value, "maximum": gap.maximum}]  # type: ignore[typeddict-item]
    return Availability(eligible, missing, exceeded)


def takes_any(eligible: list[tuple[AnyWorker, bool]]) -> ColumnElement[bool]:
    """SQL: a queued request (text or chat) one of the ``eligible`` workers could take.

    Workers whose terms and declaration differ only by their id (a fleet of one setup) are
    one branch: the worker-list rule, the only one reading the id, is tried for each of
    their ids (``_any_id``) and every other rule once. Built per worker, a fleet of
    identical workers made the status read build many SQL expressions (docs/performance.md)."""
    return _takes(_setups(eligible))


def _setups(
    eligible: list[tuple[AnyWorker, bool]],
) -> dict[tuple[Any, ...], list[tuple[AnyWorker, bool]]]:
    """The ``eligible`` workers by setup (kind, terms and declaration): ``takes_any``'s
    branches."""
    groups: dict[tuple[Any, ...], list[tuple[AnyWorker, bool]]] = {}
    for worker, trusted in eligible:
        terms = term_values(worker, trusted)
        del terms["w_id"]
        same = tuple((k, _hashable(v)) for k, v in sorted(terms.items()))
        if worker.prompt_jobs:
            groups.setdefault(("text", same), []).append((worker, trusted))
        declaration = worker.chat_declaration or {}
        shape = chat_shape(declaration)
        values = tuple(
            (k, _hashable(v)) for k, v in sorted(chat_values(declaration, shape).items())
        )
        groups.setdefault(("chat", shape, values, same), []).append((worker, trusted))
    return groups


def _takes(groups: dict[tuple[Any, ...], list[tuple[AnyWorker, bool]]]) -> ColumnElement[bool]:
    return or_(false(), *(_branch(key, members) for key, members in groups.items()))


def position_sql(eligible: list[tuple[AnyWorker, bool]]) -> tuple[str, dict[str, Any]]:
    """``position_query`` over the work ``takes_any(eligible)`` selects, compiled: its SQL
    and its literal parameters (a request's own are ``position_values``). Compiled once per
    pool (its setups and ids) and kept: a status read neither builds the expression nor
    walks it for SQLAlchemy's cache key (docs/performance.md)."""
    groups = _setups(eligible)
    key = tuple((setup, tuple(str(w.id) for w, _ in members)) for setup, members in groups.items())
    found = _positions.get(key)
    if found is None:
        compiled = position_query(_takes(groups)).compile(dialect=DIALECT)
        literals = {k: v for k, v in compiled.params.items() if k not in POSITION_PARAMS}
        found = (compiled.string, literals)
        if len(_positions) >= BRANCHES_KEPT:
            _positions.clear()
        _positions[key] = found
    return found


_positions: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}


BRANCHES_KEPT = 512
"""Built branches kept (by setup and ids): a pool's setups change rarely, so a status read
reuses them instead of building its SQL expressions again (docs/performance.md)."""
_branches: dict[tuple[Any, ...], ColumnElement[bool]] = {}


def _branch(key: tuple[Any, ...], members: list[tuple[AnyWorker, bool]]) -> ColumnElement[bool]:
    """The SQL of one setup's branch (``key``: its kind, terms and declaration) for
    ``members``, built once per setup and ids."""
    ids = (key, tuple(str(w.id) for w, _ in members))
    found = _branches.get(ids)
    if found is not None:
        return found
    worker, trusted = members[0]
    if key[0] == "text":
        rules = queue_filters(worker, trusted)
        found = and_(WaitingPrompt.is_chat.is_(False), *_any_id(rules, TEXT_RULES, members))
    else:
        rules = chat_queue_filters(worker, trusted, worker.chat_declaration or {})
        found = and_(*_any_id(rules, SHARED_RULES, members))
    if len(_branches) >= BRANCHES_KEPT:
        _branches.clear()
    _branches[ids] = found
    return found


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _any_id(
    conditions: list[ColumnElement[bool]],
    rules: tuple[Rule, ...],
    members: list[tuple[AnyWorker, bool]],
) -> list[ColumnElement[bool]]:
    """``conditions`` (the last ``len(rules)`` of them those ``rules``' SQL) with the
    worker-list rule's replaced by the same rule for any of ``members``' ids: a request
    listing workers (or blocking them) is taken if one of them may take it."""
    if len(members) == 1:
        return conditions
    at = len(conditions) - len(rules) + rules.index(WORKER_LIST)
    ids = (
        func.unnest(literal([str(w.id) for w, _ in members], ARRAY(String)))
        .table_valued("w_id")
        .render_derived()
    )
    listed = exists(select(1).select_from(ids).where(WORKER_LIST.sql({"w_id": ids.c.w_id})))
    unlisted = WaitingPrompt.workers == sql_cast(
        literal("[]"), JSONB
    )  # the rule's cheap case first
    return [*conditions[:at], or_(unlisted, listed), *conditions[at + 1 :]]


def generation_json(gen: Generation, worker_name: str) -> ChatGeneration:
    reply = gen.reply or {}
    return {
        "id": str(gen.id),
        "worker_id": str(gen.worker_id),
        "worker_name": worker_name,
        "model": gen.model,
        # the stored state and basis are what the submit route validated against these enums
        "state": gen.state or DEFAULT_STATE,  # type: ignore[typeddict-item]
        "content": reply.get(REPLY_CONTENT),
        "reasoning_content": reply.get(REPLY_REASONING_CONTENT),
        "tool_calls": list(reply.get(REPLY_TOOL_CALLS) or []),
        "finish_reason": reply.get(REPLY_FINISH_REASON),  # type: ignore[typeddict-item]
        "usage": cast(ReportedUsage, gen.reported_usage or {}),
        "kudos": float(gen.charge),
        "charge_basis": gen.charge_basis or CHARGE_BASIS,  # type: ignore[typeddict-item]
        "seed": gen.seed,
        "gen_metadata": gen.gen_metadata or [],
    }


FAULT_REASONS_SHOWN = 3
"""How many of a request's latest fault reasons its status names."""
NOT_SUBMITTED = "the worker did not submit in time"
NO_REASON = "the worker gave no reason"


def fault_reasons(jobs: Jobs) -> list[str]:
    """Why the request's jobs were faulted or aborted, newest first: each worker's reason
    (the ``ref`` of its faulted gen_metadata entry), or that it gave none, or did not submit
    in time (aborted by the sweep)."""
    reasons: list[str] = []
    for gen, _ in reversed(jobs.rows):
        if not (gen.faulted or gen.aborted):
            continue
        given = [
            str(entry["ref"])
            for entry in gen.gen_metadata or []
            if isinstance(entry, dict) and entry.get("value") == STATE_FAULTED and entry.get("ref")
        ]
        reasons.append(given[0] if given else NO_REASON if gen.faulted else NOT_SUBMITTED)
        if len(reasons) == FAULT_REASONS_SHOWN:
            break
    return reasons


def chat_status(
    session: Session, policy: Policy, wp: WaitingPrompt, now: datetime, jobs: Jobs | None = None
) -> ChatStatus:
    """``wp``'s status (``jobs``: its jobs when the caller holds them all, else read)."""
    jobs = request_jobs(session, wp) if jobs is None else jobs
    pool = availability(session, policy, wp, now)
    with driver_cursor(session) as cursor:
        position = _position(cursor, policy, wp, pool)
    return _status(policy, wp, jobs, pool, position)


def held_status(policy: Policy, held: EndedStatus) -> ChatStatus | None:
    """The final status from what the submit holds alone (``held``), or None when it needs
    the database: its queue position, counted while it has jobs left to hand out (a
    request that ended faulted or cancelled)."""
    if held.wp.n > 0:
        return None
    return _status(policy, held.wp, held.jobs, pool_availability(held.online, held.wp), (0, 0))


def _status(
    policy: Policy, wp: WaitingPrompt, jobs: Jobs, pool: Availability, position: tuple[int, int]
) -> ChatStatus:
    restarted = sum(1 for g, _ in jobs.rows if g.aborted or g.faulted)
    # end_user is left out: the view adds it to the owner's read (mypy wants every key here)
    return {
        **status_counts(  # type: ignore[typeddict-item]
            policy, wp, jobs, restarted, position, is_possible=wp.n == 0 or pool.threads > 0
        ),
        "generations": [generation_json(g, name) for g, name in jobs.landed],
        "eligible_threads": pool.threads,
        "charge_basis": CHARGE_BASIS,  # type: ignore[typeddict-item]
        "missing_features": pool.missing_features,
        "exceeded_limits": pool.exceeded_limits,
        "max_tokens_lowered_to": wp.max_tokens_lowered_to,
        "fault_reasons": fault_reasons(jobs),
    }


@dataclass(frozen=True)
class FirstStatus:
    """A new request's status as of the commit that queued it, from what its submit had in
    hand (the row it added, which no job has yet; the online workers it admitted it
    against): no reload of either. Only the queue position needs the database: its one
    statement runs after the commit, in ``read``."""

    policy: Policy
    wp: WaitingPrompt
    pool: Availability

    def read(self, cursor: Any) -> ChatStatus:
        """The status, its queue position counted now (``cursor``: the driver's, in
        autocommit or a transaction)."""
        return _status(
            self.policy,
            self.wp,
            Jobs([]),
            self.pool,
            _position(cursor, self.policy, self.wp, self.pool),
        )


@dataclass(frozen=True)
class EndedStatus:
    """What of an ended request's final status the submit that ended it holds: its row as
    the payment left it (n, active, faulted, cancelled from the row it locked until its
    commit; the rest written when it was queued), its jobs, when the one it landed is the
    only one (with its worker's name and the values the claim wrote), and the online pool,
    read with the job (``queue.chat_find``). Only a queue position (while jobs are left to
    hand out) is read, after the commit (``signals.final_status``): no reload of the row or
    its jobs, and no read of the pool: fewer round trips on the way to the client."""

    wp: WaitingPrompt
    jobs: Jobs
    online: list[tuple[AnyWorker, bool]]


def first_status(
    policy: Policy, wp: WaitingPrompt, online: list[tuple[AnyWorker, bool]]
) -> FirstStatus:
    """``FirstStatus`` of ``wp``, just added (flushed) in the caller's transaction, whose
    admission read ``online`` (``online_workers``)."""
    return FirstStatus(policy, wp, pool_availability(online, wp))


def _position(
    cursor: Any, policy: Policy, wp: WaitingPrompt, pool: Availability
) -> tuple[int, int]:
    """``queue_position`` over the work ``pool``'s eligible workers could take, its SQL
    compiled once per pool (``position_sql``), run on the driver's ``cursor``."""
    if wp.n <= 0:
        return 0, 0
    sql, literals = position_sql(pool.eligible)
    cursor.execute(sql, {**literals, **position_values(wp)})
    count, tokens = cursor.fetchone()
    return position_of(policy, [w for w, _ in pool.eligible], count, tokens)
