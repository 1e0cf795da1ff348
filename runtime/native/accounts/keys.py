"""API keys: generated, stored as SHA-256 digests, resolved to users."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import String, bindparam, select
from sqlalchemy.orm import Session

from generated.errors import AnonForbiddenWorker, InvalidAPIKey
from generated.wire import ANONYMOUS_API_KEY as ANONYMOUS_API_KEY
from runtime.native.db.tables import ApiKey, KudosLedger, User
from runtime.observability import context as request_context

ANONYMOUS_USER_ID = 0


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).hexdigest()


def new_api_key() -> str:
    """22 URL-safe characters, like upstream's keys, never starting with "-": a key is passed
    on command lines (``horde-chat worker --api-key KEY``), where one in 64 keys would read
    as an option."""
    while True:
        key = secrets.token_urlsafe(16)
        if not key.startswith("-"):
            return key


def key_hash_of(api_key: str | None) -> str:
    """The digest a request's ``api_key`` header is looked up by; a missing (or empty)
    header means the anonymous key, as upstream."""
    return hash_key(api_key if api_key else ANONYMOUS_API_KEY)


def user_for_key(session: Session, api_key: str | None) -> User:
    """The user owning ``api_key``; a missing header means the anonymous key, as upstream.
    (A submit locks its user with its other admission reads: ``requests.admission``.)"""
    return user_for_hash(session, key_hash_of(api_key))


def user_for_hash(session: Session, key_hash: str) -> User:
    """The user owning the key whose digest is ``key_hash`` (InvalidAPIKey for none)."""
    user = session.scalars(_USER, {"key_hash": key_hash}).first()
    if user is None:
        raise InvalidAPIKey()
    request_context.set_user(user.id)  # the access log's user id
    return user


_USER = (
    select(User)
    .join(ApiKey, ApiKey.user_id == User.id)
    .where(ApiKey.key_hash == bindparam("key_hash", type_=String()))
)
"""``user_for_key``'s statement, built once (each chat submit and status built one)."""
KEY_OWNER = (
    select(ApiKey.user_id)
    .where(ApiKey.key_hash == bindparam("key_hash", type_=String()))
    .scalar_subquery()
)
"""The id of the user owning the key whose digest is the parameter ``key_hash`` (NULL for
none), for a statement that names the user by its key."""


def unique_alias(user: User) -> str:
    """A user as upstream names one (its get_unique_alias): name#id."""
    return f"{user.username}#{user.id}"


def worker_owner_for_key(session: Session, api_key: str | None) -> User:
    """A registered user for a worker route; the anonymous user may not run workers."""
    user = user_for_key(session, api_key)
    if user.id == ANONYMOUS_USER_ID:
        raise AnonForbiddenWorker()
    return user


def create_user(
    session: Session, username: str, kudos: float = 0, concurrency: int = 30
) -> tuple[User, str]:
    """A new user and its API key (returned once; only the digest is stored)."""
    user = User(username=username, concurrency=concurrency)
    session.add(user)
    session.flush()
    api_key = new_api_key()
    session.add(ApiKey(key_hash=hash_key(api_key), user_id=user.id))
    if kudos:
        from runtime.native.accounts.kudos import GRANT_REASON, apply_kudos

        apply_kudos(session, user.id, kudos, GRANT_REASON)
    session.flush()
    return user, api_key


def ledger_balance(session: Session, user_id: int) -> float:
    """The balance recomputed from the ledger alone (for audits)."""
    from sqlalchemy import func

    total = session.execute(
        select(func.coalesce(func.sum(KudosLedger.delta), 0)).where(KudosLedger.user_id == user_id)
    ).scalar_one()
    return float(total)
