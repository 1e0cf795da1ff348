"""Which workers may serve which chat requests: the SQL form used at pop, the Python form
used at submission and in the status.

A chat request's requirements were computed once at creation and stored on its row
(``required_features``, ``required_limits``); eligibility compares a worker's parsed chat
declaration with them and never loads the messages. A worker serves a chat request when it
declared chat_jobs, its model_id is one of the request's models, it declares every required
feature (and guarantee, under strict), no stored limit is above its declared bound, it can
receive the request's images (an image transport, or messages_url for an offloaded request),
and upstream's worker list, trusted and NSFW rules let it. Images need the vision feature,
which ``required_features`` stores; whether a request has images is the stored max_images
measure, so the messages stay unread here too.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Numeric, cast, literal, or_, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Text

from generated.chat import declaration_covers
from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_JOBS,
    DECL_CHAT_LIMITS,
    DECL_IMAGE_TRANSPORTS,
    DECL_MODEL_ID,
    LIMIT_MAX_IMAGES,
)
from generated.storage import TRANSPORT_BASE64, TRANSPORT_MESSAGES_URL, TRANSPORT_URL
from runtime.native.queue.fit import SKIP_REASONS, queue_filters
from runtime.native.db.tables import WaitingPrompt, Worker

UPSTREAM_RULES = ("worker_id", "untrusted", "nsfw")
"""The upstream filters (of ``fit.SKIP_REASONS``) that apply to chat requests too; the
length and model filters are replaced by the declaration's limits and model_id."""


def serves_chat(worker: Worker) -> bool:
    decl = worker.chat_declaration
    return bool(decl and decl.get(DECL_CHAT_JOBS))


def chat_model(worker: Worker) -> str | None:
    return worker.chat_declaration[DECL_MODEL_ID] if serves_chat(worker) else None  # type: ignore[index]


def serving_declarations(
    online: list[tuple[Worker, bool]], models: list[str]
) -> list[dict[str, Any]]:
    """Chat declarations of the ``online`` workers whose model is one of ``models``."""
    return [
        dict(w.chat_declaration or {})
        for w, _trusted in online
        if serves_chat(w) and chat_model(w) in models
    ]


def chat_queue_filters(
    worker: Worker, trusted: bool, declaration: dict[str, Any]
) -> list[ColumnElement[bool]]:
    """SQL conditions on waiting_prompts: the chat requests this declaration covers."""
    upstream = dict(zip(SKIP_REASONS, queue_filters(worker, trusted), strict=True))
    features = list(declaration[DECL_CHAT_FEATURES])
    declared = cast(literal(features, ARRAY(Text)), ARRAY(Text))
    conditions = [
        WaitingPrompt.is_chat.is_(True),
        WaitingPrompt.models.has_key(declaration[DECL_MODEL_ID]),
        WaitingPrompt.required_features.contained_by(declared),
    ]
    for name, bound in declaration[DECL_CHAT_LIMITS].items():
        if bound is None:
            continue
        value = WaitingPrompt.required_limits[name].astext.cast(Numeric)
        conditions.append(or_(value.is_(None), value <= bound))
    conditions.append(_image_delivery(declaration))
    return conditions + [upstream[rule] for rule in UPSTREAM_RULES]


def inline_image_transport(declaration: dict[str, Any]) -> bool:
    transports = declaration.get(DECL_IMAGE_TRANSPORTS) or ()
    return TRANSPORT_URL in transports or TRANSPORT_BASE64 in transports


def _image_delivery(declaration: dict[str, Any]) -> ColumnElement[bool]:
    """The requests whose images this worker can receive (all, without images)."""
    if inline_image_transport(declaration):
        return true()
    no_images = ~WaitingPrompt.required_limits.has_key(LIMIT_MAX_IMAGES)
    if TRANSPORT_MESSAGES_URL in (declaration.get(DECL_IMAGE_TRANSPORTS) or ()):
        return or_(no_images, WaitingPrompt.messages_object.is_not(None))
    return no_images


def receives_images(declaration: dict[str, Any], wp: WaitingPrompt) -> bool:
    """The Python form of ``_image_delivery``."""
    if LIMIT_MAX_IMAGES not in (wp.required_limits or {}) or inline_image_transport(declaration):
        return True
    transports = declaration.get(DECL_IMAGE_TRANSPORTS) or ()
    return TRANSPORT_MESSAGES_URL in transports and wp.messages_object is not None


def chat_worker_fits(worker: Worker, trusted: bool, wp: WaitingPrompt) -> bool:
    """The Python form of ``chat_queue_filters`` for one worker and one chat request."""
    if not serves_chat(worker) or chat_model(worker) not in wp.models:
        return False
    decl = worker.chat_declaration or {}
    if declaration_covers(decl, list(wp.required_features), dict(wp.required_limits)):
        return False
    return receives_images(decl, wp) and upstream_rules_allow(worker, trusted, wp)


def upstream_rules_allow(worker: Worker, trusted: bool, wp: WaitingPrompt) -> bool:
    """The UPSTREAM_RULES in Python (as ``fit.skip_reason`` words them)."""
    if wp.workers and (str(worker.id) in wp.workers) == wp.worker_blacklist:
        return False
    if wp.trusted_workers and not trusted:
        return False
    return not (wp.nsfw and not worker.nsfw)
