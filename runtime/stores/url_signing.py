"""HMAC-signed object URLs of the filesystem store: over (key, expiry), so a URL cannot be
reused for another object, and refused once expired or altered."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

from generated.errors import ObjectURLExpired, ObjectURLInvalid

SECRET_FILE = ".signing-secret"


def signature(secret: bytes, key: str, expires: int) -> str:
    return hmac.new(secret, f"{key}\n{expires}".encode(), hashlib.sha256).hexdigest()


def verify(
    secret: bytes, key: str, expires: str | None, sig: str | None, now: float | None = None
) -> None:
    """Raise ObjectURLInvalid (tampered, for another key, incomplete) or ObjectURLExpired."""
    if not expires or not sig:
        raise ObjectURLInvalid(reason="expires and signature are both required")
    try:
        expiry = int(expires)
    except ValueError:
        raise ObjectURLInvalid(reason="expires is not an integer") from None
    if not hmac.compare_digest(signature(secret, key, expiry).encode(), sig.encode()):
        raise ObjectURLInvalid(reason="the signature does not match this object and expiry")
    current = time.time() if now is None else now
    if current > expiry:
        raise ObjectURLExpired(seconds=int(current - expiry))


def load_or_create_secret(folder: Path) -> bytes:
    """The secret kept in ``folder`` (created once, readable by its owner only)."""
    path = folder / SECRET_FILE
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):  # another process may be writing it right now
            value = path.read_bytes().strip()
            if value:
                return value
            time.sleep(0.01)
        raise RuntimeError(f"{path} is empty; delete it or set HORDE_STORAGE_SECRET") from None
    value = secrets.token_hex(32).encode()
    with os.fdopen(fd, "wb") as out:
        out.write(value)
    return value
