"""Upstream's text statistics (/stats/text/totals and /stats/text/models) from
``text_gen_stats``: jobs that ended and their tokens, per minute, hour, day, month and ever.

Upstream compiles snapshot tables; here the sweep folds rows older than ``ARCHIVE_AFTER``
into ``text_gen_stats_archive`` (``fold_old_stats``), so a read is one statement over about
a month of rows plus the archive, kept for ``Policy.public_stats_seconds``
(bench/public_stats.py prints the cost).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Connection, delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from generated.wire.native import StatsTxtTotals, TxtModelStats
from runtime.native.db.tables import TextGenStat, TextGenStatArchive

MINUTE = timedelta(minutes=1)
MONTH = timedelta(days=30)
PERIODS: dict[str, timedelta | None] = {
    "minute": MINUTE,
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "month": MONTH,
    "total": None,
}
"""Each period of the totals and how far back it reaches (None: ever)."""
MODEL_PERIODS = ("day", "month", "total")
"""The periods of the per-model counts (upstream's)."""
ARCHIVE_AFTER = MONTH + timedelta(days=1)
"""A row this old counts only toward the totals: the sweep folds it into the archive."""


def _within(reach: timedelta) -> ColumnElement[bool]:
    return TextGenStat.finished >= func.now() - reach


def _count(period: str) -> ColumnElement[int]:
    reach = PERIODS[period]
    count: ColumnElement[int] = func.count()
    return count if reach is None else count.filter(_within(reach))


def _tokens(period: str) -> ColumnElement[int]:
    reach = PERIODS[period]
    tokens: ColumnElement[int] = func.sum(TextGenStat.max_length)
    return func.coalesce(tokens if reach is None else tokens.filter(_within(reach)), 0)


_TOTALS = select(*[part for p in PERIODS for part in (_count(p), _tokens(p))]).select_from(
    TextGenStat
)
_ARCHIVED = select(
    func.coalesce(func.sum(TextGenStatArchive.requests), 0),
    func.coalesce(func.sum(TextGenStatArchive.tokens), 0),
)
_PER_MODEL = select(TextGenStat.model, *[_count(p) for p in MODEL_PERIODS]).group_by(
    TextGenStat.model
)
_ARCHIVED_PER_MODEL = select(TextGenStatArchive.model, TextGenStatArchive.requests)
_PAST_MINUTE_DELIVERED = select(func.coalesce(func.sum(TextGenStat.max_length), 0)).where(
    TextGenStat.delivered.is_(True), _within(MINUTE)
)


def text_totals(db: Connection) -> StatsTxtTotals:
    """Requests and tokens per period (the archive's in the total)."""
    row = db.execute(_TOTALS).one()
    archived = db.execute(_ARCHIVED).one()
    out: dict[str, Any] = {
        period: {"requests": int(row[2 * i]), "tokens": int(row[2 * i + 1])}
        for i, period in enumerate(PERIODS)
    }
    out["total"]["requests"] += int(archived[0])
    out["total"]["tokens"] += int(archived[1])
    totals: StatsTxtTotals = cast(StatsTxtTotals, out)
    return totals


def text_models(db: Connection) -> TxtModelStats:
    """Requests per model, per period (a model with none in a period shows 0 there)."""
    counts: dict[str, dict[str, int]] = {period: {} for period in MODEL_PERIODS}
    for model, requests in db.execute(_ARCHIVED_PER_MODEL).all():
        for period in MODEL_PERIODS:
            counts[period][model] = int(requests) if period == "total" else 0
    for model, *per_period in db.execute(_PER_MODEL).all():
        for period, count in zip(MODEL_PERIODS, per_period, strict=True):
            counts[period][model] = counts[period].get(model, 0) + int(count)
    ordered = {period: dict(sorted(by_model.items())) for period, by_model in counts.items()}
    return TxtModelStats(day=ordered["day"], month=ordered["month"], total=ordered["total"])


def past_minute_tokens(db: Connection) -> int:
    """Tokens (max_length) of the jobs delivered in the past minute."""
    return int(db.execute(_PAST_MINUTE_DELIVERED).scalar_one())


def fold_old_stats(session: Session, now: datetime) -> None:
    """Move the rows older than ``ARCHIVE_AFTER`` into the archive, added to their model's
    counts, in one statement (a row is deleted once, so two sweeps never count it twice)."""
    moved = (
        delete(TextGenStat)
        .where(TextGenStat.finished < now - ARCHIVE_AFTER)
        .returning(TextGenStat.model, TextGenStat.max_length)
        .cte("moved")
    )
    folded = insert(TextGenStatArchive).from_select(
        ["model", "requests", "tokens"],
        select(moved.c.model, func.count(), func.sum(moved.c.max_length)).group_by(moved.c.model),
    )
    session.execute(
        folded.on_conflict_do_update(
            index_elements=[TextGenStatArchive.model],
            set_={
                "requests": TextGenStatArchive.requests + folded.excluded.requests,
                "tokens": TextGenStatArchive.tokens + folded.excluded.tokens,
            },
        )
    )
