"""Shared keys: ids a user hands out, sent as a requester's apikey on the text and chat
submits, spending the owner's kudos within the key's own limits (spec/accounts.yaml).

``requester`` turns a submit's apikey into the digest its owner is found by (the admission
statement reads and locks that user) and the shared key it named, refused when spent or
expired; ``check_request`` refuses a request over the key's kudos left or token limit;
``spend`` takes what a request was charged off its key's limit. The shared key routes
(create, read, modify, delete) are ``create``, ``find``, ``modify`` and ``delete``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from email.utils import formatdate
from typing import Any

from sqlalchemy import Table, bindparam, case, func, select, update
from sqlalchemy.orm import Session

from generated.accounts import (
    SHARED_KEY_UNLIMITED,
    SHARED_KEYS_PER_TRUSTED_USER,
    SHARED_KEYS_PER_USER,
)
from generated.errors import (
    AnonForbidden,
    InvalidAPIKey,
    NoSharedKeyModSelected,
    SharedKeyEmpty,
    SharedKeyExpired,
    SharedKeyInsufficientKudos,
    SharedKeyNotOwned,
    SharedKeyTokenLimit,
    TooManySharedKeys,
)
from runtime.native.accounts.keys import ANONYMOUS_USER_ID, key_hash_of, unique_alias
from runtime.native.db.tables import ApiKey, SharedKey, User

SHARED_KEYS: Table = SharedKey.__table__  # type: ignore[assignment]
SETTINGS = ("kudos", "expiry", "name", "max_image_pixels", "max_image_steps", "max_text_tokens")
"""A shared key's settings, as the create and modify bodies name them."""
EXPIRY_NEVER = -1


def shared_key_id(api_key: str | None) -> uuid.UUID | None:
    """The shared key id ``api_key`` spells (upstream parses it as a UUID), else None."""
    if not api_key:
        return None
    try:
        return uuid.UUID(api_key)
    except ValueError:
        return None


@dataclass(frozen=True)
class Requester:
    """Who a submit's apikey stands for."""

    key_hash: str
    """The digest the submit's user is found by: its own key's, or its shared key owner's."""
    shared_key: SharedKey | None = None
    """The shared key the apikey named (in no session), if it named one."""


_KEY_AND_OWNER = select(
    SharedKey,
    select(ApiKey.key_hash)
    .where(ApiKey.user_id == SharedKey.user_id)
    .order_by(ApiKey.created)
    .limit(1)
    .scalar_subquery(),
).where(SharedKey.id == bindparam("id"))
"""A shared key and the digest of one of its owner's keys, built once."""


def requester(
    session: Session, api_key: str | None, now: datetime, *, spending: bool = True
) -> Requester:
    """The submit's requester: an apikey that is a shared key's id stands for the key's
    owner (refused when the key is spent or expired, unless the call spends nothing:
    ``spending`` false); any other is the user's own key, as upstream, which looks a shared
    key up first. One statement only for a key spelled as a UUID, which no user key is."""
    key_id = shared_key_id(api_key)
    if key_id is None:
        return Requester(key_hash_of(api_key))
    row = session.execute(_KEY_AND_OWNER, {"id": key_id}).first()
    if row is None:
        return Requester(key_hash_of(api_key))
    key, owner_hash = row
    session.expunge(key)
    if owner_hash is None:  # its owner holds no key: nothing to find the owner by
        raise InvalidAPIKey()
    if spending:
        check_usable(key, now)
    return Requester(owner_hash, key)


def check_usable(key: SharedKey, now: datetime) -> None:
    """Refuse a spent key (SharedKeyEmpty) or an expired one (SharedKeyExpired)."""
    if key.kudos == 0:
        raise SharedKeyEmpty()
    if expired(key, now):
        raise SharedKeyExpired()


def expired(key: SharedKey, now: datetime) -> bool:
    return key.expiry is not None and key.expiry < now


def check_request(
    key: SharedKey | None, quote: Decimal, max_length: int, param: str | None = None
) -> None:
    """Refuse a request sent with ``key`` whose quote is above what the key has left, or
    whose ``max_length`` is above the key's token limit (``param``: where the request named
    it; a text request's params.max_length unless given)."""
    if key is None:
        return
    if key.kudos != SHARED_KEY_UNLIMITED and quote > key.kudos:
        raise SharedKeyInsufficientKudos(remaining=float(key.kudos), required=float(quote))
    limit = key.max_text_tokens
    if limit != SHARED_KEY_UNLIMITED and max_length > limit:
        raise SharedKeyTokenLimit(limit=limit, requested=max_length, param=param)


_SPEND = (
    update(SHARED_KEYS)
    .where(SHARED_KEYS.c.id == bindparam("key_id"))
    .values(
        kudos=case(
            (SHARED_KEYS.c.kudos == SHARED_KEY_UNLIMITED, SHARED_KEYS.c.kudos),
            else_=func.greatest(SHARED_KEYS.c.kudos - bindparam("spent"), 0),
        ),
        utilized=SHARED_KEYS.c.utilized + bindparam("spent"),
    )
)
"""``spend``'s statement, built once; ``horde_pay`` (migration 0008) spends a charge the
same way in its own language."""


def spend(session: Session, key_id: uuid.UUID | None, amount: Decimal) -> None:
    """Take ``amount`` (a request's tax or charge) off the key's limit (never below 0; an
    unlimited key stays unlimited) and count it as utilized; nothing without a key (a
    deleted key, too)."""
    if key_id is not None and amount:
        session.execute(_SPEND, {"key_id": key_id, "spent": amount})


def details(key: SharedKey, owner: User) -> dict[str, Any]:
    """The key as upstream's SharedKeyDetails shows it (whole kudos, RFC 822 expiry absent
    when it never expires), its name always present (empty without one)."""
    body: dict[str, Any] = {
        "id": str(key.id),
        "username": unique_alias(owner),
        "name": key.name or "",
        "kudos": int(key.kudos),
        "utilized": int(key.utilized),
        "max_image_pixels": key.max_image_pixels,
        "max_image_steps": key.max_image_steps,
        "max_text_tokens": key.max_text_tokens,
    }
    if key.expiry is not None:
        body["expiry"] = formatdate(key.expiry.timestamp())
    return body


def _expiry(days: int, now: datetime) -> datetime | None:
    return None if days == EXPIRY_NEVER else now + timedelta(days=days)


def create(session: Session, user: User, settings: dict[str, Any], now: datetime) -> SharedKey:
    """A new key of ``user`` (its row locked first, so two creates cannot both pass the
    count): the anonymous user may hold none, a user a few (``TooManySharedKeys``)."""
    if user.id == ANONYMOUS_USER_ID:
        raise AnonForbidden()
    trusted = session.execute(
        select(User.trusted).where(User.id == user.id).with_for_update()
    ).scalar_one()
    allowed = SHARED_KEYS_PER_TRUSTED_USER if trusted else SHARED_KEYS_PER_USER
    held = session.execute(
        select(func.count()).select_from(SharedKey).where(SharedKey.user_id == user.id)
    ).scalar_one()
    if held >= allowed:
        raise TooManySharedKeys(limit=allowed)
    key = SharedKey(
        id=uuid.uuid4(),
        user_id=user.id,
        name=settings.get("name"),
        kudos=Decimal(settings["kudos"]),
        utilized=Decimal(0),
        expiry=_expiry(settings["expiry"], now),
        **{name: settings[name] for name in SETTINGS if name.startswith("max_")},
    )
    session.add(key)
    session.flush()
    return key


def find(session: Session, key_id: str, *, lock: bool = False) -> tuple[SharedKey, User]:
    """The key ``key_id`` names and its owner; none is InvalidAPIKey (401), as upstream."""
    parsed = shared_key_id(key_id)
    if parsed is None:
        raise InvalidAPIKey()
    query = select(SharedKey, User).join(User, User.id == SharedKey.user_id)
    query = query.where(SharedKey.id == parsed)
    row = session.execute(query.with_for_update(of=SharedKey) if lock else query).first()
    if row is None:
        raise InvalidAPIKey()
    return row[0], row[1]


def owned(key: SharedKey, user: User) -> None:
    """Refuse a change to ``key`` by a user who does not own it."""
    if key.user_id != user.id:
        raise SharedKeyNotOwned(id=str(key.id))


def modify(key: SharedKey, changes: dict[str, Any], now: datetime) -> None:
    """Apply the settings ``changes`` holds (an absent one is kept); none is refused."""
    given = {name: changes[name] for name in SETTINGS if name in changes}
    if not given:
        raise NoSharedKeyModSelected()
    for name, value in given.items():
        if name == "expiry":
            key.expiry = _expiry(value, now)
        elif name == "kudos":
            key.kudos = Decimal(value)
        else:
            setattr(key, name, value)
