"""runtime.observability.access_log.AccessLog: a line written straight to the stream of the
handler it installed (no LogRecord per request) is the line logging writes, and
anything an operator changes on the logger (a handler, a filter, a level) takes logging's
path again."""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Iterator

import pytest

from runtime.observability.access_log import AccessLog

FIELDS: dict[str, object] = {
    "method": "POST",
    "route": "/api/v2/generate/text/pop",
    "status": 200,
    "latency_ms": 1.25,
    "request_id": "abc",
    "user_id": 7,
}


@pytest.fixture
def access_log() -> Iterator[tuple[AccessLog, io.StringIO]]:
    service = f"test-{uuid.uuid4().hex[:8]}"  # a logger of its own: no handler yet
    log = AccessLog(service, "plain")
    stream = io.StringIO()
    assert log._handler is not None
    log._handler.setStream(stream)
    yield log, stream
    log.logger.handlers.clear()


def test_the_line_is_written_once_to_the_installed_handler_s_stream(
    access_log: tuple[AccessLog, io.StringIO],
) -> None:
    log, stream = access_log
    log.emit(**FIELDS)
    log.emit(**FIELDS)
    line = "native POST /api/v2/generate/text/pop 200 1.2ms request_id=abc user=7"
    assert stream.getvalue() == (line.replace("native", log.service) + "\n") * 2


def test_the_line_is_the_one_logging_writes(access_log: tuple[AccessLog, io.StringIO]) -> None:
    log, stream = access_log
    log.emit(**FIELDS)
    direct = stream.getvalue()
    stream.seek(0)
    stream.truncate()
    log.logger.addFilter(lambda record: True)  # any filter: logging's path
    log.emit(**FIELDS)
    assert stream.getvalue() == direct


def test_an_added_handler_gets_every_line(access_log: tuple[AccessLog, io.StringIO]) -> None:
    log, stream = access_log
    theirs = io.StringIO()
    log.logger.addHandler(logging.StreamHandler(theirs))
    log.emit(**FIELDS)
    assert theirs.getvalue() == stream.getvalue() != ""


def test_a_level_above_info_silences_it(access_log: tuple[AccessLog, io.StringIO]) -> None:
    log, stream = access_log
    log.logger.setLevel(logging.WARNING)  # the logger's level
    log.emit(**FIELDS)
    log.logger.setLevel(logging.INFO)
    assert log._handler is not None
    log._handler.setLevel(logging.ERROR)  # the handler's level
    log.emit(**FIELDS)
    assert stream.getvalue() == ""


def test_a_failed_write_is_logging_s_to_report(
    access_log: tuple[AccessLog, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    log, stream = access_log
    stream.close()  # writing raises ValueError
    reported: list[logging.LogRecord] = []
    assert log._handler is not None
    monkeypatch.setattr(log._handler, "handleError", reported.append)
    log.emit(**FIELDS)  # never raises into the request
    assert [r.getMessage() for r in reported] == [log.line(**FIELDS)]  # type: ignore[arg-type]
