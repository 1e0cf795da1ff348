"""Kudos: the ledger every change goes through, upfront holds, and the formula in money.

The formula is upstream's, on spec/pricing.yaml's numbers, applied by
``runtime.contract.pricing`` (``job_quote``, ``job_reward``); this module turns its results
into cents. A model's size comes from the text model reference only. What a worker earns
is ``earned``: that reward under the rules no worker can farm (spec/pricing.yaml economy).
The requester is charged what the worker earns (nothing for a censored generation) plus the
horde tax once, when the request is queued.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Any, Protocol

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from generated.pricing import (
    CENSORED_UNTRUSTED_CAP,
    HORDE_TAX,
    SELF_SERVING_REWARD,
    SUSPICION_UNREASONABLY_FAST,
)
from runtime.contract import pricing
from runtime.contract.pricing import context_multiplier, model_billions, token_count
from runtime.native.accounts.keys import ANONYMOUS_USER_ID
from runtime.native.db.tables import KudosHold, KudosLedger, User
from runtime.native.requests.rows import SOURCE_CHARS
from runtime.observability.context import note_kudos

__all__ = ["context_multiplier", "model_billions", "token_count"]

CENT = Decimal("0.01")
HORDE_TAX_REASON = "horde_tax"
"""The ledger's reason for the horde tax a request pays when it is queued."""
GRANT_REASON = "grant"
"""Kudos the operator grants (``horde-chat users``): a user's ``kudos_details.admin``."""
USERS: Table = User.__table__  # type: ignore[assignment]
LEDGER: Table = KudosLedger.__table__  # type: ignore[assignment]
HOLDS: Table = KudosHold.__table__  # type: ignore[assignment]


class NonFiniteAmount(ValueError):
    """A kudos amount that is NaN or infinite: never stored."""


def money(value: float | Decimal) -> Decimal:
    """An amount in cents; a NaN or infinite amount is refused (NonFiniteAmount)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise NonFiniteAmount(f"{value} is not a finite amount")
    if isinstance(value, Decimal) and not value.is_finite():
        raise NonFiniteAmount(f"{value} is not a finite amount")
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def generation_kudos(
    tokens: int,
    model: str,
    context: int,
    trusted: bool,
    validated: bool = True,
    billions_cap: float | None = None,
) -> Decimal:
    """A worker's reward for one generation, in cents (``context``: what
    ``pricing.reward_context`` measured; ``billions_cap``: ``pricing.job_reward``'s)."""
    return money(
        pricing.job_reward(
            tokens, model, context, trusted=trusted, validated=validated,
            billions_cap=billions_cap,
        )
    )  # fmt: skip


class Priced(Protocol):
    """What of a request its reward depends on (a WaitingPrompt has it)."""

    @property
    def prompt(self) -> str: ...
    @property
    def max_length(self) -> int: ...
    @property
    def max_context_length(self) -> int: ...


def request_reward(
    wp: Priced, tokens: int, model: str, *, trusted: bool, bridge_agent: str
) -> Decimal:
    """A generation's reward from its request and its worker (the owner's trust, the bridge
    agent): what every payment (submit, streamed settlement) pays."""
    context = pricing.reward_context(wp.prompt, wp.max_length, wp.max_context_length)
    validated = pricing.is_validated_backend(bridge_agent)
    return generation_kudos(tokens, model, context, trusted, validated)


@dataclass(frozen=True)
class Serving:
    """Who served whom, and how fast: what the rules no worker can farm read
    (spec/pricing.yaml economy; docs/design.md, "Kudos a worker cannot farm")."""

    requester_id: int
    owner_id: int
    """The worker's owner."""
    trusted: bool
    """The owner's trust."""
    request_address: str
    """The request's source address (its row's ``ipaddr``)."""
    worker_address: str | None
    """Where the worker's result (or progress) arrived from; None: not known."""
    seconds: float
    """The job's time from pop to result."""
    censored: bool = False
    jobs: int = 1
    """The request's jobs: a censored reply's cap is the request's, shared among them."""


def self_serving(serving: Serving) -> bool:
    """The worker's own owner's request, or an anonymous one from the worker's address."""
    if serving.requester_id == serving.owner_id:
        return True
    return (
        serving.requester_id == ANONYMOUS_USER_ID
        and serving.worker_address is not None
        and serving.worker_address[:SOURCE_CHARS] == serving.request_address
    )


def earned(wp: Priced, tokens: int, model: str, *, bridge_agent: str, serving: Serving) -> Decimal:
    """What a worker is paid for one generation: upstream's reward (``request_reward``)
    under the rules no worker can farm. A self-serving job earns SELF_SERVING_REWARD; an
    untrusted worker is paid as a model no larger than its speed allows, and at most
    ``censored_cap`` for a censored reply."""
    if self_serving(serving):
        return money(SELF_SERVING_REWARD)
    context = pricing.reward_context(wp.prompt, wp.max_length, wp.max_context_length)
    validated = pricing.is_validated_backend(bridge_agent)
    cap = None if serving.trusted else pricing.speed_billions(tokens, serving.seconds)
    reward = generation_kudos(tokens, model, context, serving.trusted, validated, cap)
    if serving.censored and not serving.trusted:
        reward = min(reward, censored_cap(serving.jobs))
    return reward


def censored_cap(jobs: int) -> Decimal:
    """What one censored reply of an untrusted worker earns at most: CENSORED_UNTRUSTED_CAP
    is the request's (its tax, paid once), so each of its ``jobs`` earns that share of it,
    rounded down to the cent, and all of them together no more than the cap."""
    share = Decimal(str(CENSORED_UNTRUSTED_CAP)) / max(jobs, 1)
    return share.quantize(CENT, rounding=ROUND_DOWN)


def unreasonably_fast(tokens: int, model: str, serving: Serving) -> str | None:
    """Upstream's UNREASONABLY_FAST suspicion, judged by the claimed model's size: the
    reason when an untrusted worker's generation is faster than its (known) model allows
    (``pricing.speed_billions``), else None."""
    billions = pricing.model_billions(model)
    allowed = pricing.speed_billions(tokens, serving.seconds)
    if serving.trusted or billions is None or allowed is None or allowed >= billions:
        return None
    speed = "inf" if serving.seconds <= 0 else f"{tokens / serving.seconds:.1f}"
    return SUSPICION_UNREASONABLY_FAST.format(speed=speed, billions=f"{billions:g}")


def quote(
    max_length: int, max_context_length: int, n: int, models: list[str], tax: int = HORDE_TAX
) -> Decimal:
    """What a request would cost: each job at its full max_length, plus the horde tax."""
    per_job = money(pricing.job_quote(max_length, max_context_length, models))
    return money(per_job * n + money(tax))


def apply_kudos(
    session: Session,
    user_id: int,
    delta: float | Decimal,
    reason: str,
    *,
    wp_id: uuid.UUID | None = None,
    generation_id: uuid.UUID | None = None,
    worker_id: uuid.UUID | None = None,
) -> Decimal:
    """Change a balance and record the change in the ledger, in the caller's transaction.

    One statement (the balance's UPDATE in a CTE feeding the ledger's INSERT): a submit moves
    kudos twice while the requester's row is locked, so each move is one round trip. The
    user's row in the session, if loaded, gets the new balance (as an ORM update would)."""
    amount = money(delta)
    given = {
        "user_id": user_id, "delta": amount, "reason": reason, "wp_id": wp_id,
        "generation_id": generation_id, "worker_id": worker_id,
    }  # fmt: skip
    balance: Decimal = session.execute(APPLY_KUDOS, given).scalar_one()
    loaded = session.identity_map.get(identity_key(User, user_id))
    if loaded is not None:
        set_committed_value(loaded, "kudos", balance)
    note_kudos(session.info, reason, amount)  # /metrics counts it once the transaction commits
    return balance


def apply_kudos_statement(only_if: Any = None) -> Any:
    """``apply_kudos``' statement; ``only_if``: a condition without which it moves nothing
    (a CTE's rows to exist, say: ``requests.enqueue`` taxes a request only when it claimed
    its operation key)."""
    given = {
        name: bindparam(name, type_=LEDGER.c[name].type)
        for name in ("user_id", "delta", "reason", "wp_id", "generation_id", "worker_id")
    }
    conditions = [USERS.c.id == given["user_id"], *([only_if] if only_if is not None else [])]
    moved = (
        update(USERS).where(*conditions)
        .values(kudos=USERS.c.kudos + given["delta"]).returning(USERS.c.kudos).cte("moved")
    )  # fmt: skip
    row = select(*given.values(), moved.c.kudos)
    return (
        insert(LEDGER).from_select([*given, "balance_after"], row).returning(LEDGER.c.balance_after)
    )


APPLY_KUDOS = apply_kudos_statement()
"""``apply_kudos``' statement, built once (its values are parameters: ``user_id``,
``delta``, ``reason``, ``wp_id``, ``generation_id``, ``worker_id``; it returns the balance
after): a chat submit moved kudos with a statement built anew each time. A statement
that moves kudos among other writes takes it as a CTE (``requests.enqueue``)."""


def hold_upfront(session: Session, user_id: int, wp_id: uuid.UUID, amount: Decimal) -> bool:
    """Hold ``amount`` for a request once; a retry with the same business id holds nothing."""
    business_id = f"upfront:{wp_id}"
    created = session.execute(
        insert(KudosHold)
        .values(business_id=business_id, user_id=user_id, wp_id=wp_id, amount=amount)
        .on_conflict_do_nothing(index_elements=[KudosHold.business_id])
        .returning(KudosHold.business_id)
    ).first()
    if created is None:
        return False
    apply_kudos(session, user_id, -amount, "upfront_hold", wp_id=wp_id)
    return True


def release_holds(session: Session, wp_id: uuid.UUID) -> Decimal:
    """Give back every unreleased hold of a request that ended; returns the amount."""
    rows = session.execute(  # Core: no hold is loaded in a session to synchronize
        update(HOLDS)
        .where(HOLDS.c.wp_id == wp_id, HOLDS.c.released.is_(False))
        .values(released=True, released_at=func.now())
        .returning(HOLDS.c.user_id, HOLDS.c.amount)
    ).all()
    return credit_released_holds(session, wp_id, rows)


def credit_released_holds(
    session: Session, wp_id: uuid.UUID, released: Iterable[tuple[int, Decimal]]
) -> Decimal:
    """Credit each (user, amount) of a request's holds just released; returns the amount."""
    total = Decimal(0)
    for user_id, amount in released:
        apply_kudos(session, user_id, amount, "upfront_release", wp_id=wp_id)
        total += amount
    return total


def held_amount(session: Session, user_id: int) -> Decimal:
    total = session.execute(
        select(func.coalesce(func.sum(KudosHold.amount), 0)).where(
            KudosHold.user_id == user_id, KudosHold.released.is_(False)
        )
    ).scalar_one()
    return Decimal(total)
