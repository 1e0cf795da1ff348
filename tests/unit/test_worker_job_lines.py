"""The worker's lines for a job (taken, and how it ended) name the request id the pop handed
out, and ``horde-chat up``'s demo worker shows them on the console."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from generated.errors import PromptOverflow
from runtime.worker import demo
from runtime.worker.job import Job, JobRunner
from runtime.worker.job import log as job_log


@pytest.fixture
def bare_worker_logger() -> Iterator[logging.Logger]:
    """The worker's logger with no handler (as on ``horde-chat up``), restored after."""
    logger = logging.getLogger(job_log.name)
    saved = (list(logger.handlers), logger.level)
    logger.handlers.clear()
    try:
        yield logger
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])


class Horde:
    """The native API as the runner sees it: what it was told."""

    def __init__(self) -> None:
        self.faults: list[tuple[str, str]] = []
        self.submitted: list[Any] = []

    def fault(self, job_id: str, reason: Any) -> None:
        self.faults.append((job_id, reason.code))

    def submit(self, body: Any) -> bool:
        self.submitted.append(body)
        return True


def _runner(horde: Horde) -> JobRunner:
    return JobRunner(backend=None, horde=horde, probed=None, timeout=5)  # type: ignore[arg-type]


def test_a_popped_job_keeps_the_origin_id_and_its_lines_name_it(
    bare_worker_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = io.StringIO()
    demo.show_job_lines(stream)
    demo.show_job_lines(stream)  # once only
    assert len(bare_worker_logger.handlers) == 1
    job = Job.from_pop(
        {
            "id": "g-1",
            "ids": ["g-1"],
            "skipped": {},
            "payload": {},
            "is_chat": True,
            "origin_id": "front-abc",
        }
    )
    assert job is not None
    assert job.origin_id == "front-abc"
    horde = Horde()
    runner = _runner(horde)

    def overflow(job: Job, progress: Any) -> None:
        raise PromptOverflow(needed=5000, counter="exact", context=4096)

    monkeypatch.setattr(runner, "chat_reply", overflow)
    assert runner.run(job) is False
    assert horde.faults == [("g-1", "prompt_overflow")]
    assert stream.getvalue().splitlines() == [
        "worker job g-1 (chat, request_id=front-abc): taken",
        "worker job g-1 (chat, request_id=front-abc): faulted: prompt_overflow",
    ]


def test_a_job_without_an_origin_id_says_so(bare_worker_logger: logging.Logger) -> None:
    stream = io.StringIO()
    demo.show_job_lines(stream)
    job = Job.from_pop({"id": "g-2", "ids": ["g-2"], "skipped": {}, "payload": {}})
    assert job is not None
    assert job.origin_id is None
    horde = Horde()
    runner = _runner(horde)
    runner.text_reply = lambda job: "The end."  # type: ignore[method-assign]
    assert runner.run(job) is True
    assert stream.getvalue().splitlines() == [
        "worker job g-2 (text, request_id=-): taken",
        "worker job g-2 (text, request_id=-): submitted",
    ]
