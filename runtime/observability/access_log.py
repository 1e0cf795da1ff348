"""One access-log line per request, plain by default, JSON lines with HORDE_LOG_FORMAT=json.

The line names the method, the route (the matched route's template, so ids do not make
every line distinct), the status, the latency in milliseconds, the request id and the user
id (``-`` when no key was resolved). It never holds a key, a header or a body. Lines go to
the ``horde.access.<service>`` logger, which writes them to stderr unless the operator gave
it handlers of their own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import TextIO

from generated.config import HORDE_LOG_FORMAT

LOGGER_PREFIX = "horde.access."


def log_format(env: Mapping[str, str] | None = None) -> str:
    """``plain`` or ``json`` from HORDE_LOG_FORMAT (anything else is refused)."""
    return HORDE_LOG_FORMAT.read(env)


class AccessLog:
    """The access log of one service (``native`` or ``front``)."""

    def __init__(self, service: str, fmt: str | None = None) -> None:
        self.service = service
        self.format = fmt or log_format()
        self.logger = logging.getLogger(LOGGER_PREFIX + service)
        self._handler: logging.StreamHandler[TextIO] | None = None
        self._handlers: list[logging.Handler] = []
        if not self.logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            self.logger.addHandler(handler)
            self.logger.setLevel(logging.INFO)
            self.logger.propagate = False
            self._handler, self._handlers = handler, [handler]

    def line(
        self,
        *,
        method: str,
        route: str,
        status: int,
        latency_ms: float,
        request_id: str | None,
        user_id: int | None,
        origin_id: str | None = None,
    ) -> str:
        """``origin_id``: the id the request had before it took ``request_id`` (the front's
        own id, which its calls to the native API carried, before the horde request id)."""
        if self.format == "json":
            fields: dict[str, object] = {
                "ts": round(time.time(), 3),
                "service": self.service,
                "method": method,
                "route": route,
                "status": status,
                "latency_ms": round(latency_ms, 1),
                "request_id": request_id,
                "user_id": user_id,
            }
            if origin_id is not None:
                fields["origin_id"] = origin_id
            return json.dumps(fields, separators=(",", ":"))
        user = "-" if user_id is None else user_id
        origin = f" origin_id={origin_id}" if origin_id is not None else ""
        return (
            f"{self.service} {method} {route} {status} {latency_ms:.1f}ms "
            f"request_id={request_id or '-'} user={user}{origin}"
        )

    def emit(self, **fields: object) -> None:
        line = self.line(**fields)  # type: ignore[arg-type]
        if not self._write_direct(line):
            self.logger.info(line)

    def _write_direct(self, line: str) -> bool:
        """Write ``line`` as the handler this class installed would, without a LogRecord
        and the handler chain, the dearest part of a line (docs/performance.md; two lines
        a pop+submit cycle). False, nothing written, when the logger has other
        handlers or filters (an operator's, a test's) or the write failed: ``logging``
        then decides (and reports a failed write its way)."""
        handler, logger = self._handler, self.logger
        if handler is None or logger.handlers != self._handlers or logger.filters:
            return False
        if handler.filters or handler.level > logging.INFO:
            return False
        if not logger.isEnabledFor(logging.INFO):
            return True  # silenced
        try:
            with handler.lock or contextlib.nullcontext():
                handler.stream.write(line + handler.terminator)
                handler.stream.flush()
        except Exception:  # noqa: BLE001 - logging's handler reports it, as for any line
            return False
        return True
