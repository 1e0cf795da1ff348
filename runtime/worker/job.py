"""One popped job: fit check, backend call, structured submit, or a fault with its reason.

A chat job's conversation goes to the backend as messages (the backend renders the model's
template), counted first: one that does not fit with its requested output is faulted with
prompt_overflow, never trimmed (``check_fit``). Stored messages and images are fetched first
(``fetch.job_messages``; images reach the backend as data URLs). Every failure is a fault
reason (generated.errors), and so is an unexpected exception, so no job is ever left held.
A streamed job takes ``progress`` (``ProgressCallback``), the seam delta streaming posts through.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol, cast

from generated.chat.names import (
    PARAM_MAX_TOKENS,
    PARAM_MESSAGES,
    PARAM_MODEL,
    PARAM_SEED,
    PARAM_STOP,
    PARAM_TEMPERATURE,
    PARAM_TOOLS,
    PARAM_TOP_P,
)
from generated.chat.tables import PAYLOAD_FIT_MAX_TOKENS, REPLY_RESERVE_TOKENS
from generated.errors import BackendInvalidReply, HordeError, PromptOverflow, UnservableJob
from generated.wire import STATE_OK
from generated.wire.native import PopOutput, ReportedUsage, SubmitInput, ToolCall
from runtime.worker.backend import BackendClient
from runtime.worker.backend_kinds import backend_completion, chat_body
from runtime.worker.counter import BoundedCounter, TextCounter
from runtime.worker.declaration import Probed
from runtime.worker.fetch import job_messages
from runtime.worker.horde import HordeClient
from runtime.worker.reply import ChatReply, StreamAccumulator, parse_chat_completion
from runtime.worker.vision import without_images

log = logging.getLogger("horde-chat.worker")


class ProgressCallback(Protocol):
    """``progress(content, reasoning) -> cancelled``: the text generated since the last call,
    split as the submitted reply will be (``reply.StreamAccumulator``: a ``<think>`` block
    in the content split off). Called about once a second; True means the client cancelled:
    the job stops and is not submitted."""

    def __call__(self, delta: str, reasoning: str = "", /) -> bool: ...


PROGRESS_INTERVAL_SECONDS = 1.0
TTL_MARGIN_SECONDS = 5.0
# Upstream's text payload keys (native text jobs, not the chat contract).
TEXT_PROMPT, TEXT_MAX_LENGTH, TEXT_STOP = "prompt", "max_length", "stop_sequence"


@dataclass(frozen=True)
class Job:
    id: str
    payload: dict[str, Any]
    is_chat: bool
    stream: bool
    ttl: float | None
    origin_id: str | None = None
    """The x-request-id of the call that submitted the request (the front's own id through
    the front): the job's log lines name it as request_id."""

    @classmethod
    def from_pop(cls, answer: PopOutput) -> Job | None:
        job_id = answer.get("id")
        if not job_id:
            return None
        ttl = answer.get("ttl")
        origin_id = answer.get("origin_id")
        return cls(
            id=str(job_id),
            payload=answer.get("payload") or {},
            is_chat=bool(answer.get("is_chat")),
            stream=bool(answer.get("stream")),
            ttl=float(ttl) if isinstance(ttl, int | float) else None,
            origin_id=origin_id if isinstance(origin_id, str) else None,
        )

    def describe(self) -> str:
        """How the job's log lines name it: its id and the request id it traces back to."""
        kind = "chat" if self.is_chat else "text"
        return f"job {self.id} ({kind}, request_id={self.origin_id or '-'})"


class JobRunner:
    def __init__(
        self, backend: BackendClient, horde: HordeClient, probed: Probed, timeout: float
    ) -> None:
        self.backend, self.horde, self.probed, self.timeout = backend, horde, probed, timeout

    def deadline(self, job: Job) -> float:
        """Seconds the backend gets: the worker's timeout, bounded by the job's TTL."""
        if job.ttl is None:
            return self.timeout
        return max(1.0, min(self.timeout, job.ttl - TTL_MARGIN_SECONDS))

    def run(self, job: Job, progress: ProgressCallback | None = None) -> bool:
        """Serve one job to the end: submitted or faulted. True when a reply was submitted.

        One log line when the job is taken and one when it ends (submitted, faulted with the
        reason's code, or cancelled), each naming the request id it traces back to."""
        log.info("%s: taken", job.describe())
        body: SubmitInput
        try:
            if job.is_chat:
                reply = self.chat_reply(job, progress)
                if reply is None:  # the client cancelled a streamed job: nothing to submit
                    log.info("%s: cancelled by its client, nothing to submit", job.describe())
                    return False
                body = submission(job.id, reply)
            else:
                body = {
                    "id": job.id,
                    "state": STATE_OK,
                    "generation": self.text_reply(job),
                }
        except HordeError as reason:
            log.info("%s: faulted: %s", job.describe(), reason.code)
            self.horde.fault(job.id, reason)
            return False
        except Exception as exc:  # a bug must still release the job, with the reason
            log.exception("%s: unexpected failure", job.describe())
            self.horde.fault(job.id, UnservableJob(detail=f"{type(exc).__name__}: {exc}"))
            return False
        delivered = self.horde.submit(body)
        log.info("%s: %s", job.describe(), "submitted" if delivered else "not delivered")
        return delivered

    def check_fit(
        self, body: dict[str, Any], *, fit_output: bool = False, exact: bool = True
    ) -> int:
        """Fault prompt_overflow when the conversation and its output do not fit the context.

        ``fit_output`` (the job's PAYLOAD_FIT_MAX_TOKENS: the client left max_tokens out, as
        much as fits): ``body``'s max_tokens is lowered to the room the count leaves, and
        only a room under REPLY_RESERVE_TOKENS faults. Otherwise max_tokens must fit whole.
        Returns the prompt's count; with ``exact`` False (the caller needs only the verdict),
        an upper bound that already leaves the room asked for is returned instead, and the
        backend's count is not asked (``BoundedCounter``: it saves a tokenize call of the
        backend's time a job). The verdict and max_tokens are the same either way:
        when the bound fits, so does the exact count, and the room it leaves covers max_tokens.
        Images are left out of the count and the probed per-image cost added.
        """
        text_only, images = without_images(body[PARAM_MESSAGES])
        tools = body.get(PARAM_TOOLS)
        wanted = body.get(PARAM_MAX_TOKENS) or 1
        counter = self.probed.counter
        image_cost = images * self.probed.image_tokens
        if not exact and isinstance(counter, BoundedCounter):
            bound = counter.upper_bound(text_only, tools)
            needed = max(wanted, REPLY_RESERVE_TOKENS) if fit_output else wanted
            if bound is not None and bound + image_cost + needed <= self.probed.context:
                if fit_output:
                    body[PARAM_MAX_TOKENS] = wanted
                return bound + image_cost
        counted = counter.count(text_only, tools) + image_cost
        if fit_output:
            room = self.probed.context - counted
            if room >= REPLY_RESERVE_TOKENS:
                body[PARAM_MAX_TOKENS] = min(wanted, room)
                return counted
            wanted = REPLY_RESERVE_TOKENS
        needed = counted + wanted
        if needed > self.probed.context:
            raise PromptOverflow(
                needed=needed, counter=self.probed.counter.kind, context=self.probed.context
            )
        return counted

    def chat_reply(self, job: Job, progress: ProgressCallback | None) -> ChatReply | None:
        messages = job_messages(job.payload, timeout=self.deadline(job))
        payload = {**job.payload, PARAM_MESSAGES: messages}
        streamed = progress is not None and job.stream
        body = chat_body(self.probed.kind, payload, self.probed.model_id, stream=streamed)
        fit_output = payload.get(PAYLOAD_FIT_MAX_TOKENS) is True
        # a streamed reply's usage takes the prompt's exact count (counted_usage)
        counted = self.check_fit(body, fit_output=fit_output, exact=streamed)
        if not streamed:
            completion = self.backend.chat(body, timeout=self.deadline(job))
            return parse_chat_completion(backend_completion(self.probed.kind, payload, completion))
        assert progress is not None
        reply = self._streamed(job, body, progress)
        return self.counted_usage(reply, counted) if reply is not None else None

    def counted_usage(self, reply: ChatReply, prompt_tokens: int) -> ChatReply:
        """A streamed reply's usage where the backend's stream reported none (llama-cpp-python
        sends no usage chunk): the worker's own counts with an exact counter, the prompt's
        from the fit check and the reply's by tokenizing its text, which are the numbers
        the backend reports for the same reply unstreamed."""
        counter = self.probed.counter
        usage = dict(reply.usage)
        if counter.kind != "exact":
            return reply
        if usage.get("prompt_tokens") is None:
            usage["prompt_tokens"] = prompt_tokens
        if usage.get("completion_tokens") is None and isinstance(counter, TextCounter):
            text = (reply.reasoning_content or "") + (reply.content or "")
            usage["completion_tokens"] = counter.count_text(text) if text else 0
        return dataclasses.replace(reply, usage=usage)

    def _streamed(
        self, job: Job, body: dict[str, Any], progress: ProgressCallback
    ) -> ChatReply | None:
        folded = StreamAccumulator()
        content: list[str] = []
        reasoning: list[str] = []
        cancelled = False
        last_post = time.monotonic()

        def post() -> bool:
            thought = "".join(reasoning)  # a callback for content alone is called as before
            answer = progress("".join(content), thought) if thought else progress("".join(content))
            content.clear()
            reasoning.clear()
            return answer

        def on_event(chunk: dict[str, Any]) -> bool:
            nonlocal cancelled, last_post
            added = folded.add_parts(chunk)
            content.append(added.content)
            reasoning.append(added.reasoning)
            if time.monotonic() - last_post >= PROGRESS_INTERVAL_SECONDS and (
                any(content) or any(reasoning)
            ):
                cancelled = post()
                last_post = time.monotonic()
            return not cancelled

        self.backend.stream_chat(body, on_event, timeout=self.deadline(job))
        if cancelled:
            return None
        if (any(content) or any(reasoning)) and post():
            return None
        completion = backend_completion(self.probed.kind, job.payload, folded.completion())
        return parse_chat_completion(completion, split_think=False)

    def text_reply(self, job: Job) -> str:
        payload = job.payload
        if not isinstance(payload.get(TEXT_PROMPT), str):
            raise UnservableJob(detail="the text job carries no prompt")
        body: dict[str, Any] = {
            PARAM_MODEL: self.probed.model_id,
            TEXT_PROMPT: payload[TEXT_PROMPT],
        }
        if payload.get(TEXT_MAX_LENGTH):
            body[PARAM_MAX_TOKENS] = payload[TEXT_MAX_LENGTH]
        for key in (PARAM_TEMPERATURE, PARAM_TOP_P, PARAM_SEED):
            if payload.get(key) is not None:
                body[key] = payload[key]
        if payload.get(TEXT_STOP):
            body[PARAM_STOP] = payload[TEXT_STOP]
        answer = self.backend.complete(body, timeout=self.deadline(job))
        choices = answer.get("choices") or []
        text = choices[0].get("text") if choices and isinstance(choices[0], dict) else None
        if not isinstance(text, str):
            raise BackendInvalidReply(detail="the completion has no text")
        return text


def submission(job_id: str, reply: ChatReply) -> SubmitInput:
    """The structured chat submit (SubmitInput of spec/api/native.yaml)."""
    return {
        "id": job_id,
        "state": STATE_OK,
        "content": reply.content,
        "reasoning_content": reply.reasoning_content,
        # reply.py normalised the calls to OpenAI's shape and the counts to ints or None
        "tool_calls": cast(list[ToolCall], reply.tool_calls),
        # parse_chat_completion refuses a finish reason outside FINISH_REASONS, the enum here
        "finish_reason": reply.finish_reason,  # type: ignore[typeddict-item]
        "usage": cast(ReportedUsage, reply.usage),
    }
