"""The front's parser processes are all started with their pool, however the submits of
its first bodies interleave with the processes' answers."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import pytest

from runtime.front.admission import Parser

pytestmark = [pytest.mark.integration]


@pytest.fixture
def submits_answered_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each submit returns only once its task is done: as when the thread submitting
    ``open``'s tasks is held up (a busy machine) until the first process has answered, so
    that process is idle when the next task is submitted."""
    submit = ProcessPoolExecutor.submit

    def answered(self: ProcessPoolExecutor, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        future = submit(self, fn, *args)
        future.result(timeout=60)
        return future

    monkeypatch.setattr(ProcessPoolExecutor, "submit", answered)


def test_every_parser_process_starts_even_when_the_first_answers_before_the_next_submit(
    submits_answered_at_once: None,
) -> None:
    # Before: the second submit found the first process idle and started none, so the
    # front ran on one parser process of two (and a test waiting for two waited in vain).
    parser = Parser(processes=2)
    parser.open()
    try:
        assert len(parser.pids()) == 2
    finally:
        parser.close()
