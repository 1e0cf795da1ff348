"""Upstream's text statistics (/stats/text/totals and /stats/text/models) and ours
(/stats/text/history, the past hour minute by minute) from ``text_gen_stats``: jobs that
ended and their tokens (their requests' max_length).

Upstream compiles snapshot tables; here the sweep folds rows older than ``ARCHIVE_AFTER``
into ``text_gen_stats_archive`` (``fold_old_stats``), so a read is one statement over about
a month of rows plus the archive, kept for ``Policy.public_stats_seconds``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Connection, delete, extract, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from generated.wire.native import StatsTxtTotals, TxtMinuteStat, TxtModelStats
from runtime.native.db.tables import TextGenStat, TextGenStatArchive

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
MONTH = timedelta(days=30)
PERIODS: dict[str, timedelta | None] = {
    "minute": MINUTE,
    "hour": HOUR,
    "day": timedelta(days=1),
    "month": MONTH,
    "total": None,
}
"""Each period of the totals and how far back it reaches (None: ever)."""
MODEL_PERIODS = ("day", "month", "total")
"""The periods of the per-model counts (upstream's)."""
ARCHIVE_AFTER = MONTH + timedelta(days=1)
"""A row this old counts only toward the totals: the sweep folds it into the archive."""
HISTORY_MINUTES = 60
"""The points of the history: the minutes of the totals' hour."""


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
_MINUTES_AGO = func.least(
    HISTORY_MINUTES - 1,
    func.greatest(0, func.ceil(extract("epoch", func.now() - TextGenStat.finished) / 60) - 1),
)
"""A row's minute, counted back from now: 0 for an age up to 60 s (the totals' minute),
59 for one up to an hour (the totals' hour); a row stamped after the read's now is in 0."""
_HISTORY = (
    select(_MINUTES_AGO, func.count(), func.coalesce(func.sum(TextGenStat.max_length), 0))
    .where(_within(HOUR))
    .group_by(_MINUTES_AGO)
)
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


def text_history(db: Connection) -> list[TxtMinuteStat]:
    """The past hour's requests and tokens per minute, oldest first, each minute ending
    ``until``; the last is ``text_totals``'s minute and together they are its hour."""
    now: datetime = db.execute(select(func.now())).scalar_one()
    counted = {int(ago): (int(n), int(tokens)) for ago, n, tokens in db.execute(_HISTORY).all()}
    points = []
    for ago in reversed(range(HISTORY_MINUTES)):
        requests, tokens = counted.get(ago, (0, 0))
        until = (now - ago * MINUTE).astimezone(UTC).isoformat(timespec="seconds")
        points.append(
            TxtMinuteStat(until=until.replace("+00:00", "Z"), requests=requests, tokens=tokens)
        )
    return points


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
