"""Which workers may serve which requests: the one filter the queue, status and pop share.

``queue_filters`` is the SQL form used under the row lock at pop; ``worker_fits`` the
Python form used for ``is_possible`` and ``skip_reason``. Both encode upstream's rules:
lengths fit the worker, models overlap (an empty list takes any), worker lists (allow or
block), trusted workers, NSFW.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, cast, false, literal, or_, true
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import Text

from runtime.native.db.tables import WaitingPrompt, Worker

SKIP_REASONS = ("max_context_length", "max_length", "models", "worker_id", "untrusted", "nsfw")
"""Upstream's ``skipped`` keys on a pop that found nothing."""


def skip_reason(worker: Worker, trusted: bool, wp: WaitingPrompt) -> str | None:
    """Why ``worker`` cannot take ``wp`` (upstream's skipped key), or None if it can."""
    if wp.max_context_length > worker.max_context_length:
        return "max_context_length"
    if wp.max_length > worker.max_length:
        return "max_length"
    if wp.models and not set(wp.models) & set(worker.models):
        return "models"
    if wp.workers:
        listed = str(worker.id) in wp.workers
        if listed == wp.worker_blacklist:
            return "worker_id"
    if wp.trusted_workers and not trusted:
        return "untrusted"
    if wp.nsfw and not worker.nsfw:
        return "nsfw"
    return None


def worker_fits(worker: Worker, trusted: bool, wp: WaitingPrompt) -> bool:
    return skip_reason(worker, trusted, wp) is None


def queue_filters(worker: Worker, trusted: bool) -> list[ColumnElement[bool]]:
    """SQL conditions on waiting_prompts for ``worker``, in SKIP_REASONS order."""
    wid = str(worker.id)
    models = cast(literal(list(worker.models), ARRAY(Text)), ARRAY(Text))
    empty: Any = cast(literal("[]"), JSONB)
    return [
        WaitingPrompt.max_context_length <= worker.max_context_length,
        WaitingPrompt.max_length <= worker.max_length,
        or_(WaitingPrompt.models == empty, WaitingPrompt.models.has_any(models)),
        or_(
            WaitingPrompt.workers == empty,
            and_(WaitingPrompt.worker_blacklist.is_(False), WaitingPrompt.workers.has_key(wid)),
            and_(WaitingPrompt.worker_blacklist.is_(True), ~WaitingPrompt.workers.has_key(wid)),
        ),
        or_(WaitingPrompt.trusted_workers.is_(False), true() if trusted else false()),
        or_(WaitingPrompt.nsfw.is_(False), true() if worker.nsfw else false()),
    ]


def pick_model(worker: Worker, wp: WaitingPrompt) -> str:
    """The first of the worker's models the request accepts (any, if it names none)."""
    for model in worker.models:
        if not wp.models or model in wp.models:
            return model
    return worker.models[0] if worker.models else ""
