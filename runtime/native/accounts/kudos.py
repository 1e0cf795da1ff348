"""Kudos: upstream's text formula, the ledger every change goes through, upfront holds.

Formula (upstream ``TextProcessingGeneration``): tokens are ``ceil(len(text) / 4)``, at
least 20 and at most the requested max_length; the context multiplier is
``2.5 ** log2(max_context_length / 1024)`` clamped to 0.1..30; the reward is
``tokens * params_in_billions / 100 * context_multiplier``. A model whose size we cannot
read from its name counts as 2.7B when its worker's owner is trusted, and earns the bare
context multiplier otherwise, as upstream treats unknown models. The requester is charged
what the worker earns (nothing for a censored generation) plus the horde tax once, when
the request is queued.
"""

from __future__ import annotations

import math
import re
import uuid
from decimal import ROUND_HALF_UP, Decimal

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from runtime.native.db.tables import KudosHold, KudosLedger, User

CENT = Decimal("0.01")
UNKNOWN_MODEL_BILLIONS = 2.7
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")


def money(value: float | Decimal) -> Decimal:
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def token_count(generation: str, max_length: int) -> int:
    """Upstream's quick count: a token per 4 characters, floor 20, capped at max_length."""
    return min(max(20, math.ceil(len(generation) / 4)), max_length)


def context_multiplier(max_context_length: int) -> float:
    value = math.pow(2.5, math.log2(max(max_context_length, 1) / 1024))
    return min(30.0, max(0.1, value))


def model_billions(model: str) -> float | None:
    """Parameter count in billions read from a model name (``llama-3-8B`` -> 8.0)."""
    sizes = [float(m) for m in _SIZE.findall(model)]
    return max(sizes) if sizes else None


def generation_kudos(tokens: int, model: str, max_context_length: int, trusted: bool) -> Decimal:
    multiplier = context_multiplier(max_context_length)
    billions = model_billions(model)
    if billions is None:
        if not trusted:
            return money(multiplier)
        billions = UNKNOWN_MODEL_BILLIONS
    return money(tokens * billions / 100 * multiplier)


def quote(max_length: int, max_context_length: int, n: int, models: list[str], tax: int) -> Decimal:
    """What a request would cost at its full max_length on its largest named model."""
    sizes = [b for m in models if (b := model_billions(m)) is not None]
    model = f"{max(sizes)}B" if sizes else ""
    per_job = generation_kudos(max_length, model, max_context_length, trusted=True)
    return money(per_job * n + tax)


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
    """Change a balance and record the change in the ledger, in the caller's transaction."""
    amount = money(delta)
    balance = session.execute(
        update(User).where(User.id == user_id).values(kudos=User.kudos + amount)
        .returning(User.kudos)
    ).scalar_one()  # fmt: skip
    session.add(
        KudosLedger(
            user_id=user_id,
            delta=amount,
            balance_after=balance,
            reason=reason,
            wp_id=wp_id,
            generation_id=generation_id,
            worker_id=worker_id,
        )
    )
    return balance


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
    rows = session.execute(
        update(KudosHold)
        .where(KudosHold.wp_id == wp_id, KudosHold.released.is_(False))
        .values(released=True, released_at=func.now())
        .returning(KudosHold.user_id, KudosHold.amount)
    ).all()
    total = Decimal(0)
    for user_id, amount in rows:
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
