"""The chat front's service passkey: with it, the forwarded client address is trusted.

The front calls the native API for many clients from one address. When it presents the
configured passkey (``HORDE_SERVICE_PASSKEY``) in X-Horde-Service-Passkey, per-source
limits and the stored source address use the first X-Forwarded-For entry instead of the
connection's address. A wrong passkey, or one sent to a deployment without a passkey, is
refused with 403 InvalidServicePasskey.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

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


HeaderGet = Callable[[str], "str | None"]
"""A request's header by name (flask's ``request.headers.get``, or a lane request's)."""


def refuse_wrong_passkey(get: HeaderGet, settings: Settings) -> bool:
    """True with the right passkey in the headers ``get`` reads, False without one; a wrong
    one is refused (403)."""
    sent = get(HEADER_X_HORDE_SERVICE_PASSKEY)
    if sent is None:
        return False
    if not _matches(sent, settings.service_passkey):
        raise InvalidServicePasskey()
    return True


def trusted_service(settings: Settings) -> bool:
    """Flask's request, as ``refuse_wrong_passkey``."""
    return refuse_wrong_passkey(request.headers.get, settings)


def passkey_in(get: HeaderGet, settings: Settings) -> bool:
    """True when the headers ``get`` reads carry the right passkey; never raises."""
    sent = get(HEADER_X_HORDE_SERVICE_PASSKEY)
    return sent is not None and _matches(sent, settings.service_passkey)


def source_of(peer: str | None, get: HeaderGet, settings: Settings) -> str:
    """The client's address of a request from ``peer`` whose headers ``get`` reads: the
    forwarded one behind a trusted front, else the peer's. Never raises."""
    address = peer or "unknown"
    if not passkey_in(get, settings):
        return address
    forwarded = (get(FORWARDED_FOR) or "").split(",")[0].strip()
    return forwarded[:MAX_ADDRESS_CHARS] or address


def presents_passkey(settings: Settings) -> bool:
    """True when the call carries the right passkey (the chat front); never raises
    (flask-limiter calls it before the view, which refuses a wrong passkey)."""
    return passkey_in(request.headers.get, settings)


def source_address(settings: Settings) -> str:
    """The client's address: the forwarded one behind a trusted front, else the peer's.

    Never raises (flask-limiter calls it before the view, which refuses a wrong passkey).
    """
    return source_of(request.remote_addr, request.headers.get, settings)
