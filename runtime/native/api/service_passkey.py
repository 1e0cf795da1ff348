"""The chat front's service passkey: with it, the forwarded client address is trusted.

The front calls the native API for many clients from one address. When it presents the
configured passkey (``HORDE_SERVICE_PASSKEY``) in X-Horde-Service-Passkey, per-source
limits and the stored source address use the first X-Forwarded-For entry instead of the
connection's address. A wrong passkey, or one sent to a deployment without a passkey, is
refused with 403 InvalidServicePasskey.
"""

from __future__ import annotations

import hmac

from flask import request

from generated.errors import InvalidServicePasskey
from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY
from generated.wire import HEADER_FORWARDED_FOR
from runtime.config import Settings

FORWARDED_FOR = HEADER_FORWARDED_FOR
MAX_ADDRESS_CHARS = 64


def _matches(sent: str, configured: str | None) -> bool:
    return configured is not None and hmac.compare_digest(
        sent.encode("utf-8", "surrogatepass"), configured.encode("utf-8", "surrogatepass")
    )


def trusted_service(settings: Settings) -> bool:
    """True with the right passkey, False without one; a wrong one is refused (403)."""
    sent = request.headers.get(HEADER_X_HORDE_SERVICE_PASSKEY)
    if sent is None:
        return False
    if not _matches(sent, settings.service_passkey):
        raise InvalidServicePasskey()
    return True


def presents_passkey(settings: Settings) -> bool:
    """True when the call carries the right passkey (the chat front); never raises
    (flask-limiter calls it before the view, which refuses a wrong passkey)."""
    sent = request.headers.get(HEADER_X_HORDE_SERVICE_PASSKEY)
    return sent is not None and _matches(sent, settings.service_passkey)


def source_address(settings: Settings) -> str:
    """The client's address: the forwarded one behind a trusted front, else the peer's.

    Never raises (flask-limiter calls it before the view, which refuses a wrong passkey).
    """
    peer = request.remote_addr or "unknown"
    if not presents_passkey(settings):
        return peer
    forwarded = request.headers.get(FORWARDED_FOR, "").split(",")[0].strip()
    return forwarded[:MAX_ADDRESS_CHARS] or peer
