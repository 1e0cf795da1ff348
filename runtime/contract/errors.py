"""The behaviour every error of the horde shares; the classes themselves are generated.

``generated/errors.py`` (from spec/errors.yaml and spec/chat/errors.yaml) defines
``HordeError`` on this base with the spec's default values, and one subclass per error code
setting only what differs. This module holds what is not the spec's to decide: how an error
is raised (the message template formatted with the raiser's fields) and how it is written on
each surface (upstream's ``{message, rc}``, OpenAI's envelope, the front's retry headers).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

RETRY_AFTER = "retry-after"
"""Seconds to wait before trying again, whole and rounded up (RFC 9110)."""
RETRY_AFTER_MS = "retry-after-ms"
"""The same wait in milliseconds: OpenAI's SDKs read it before Retry-After, so a client
waits out a rate limit's window to its end instead of to the next whole second."""


class HordeErrorBase(Exception):
    """An error returned on purpose, with its code, statuses and message.

    The values here are what an error of spec/errors.yaml has unless its entry says
    otherwise; codegen reads them (``codegen/targets/errors.py``) and writes on each
    generated subclass only the attributes that differ.
    """

    code: ClassVar[str] = "InternalError"
    """The return code: upstream's ``rc`` on the native API, ``error.code`` on the front."""
    template: ClassVar[str] = "Internal error."
    """The message, ``str.format``-ed with the keyword fields the raiser passes."""
    native_status: ClassVar[int | None] = None
    """The HTTP status on the native API; None: never returned there."""
    front_status: ClassVar[int | None] = None
    """The HTTP status on the chat front; None: never returned there."""
    openai_type: ClassVar[str | None] = None
    """OpenAI's ``error.type`` on the front."""
    default_param: ClassVar[str | None] = None
    """OpenAI's ``error.param`` unless the raiser names one."""
    no_retry: ClassVar[bool] = False
    """The front always sends ``x-should-retry: false``."""
    sends_retry_after: ClassVar[bool] = False
    """The front sends ``retry_headers()`` (the raiser's value, else ``default_retry_after``)."""
    default_retry_after: ClassVar[int | None] = None
    """Seconds for ``Retry-After`` unless the raiser gives them."""
    front_when: ClassVar[tuple[str, ...]] = ()
    """The stages of the front's state diagram at which it returns it (admission, ...)."""
    native_routes: ClassVar[tuple[str, ...]] = ()
    """The native route families that return it (a note for the reference)."""
    native_errors_map: ClassVar[bool] = False
    """The native body adds upstream's validation map, ``errors: {field: problem}``."""

    def __init__(
        self,
        message: str | None = None,
        *,
        param: str | None = None,
        metadata: dict[str, Any] | None = None,
        retry_after: float | None = None,
        **fields: Any,
    ) -> None:
        self.fields = fields
        self.message = message if message is not None else self.template.format(**fields)
        self.param = param if param is not None else self.default_param
        self.metadata = metadata
        self.retry_after = retry_after if retry_after is not None else self.default_retry_after
        super().__init__(self.message)

    def native_body(self) -> dict[str, Any]:
        """Upstream AI Horde's error shape, plus ``param`` when the error names a request
        field (so the front's OpenAI envelope names it too), and upstream's ``errors`` map
        where the spec says (a validation error)."""
        body: dict[str, Any] = {"message": self.message, "rc": self.code}
        if self.param is not None:
            body["param"] = self.param
        if self.native_errors_map:
            body["errors"] = {str(self.fields["field"]): str(self.fields["problem"])}
        return body

    def openai_body(self) -> dict[str, Any]:
        """OpenAI's error envelope, the horde's return code as ``code``."""
        return {
            "error": {
                "message": self.message,
                "type": self.openai_type or "server_error",
                "param": self.param,
                "code": self.code,
                "metadata": self.metadata,
            }
        }

    def front_headers(self, *, submitted: bool = False) -> dict[str, str]:
        """Headers the front sends with this error; ``submitted``: the Horde may hold it."""
        headers: dict[str, str] = {}
        if self.no_retry or submitted:
            headers["x-should-retry"] = "false"
        if self.sends_retry_after:
            headers.update(self.retry_headers())
        return headers

    def retry_headers(self) -> dict[str, str]:
        """``retry-after`` (whole seconds, rounded up, at least 1) and ``retry-after-ms``
        (at least 1) for the error's ``retry_after``; none without one."""
        if self.retry_after is None:
            return {}
        milliseconds = max(math.ceil(round(self.retry_after * 1000, 3)), 1)  # 7.4 s: 7400
        return {RETRY_AFTER: str(math.ceil(milliseconds / 1000)), RETRY_AFTER_MS: str(milliseconds)}
