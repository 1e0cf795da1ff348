"""The worker's progress posts of a streamed job: the ``progress`` callback of
``runtime.worker.job``, posting to ``generate/text/progress``.

The poster keeps the whole text generated so far and how much of it the Horde accepted, so
every post carries exactly the rest, and a lost acknowledgement (409) or a broken connection
costs a repost, never text (``ProgressPoster``). ``progress_for(horde)`` is the
``WorkerLoop``'s ``progress_for``: a poster for every job the pop marked ``stream: true``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

import httpx

from generated.routes import ROUTES
from generated.streaming import (
    RESYNC_LAST_SEQ,
    RESYNC_POSTED_CHARS,
    RESYNC_POSTED_REASONING_CHARS,
)
from generated.wire.native import ProgressInput, ProgressOutput
from runtime.worker.horde import HordeClient
from runtime.worker.job import Job, ProgressCallback

log = logging.getLogger("horde-chat.worker")

OPERATION = "text_progress"
RESYNC_ATTEMPTS = 3


class ProgressPoster:
    """``poster(delta, reasoning) -> cancelled`` for one streamed generation.

    It keeps content and reasoning apart, as the submitted reply splits them, and how much
    of each the Horde accepted; a post carries ``delta`` (content) and ``reasoning`` (only
    when there is some) after the accepted part. 200: accepted (``cancelled: true``: stop,
    do not submit). 409 (a gap, e.g. a lost acknowledgement): the body's ``last_seq``,
    ``posted_chars`` and ``posted_reasoning_chars`` say where the Horde is; it resumes from
    there. 413 (the progress cap): posts stop, generation goes on, the reply is submitted. A
    broken connection keeps the text for the next call; any other refusal (the lease ended,
    a wrong key) stops posting, since the submit decides the job's fate."""

    def __init__(self, http: httpx.Client, generation_id: str) -> None:
        self.http = http
        self.generation_id = generation_id
        self.path = ROUTES[OPERATION].path
        self.text = ""
        self.reasoning = ""
        self.accepted_chars = 0
        self.accepted_reasoning_chars = 0
        self.next_seq = 0
        self.stopped = False
        self.cancelled = False

    def __call__(self, delta: str, reasoning: str = "", /) -> bool:
        self.text += delta
        self.reasoning += reasoning
        if self.cancelled or self.stopped:
            return self.cancelled
        for _ in range(RESYNC_ATTEMPTS):
            body: ProgressInput = {
                "id": self.generation_id,
                "seq": self.next_seq,
                "delta": self.text[self.accepted_chars :],
            }
            if len(self.reasoning) > self.accepted_reasoning_chars:
                body["reasoning"] = self.reasoning[self.accepted_reasoning_chars :]
            try:
                response = self.http.post(self.path, json=body)
            except httpx.TransportError as exc:
                log.info("job %s: progress post failed (%s); kept", self.generation_id, exc)
                return False
            answer = response.json() if response.content else {}
            if response.status_code == 200:
                ack = cast(ProgressOutput, answer)
                self.accepted_chars = len(self.text)
                self.accepted_reasoning_chars = len(self.reasoning)
                self.next_seq = int(ack["last_seq"]) + 1
                self.cancelled = bool(ack["cancelled"])
                return self.cancelled
            if response.status_code == 409 and RESYNC_LAST_SEQ in answer:
                self.next_seq = int(answer[RESYNC_LAST_SEQ]) + 1
                self.accepted_chars = min(int(answer[RESYNC_POSTED_CHARS]), len(self.text))
                posted_reasoning = int(answer.get(RESYNC_POSTED_REASONING_CHARS) or 0)
                self.accepted_reasoning_chars = min(posted_reasoning, len(self.reasoning))
                continue
            self.stopped = True
            log.info(
                "job %s: progress posts stop: %s %s",
                self.generation_id,
                response.status_code,
                response.text[:200],
            )
            return False
        return False


def progress_for(horde: HordeClient) -> Callable[[Job], ProgressCallback | None]:
    """A ProgressPoster on ``horde``'s client for each streamed job, None for the others."""

    def poster(job: Job) -> ProgressCallback | None:
        return ProgressPoster(horde.http, job.id) if job.stream else None

    return poster
