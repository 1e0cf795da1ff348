"""The OpenAI response of a finished request, from the native chat status.

``Reply.from_status`` takes the generation that answered (state ok first, then censored);
``completion`` builds ``chat.completion`` with ``x_horde``; ``usage`` takes the worker's
counts and estimates the missing ones (``runtime.contract.messages.estimated_tokens`` of the
characters the contract counts: the prompt's as the context measure, the reply's as its charge),
marking them in ``x_horde.estimated_usage``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from generated.chat.names import (
    FINISH_CONTENT_FILTER,
    FINISH_STOP,
    FINISH_TOOL_CALLS,
    HORDE_INCLUDE_REASONING,
    PARAM_MESSAGES,
    REPLY_CONTENT,
    REPLY_REASONING_CONTENT,
    REPLY_TOOL_CALLS,
)
from generated.wire import ANSWERING_STATES, STATE_CENSORED
from generated.wire.front import ChatCompletion, ResponseMessage, Usage, XHorde
from generated.wire.native import ChatGeneration, ChatStatus
from runtime.contract.messages import estimated_tokens, text_chars
from runtime.contract.pricing import counted_chars
from runtime.contract.validator import horde_option

COMPLETION_ID_PREFIX = "chatcmpl-"
OBJECT_COMPLETION: Final = "chat.completion"
OBJECT_CHUNK: Final = "chat.completion.chunk"


@dataclass(frozen=True)
class Reply:
    """The answering generation of a done request."""

    request_id: str
    model: str
    content: str | None
    reasoning_content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    reported: dict[str, Any] = field(default_factory=dict)
    kudos: float = 0.0
    charge_basis: str = ""

    @classmethod
    def from_status(cls, request_id: str, status: ChatStatus) -> Reply | None:
        """The reply of a done status, or None when it holds no answering generation.

        The native API's JSON is read defensively: a key or shape its schema requires may
        still be missing, hence the checks the types call redundant (ignored by code)."""
        generations = [
            g
            for g in status.get("generations") or []
            if isinstance(g, dict)  # type: ignore[redundant-expr]  # not an object when malformed
        ]
        for state in ANSWERING_STATES:
            for gen in generations:
                if gen.get("state") == state:
                    return cls._of(request_id, status, gen)
        return None

    @classmethod
    def _of(cls, request_id: str, status: ChatStatus, gen: ChatGeneration) -> Reply:
        calls: list[dict[str, Any]] = [dict(c) for c in gen.get("tool_calls") or []]
        finish: str = gen.get("finish_reason") or (
            FINISH_TOOL_CALLS if calls else FINISH_STOP  # type: ignore[unreachable]  # absent from a malformed status
        )
        if gen.get("state") == STATE_CENSORED:
            finish = FINISH_CONTENT_FILTER
        return cls(
            request_id=request_id,
            model=str(gen.get("model") or ""),
            content=gen.get("content"),
            reasoning_content=gen.get("reasoning_content"),
            tool_calls=calls,
            finish_reason=finish,
            reported=dict(gen.get("usage") or {}),
            # what the request cost, the horde tax included: the native status's kudos
            kudos=float(status.get("kudos", gen.get("kudos", 0)) or 0),
            charge_basis=str(
                gen.get("charge_basis")
                or status.get("charge_basis")  # type: ignore[unreachable]  # absent from a malformed status
                or ""
            ),
        )

    def output_chars(self) -> int:
        """The reply's characters, counted as its charge counts them."""
        return counted_chars(
            {
                REPLY_CONTENT: self.content,
                REPLY_REASONING_CONTENT: self.reasoning_content,
                REPLY_TOOL_CALLS: self.tool_calls,
            }
        )


def usage(reply: Reply, request: dict[str, Any]) -> tuple[Usage, bool]:
    """OpenAI's usage from the worker's counts; the flag says a count was estimated."""
    reported = reply.reported
    estimated = False
    prompt = reported.get("prompt_tokens")
    if prompt is None:
        prompt, estimated = estimated_tokens(text_chars(request.get(PARAM_MESSAGES, []))), True
    completion = reported.get("completion_tokens")
    if completion is None:
        completion, estimated = estimated_tokens(reply.output_chars()), True
    result: Usage = {
        "prompt_tokens": int(prompt),
        "completion_tokens": int(completion),
        "total_tokens": int(prompt) + int(completion),
    }
    reasoning = reported.get("reasoning_tokens")
    if reasoning is None and reply.reasoning_content:
        reasoning, estimated = estimated_tokens(len(reply.reasoning_content)), True
    if reasoning is not None:
        result["completion_tokens_details"] = {"reasoning_tokens": int(reasoning)}
    return result, estimated


def x_horde(reply: Reply, estimated: bool) -> XHorde:
    return {
        "request_id": reply.request_id,
        "kudos": reply.kudos,
        "charge_basis": reply.charge_basis,  # type: ignore[typeddict-item]  # the native's, relayed
        "estimated_usage": estimated,
    }


def completion_id(request_id: str) -> str:
    return COMPLETION_ID_PREFIX + request_id


def shows_reasoning(request: dict[str, Any]) -> bool:
    return bool(horde_option(request, HORDE_INCLUDE_REASONING))


def completion(reply: Reply, request: dict[str, Any], created: int | None = None) -> ChatCompletion:
    """The ``chat.completion`` object of a finished request."""
    message: ResponseMessage = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.reasoning_content is not None and shows_reasoning(request):
        message["reasoning_content"] = reply.reasoning_content
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls  # type: ignore[typeddict-item]
    counts, estimated = usage(reply, request)
    return {
        "id": completion_id(reply.request_id),
        "object": OBJECT_COMPLETION,
        "created": int(time.time()) if created is None else created,
        "model": reply.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.finish_reason,  # type: ignore[typeddict-item]
                "logprobs": None,
            }
        ],
        "usage": counts,
        "x_horde": x_horde(reply, estimated),
    }
