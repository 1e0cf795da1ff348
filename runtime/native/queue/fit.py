"""Which workers may serve which requests: the one filter the pop, the status and the queue share.

Every rule is written once here, its SQL form (used under the pop's row lock and to count
upstream's ``skipped``) beside its Python form (``is_possible`` and the chat status), so the
two cannot drift. Text requests follow upstream's rules (``TEXT_RULES``, in the order of
upstream's ``skipped`` keys); a chat request compares the worker's chat declaration with
the requirements stored on its row, never loading its messages (``chat_worker_fits``); the
worker list, trusted, NSFW, validated-backend and speed rules are shared (``SHARED_RULES``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Integer,
    Numeric,
    String,
    and_,
    bindparam,
    cast,
    false,
    func,
    literal,
    or_,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import Text

from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_JOBS,
    DECL_CHAT_LIMITS,
    DECL_IMAGE_TRANSPORTS,
    DECL_MODEL_ID,
    LIMIT_MAX_IMAGES,
)
from generated.storage import TRANSPORT_BASE64, TRANSPORT_MESSAGES_URL, TRANSPORT_URL
from runtime.contract.pricing import is_validated_backend
from runtime.contract.requirements import declaration_covers, scope_exclusions
from runtime.native.accounts.kudos import model_billions
from runtime.native.db.tables import AnyWorker, WaitingPrompt
from runtime.native.queue.policy import SLOW_SPEED_NO_MODEL, SPEED_BASELINE, slow_speed

Terms = Mapping[str, Any]
"""The worker's side of the rules as SQL: one expression per ``WORKER_TERMS`` name, either
the worker's values as literals (``literal_terms``) or bound parameters (``BOUND_TERMS``,
so a statement is built and compiled once and only its parameters change per pop)."""


@dataclass(frozen=True)
class Rule:
    """One of upstream's rules: its ``skipped`` key, its SQL form and its Python form."""

    name: str
    sql: Callable[[Terms], ColumnElement[bool]]
    """Condition on waiting_prompts: the requests the rule lets a worker take, on the
    worker's ``Terms``."""
    allows: Callable[[AnyWorker, bool, WaitingPrompt], bool]
    """The same condition on one loaded request."""


def _empty_list() -> Any:
    return cast(literal("[]"), JSONB)


def _text_array(values: Any) -> Any:
    return cast(values if isinstance(values, ColumnElement) else literal(values, TEXTS), TEXTS)


TEXTS = ARRAY(Text)

CONTEXT_LENGTH = Rule(
    "max_context_length",
    sql=lambda t: WaitingPrompt.max_context_length <= t["w_max_context_length"],
    allows=lambda w, _t, wp: wp.max_context_length <= w.max_context_length,
)
LENGTH = Rule(
    "max_length",
    sql=lambda t: WaitingPrompt.max_length <= t["w_max_length"],
    allows=lambda w, _t, wp: wp.max_length <= w.max_length,
)
MODELS = Rule(
    "models",
    sql=lambda t: or_(
        WaitingPrompt.models == _empty_list(),
        WaitingPrompt.models.has_any(_text_array(t["w_models"])),
    ),
    allows=lambda w, _t, wp: not wp.models or bool(set(wp.models) & set(w.models)),
)
WORKER_LIST = Rule(
    "worker_id",
    sql=lambda t: or_(
        WaitingPrompt.workers == _empty_list(),
        and_(WaitingPrompt.worker_blacklist.is_(False), WaitingPrompt.workers.has_key(t["w_id"])),
        and_(WaitingPrompt.worker_blacklist.is_(True), ~WaitingPrompt.workers.has_key(t["w_id"])),
    ),
    allows=lambda w, _t, wp: not wp.workers or (str(w.id) in wp.workers) != wp.worker_blacklist,
)
TRUSTED = Rule(
    "untrusted",
    sql=lambda t: or_(WaitingPrompt.trusted_workers.is_(False), t["w_trusted"]),
    allows=lambda _w, trusted, wp: not wp.trusted_workers or trusted,
)
NSFW = Rule(
    "nsfw",
    sql=lambda t: or_(WaitingPrompt.nsfw.is_(False), t["w_nsfw"]),
    allows=lambda w, _t, wp: not wp.nsfw or w.nsfw,
)


def first_model(worker: AnyWorker) -> str | None:
    """The model upstream sizes the slow threshold by: a chat worker's model_id, else the
    first listed model."""
    decl = worker.chat_declaration
    if decl and decl.get(DECL_CHAT_JOBS):
        return str(decl[DECL_MODEL_ID])
    return worker.models[0] if worker.models else None


def slow_threshold(worker: AnyWorker) -> float:
    """Upstream's slow threshold for the worker's model."""
    model = first_model(worker)
    return SLOW_SPEED_NO_MODEL if model is None else slow_speed(model_billions(model))


def is_slow(worker: AnyWorker) -> bool:
    """Slower than upstream's threshold for the worker's model (no samples: the baseline).
    Its SQL form, on a worker row: ``fast_sql``."""
    speed = SPEED_BASELINE if worker.speed is None else worker.speed
    return speed < slow_threshold(worker)


def fast_sql(speed: str) -> str:
    """``not is_slow`` as SQL on the column ``speed``, with the parameters ``fast_values``."""
    return f"coalesce({speed}, %(speed_baseline)s) >= %(slow_threshold)s"


def fast_values(worker: AnyWorker) -> dict[str, float]:
    return {"speed_baseline": SPEED_BASELINE, "slow_threshold": slow_threshold(worker)}


SLOW = Rule(
    "performance",
    sql=lambda t: or_(WaitingPrompt.slow_workers.is_(True), t["w_fast"]),
    allows=lambda w, _t, wp: wp.slow_workers or not is_slow(w),
)
"""slow_workers false skips a worker slower than upstream's threshold for its model
(``policy.slow_speed``; a worker without samples counts as the baseline, so as slow)."""
EXTRA_SLOW = Rule(
    "extra_slow",
    sql=lambda t: or_(WaitingPrompt.extra_slow_workers.is_(True), t["w_regular"]),
    allows=lambda w, _t, wp: wp.extra_slow_workers or not w.extra_slow_worker,
)
"""A worker that declared extra_slow_worker serves only requests with extra_slow_workers
true. Upstream applies it to images; the horde key is implemented for text and chat alike
rather than ignored."""

VALIDATED_BACKENDS_KEY = "validated_backends"
"""The request's validated_backends, kept in its params row (out of the job payload)."""
VALIDATED = Rule(
    "bridge_version",
    sql=lambda t: or_(
        func.coalesce(WaitingPrompt.params[VALIDATED_BACKENDS_KEY].as_boolean(), false()).is_(
            False
        ),
        t["w_validated"],
    ),
    allows=lambda w, _t, wp: (
        not wp.params.get(VALIDATED_BACKENDS_KEY) or is_validated_backend(w.bridge_agent)
    ),
)

SHARED_RULES = (WORKER_LIST, TRUSTED, NSFW, VALIDATED, SLOW, EXTRA_SLOW)
"""The upstream rules that apply to chat requests too."""
TEXT_RULES = (CONTEXT_LENGTH, LENGTH, MODELS, *SHARED_RULES)
"""Upstream's rules for text requests, in the order of its ``skipped`` keys."""
SKIP_REASONS = tuple(rule.name for rule in TEXT_RULES)
"""Upstream's ``skipped`` keys on a pop that found nothing."""

WORKER_TERMS: dict[str, Any] = {
    "w_max_context_length": Integer(),
    "w_max_length": Integer(),
    "w_models": TEXTS,
    "w_id": String(),
    "w_trusted": Boolean(),
    "w_nsfw": Boolean(),
    "w_validated": Boolean(),
    "w_fast": Boolean(),
    "w_regular": Boolean(),
}
"""The worker's side of the rules: each term's name and SQL type."""
BOUND_TERMS: Terms = {name: bindparam(name, type_=kind) for name, kind in WORKER_TERMS.items()}
"""The terms as bound parameters (values: ``term_values``)."""


def term_values(worker: AnyWorker, trusted: bool) -> dict[str, Any]:
    """The worker's values of ``WORKER_TERMS``."""
    return {
        "w_max_context_length": worker.max_context_length,
        "w_max_length": worker.max_length,
        "w_models": list(worker.models),
        "w_id": str(worker.id),
        "w_trusted": trusted,
        "w_nsfw": bool(worker.nsfw),
        "w_validated": is_validated_backend(worker.bridge_agent),
        "w_fast": not is_slow(worker),
        "w_regular": not worker.extra_slow_worker,
    }


def literal_terms(worker: AnyWorker, trusted: bool) -> Terms:
    """The terms as literals of the worker's values (a statement for this worker alone)."""
    return {
        name: literal(value, WORKER_TERMS[name])
        for name, value in term_values(worker, trusted).items()
    }


# Text requests


def skip_reason(worker: AnyWorker, trusted: bool, wp: WaitingPrompt) -> str | None:
    """Why ``worker`` cannot take ``wp`` (upstream's skipped key), or None if it can."""
    return next((r.name for r in TEXT_RULES if not r.allows(worker, trusted, wp)), None)


def worker_fits(worker: AnyWorker, trusted: bool, wp: WaitingPrompt) -> bool:
    return skip_reason(worker, trusted, wp) is None


def queue_filters(worker: AnyWorker, trusted: bool) -> list[ColumnElement[bool]]:
    """SQL conditions on waiting_prompts for ``worker``, in SKIP_REASONS order."""
    return text_filters(literal_terms(worker, trusted))


def text_filters(terms: Terms) -> list[ColumnElement[bool]]:
    """SQL conditions on waiting_prompts on the worker's ``terms``, in SKIP_REASONS order."""
    return [rule.sql(terms) for rule in TEXT_RULES]


# Chat requests


def serves_chat(worker: AnyWorker) -> bool:
    decl = worker.chat_declaration
    return bool(decl and decl.get(DECL_CHAT_JOBS))


def chat_model(worker: AnyWorker) -> str | None:
    decl = worker.chat_declaration
    return decl[DECL_MODEL_ID] if decl and serves_chat(worker) else None


def serving_declarations(
    online: list[tuple[AnyWorker, bool]], models: list[str]
) -> list[dict[str, Any]]:
    """Chat declarations of the ``online`` workers whose model is one of ``models``."""
    return [
        dict(w.chat_declaration or {})
        for w, _trusted in online
        if serves_chat(w) and chat_model(w) in models
    ]


@dataclass(frozen=True)
class ChatShape:
    """What of a chat declaration changes the SQL of ``chat_queue_filters`` (its values are
    bound parameters: ``chat_values``): one statement per shape."""

    exclusions: tuple[tuple[str, str], ...]
    """(guarantee, feature) pairs the declared scopes exclude."""
    limits: tuple[str, ...]
    """The limits declared with a bound."""
    images: str
    """How its images reach it: IMAGES_INLINE, IMAGES_BY_URL or IMAGES_NONE."""


IMAGES_INLINE, IMAGES_BY_URL, IMAGES_NONE = "inline", "messages_url", "none"


def chat_shape(declaration: dict[str, Any]) -> ChatShape:
    transports = declaration.get(DECL_IMAGE_TRANSPORTS) or ()
    if inline_image_transport(declaration):
        images = IMAGES_INLINE
    elif TRANSPORT_MESSAGES_URL in transports:
        images = IMAGES_BY_URL
    else:
        images = IMAGES_NONE
    return ChatShape(
        exclusions=tuple(scope_exclusions(declaration[DECL_CHAT_FEATURES])),
        limits=tuple(n for n, b in declaration[DECL_CHAT_LIMITS].items() if b is not None),
        images=images,
    )


def chat_values(declaration: dict[str, Any], shape: ChatShape) -> dict[str, Any]:
    """The bound parameters of ``chat_filters``: the declaration's model, features and
    limits."""
    return {
        "d_model": declaration[DECL_MODEL_ID],
        "d_features": list(declaration[DECL_CHAT_FEATURES]),
        **{f"d_limit_{name}": declaration[DECL_CHAT_LIMITS][name] for name in shape.limits},
    }


def chat_filters(shape: ChatShape, values: Terms, terms: Terms) -> list[ColumnElement[bool]]:
    """SQL conditions on waiting_prompts: the chat requests a declaration of ``shape``
    covers, on its ``values`` (``chat_values`` as SQL) and the worker's ``terms``."""
    conditions = [
        WaitingPrompt.is_chat.is_(True),
        WaitingPrompt.models.has_key(values["d_model"]),
        WaitingPrompt.required_features.contained_by(_text_array(values["d_features"])),
    ]
    for guarantee, feature in shape.exclusions:
        # a declared scope: the guarantee does not cover requests requiring the feature
        both = _text_array([guarantee, feature])
        conditions.append(~WaitingPrompt.required_features.contains(both))
    for name in shape.limits:
        value = WaitingPrompt.required_limits[name].astext.cast(Numeric)
        conditions.append(or_(value.is_(None), value <= values[f"d_limit_{name}"]))
    conditions.append(_image_delivery(shape))
    return conditions + [rule.sql(terms) for rule in SHARED_RULES]


CHAT_VALUE_TYPES: dict[str, Any] = {"d_model": String(), "d_features": TEXTS}


def bound_chat_values(shape: ChatShape) -> Terms:
    """``chat_values`` as bound parameters."""
    limits = {f"d_limit_{n}": bindparam(f"d_limit_{n}", type_=Numeric()) for n in shape.limits}
    return {n: bindparam(n, type_=kind) for n, kind in CHAT_VALUE_TYPES.items()} | limits


def chat_queue_filters(
    worker: AnyWorker, trusted: bool, declaration: dict[str, Any]
) -> list[ColumnElement[bool]]:
    """SQL conditions on waiting_prompts: the chat requests this declaration covers."""
    shape = chat_shape(declaration)
    values = {
        name: literal(value, CHAT_VALUE_TYPES.get(name, Numeric()))
        for name, value in chat_values(declaration, shape).items()
    }
    return chat_filters(shape, values, literal_terms(worker, trusted))


def chat_worker_fits(worker: AnyWorker, trusted: bool, wp: WaitingPrompt) -> bool:
    """The Python form of ``chat_queue_filters`` for one worker and one chat request.

    The worker declared chat_jobs, its model_id is one of the request's models (replacing
    the text length and model rules), its declaration covers every stored feature (and
    guarantee, under strict) and limit, it can receive the request's images (an image
    transport, or messages_url for offloaded messages; whether there are images is the
    stored max_images measure, vision a required feature), and ``SHARED_RULES`` let it."""
    if not serves_chat(worker) or chat_model(worker) not in wp.models:
        return False
    decl = worker.chat_declaration or {}
    if declaration_covers(decl, list(wp.required_features), dict(wp.required_limits)):
        return False  # a gap: a feature or a limit the declaration does not cover
    if not receives_images(decl, wp):
        return False
    return all(rule.allows(worker, trusted, wp) for rule in SHARED_RULES)


def inline_image_transport(declaration: dict[str, Any]) -> bool:
    transports = declaration.get(DECL_IMAGE_TRANSPORTS) or ()
    return TRANSPORT_URL in transports or TRANSPORT_BASE64 in transports


def _image_delivery(shape: ChatShape) -> ColumnElement[bool]:
    """The requests whose images this worker can receive (all, without images)."""
    if shape.images == IMAGES_INLINE:
        return true()
    no_images: ColumnElement[bool] = ~WaitingPrompt.required_limits.has_key(LIMIT_MAX_IMAGES)
    if shape.images == IMAGES_BY_URL:
        return or_(no_images, WaitingPrompt.messages_object.is_not(None))
    return no_images


def receives_images(declaration: dict[str, Any], wp: WaitingPrompt) -> bool:
    """The Python form of ``_image_delivery``."""
    if LIMIT_MAX_IMAGES not in (wp.required_limits or {}) or inline_image_transport(declaration):
        return True
    transports = declaration.get(DECL_IMAGE_TRANSPORTS) or ()
    return TRANSPORT_MESSAGES_URL in transports and wp.messages_object is not None
