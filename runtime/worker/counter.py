"""Prompt fit: how many tokens a conversation takes on this backend, never fewer than it does.

An *exact* counter renders the conversation with the model's template and tokenizes it
through the backend (llama-cpp-python, koboldcpp, llama.cpp's server, vLLM). Otherwise the
*byte bound* counts a token per UTF-8 byte of the messages' JSON (a byte-level BPE emits at
least a byte a token), plus the template's probed fixed part, plus ``--template-overhead``
with tools (docs/design.md, "Prompt fit on the worker"). :func:`calibrate` checks a counter
against the backend's own ``usage.prompt_tokens`` at startup.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from generated.chat.names import (
    PARAM_MAX_TOKENS,
    PARAM_MESSAGES,
    PARAM_MODEL,
    PARAM_TEMPERATURE,
    PARAM_TOOLS,
    REPLY_USAGE,
    ROLE_ASSISTANT,
    ROLE_SYSTEM,
    ROLE_USER,
)
from runtime.worker.backend import BackendClient

if TYPE_CHECKING:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

# A probe conversation with several turns, a system prompt and text outside ASCII.
PROBE_MESSAGES: list[dict[str, Any]] = [
    {"role": ROLE_SYSTEM, "content": "You are terse."},
    {"role": ROLE_USER, "content": "Wie spät ist es? 日本語で 🙂"},
    {"role": ROLE_ASSISTANT, "content": "Keine Ahnung."},
    {"role": ROLE_USER, "content": "Then tell me who you are."},
]
MINIMAL_MESSAGES: list[dict[str, Any]] = [{"role": ROLE_USER, "content": "."}]


class PromptCounter(Protocol):
    @property
    def kind(self) -> str: ...

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        """Tokens the prompt takes (an upper bound where not exact)."""
        ...


@runtime_checkable
class TextCounter(Protocol):
    """An exact counter that also tokenizes a reply's text (a streamed reply's usage when
    the backend reports none in the stream)."""

    def count_text(self, text: str) -> int:
        """Tokens ``text`` takes, without the special tokens a prompt would get."""
        ...


@runtime_checkable
class BoundedCounter(Protocol):
    """An exact counter that can also give a cheap upper bound, without the backend."""

    def upper_bound(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> int | None:
        """Tokens the prompt takes at most (None when no bound is known for this model)."""
        ...


BYTE_BOUNDED_TOKENIZERS = frozenset({"gpt2", "llama"})
"""GGUF tokenizer models (``tokenizer.ggml.model``) whose every token covers at least one
UTF-8 byte of the text it tokenizes: byte-level BPE (gpt2) and SentencePiece (llama: a
token covers at least one character, a byte-fallback token one byte). Not the others: a
tokenizer that normalizes its text first (UGM's charsmap, NFKC) may expand it."""
BOUND_EXTRA_TOKENS = 3
"""What a byte-bounded tokenizer adds to a text's bytes at most: a BOS and an EOS token
(when the model asks for them) and SentencePiece's space prefix."""


@dataclass(frozen=True)
class ModelTemplate:
    """A model's chat template, the texts of its BOS and EOS tokens, and its tokenizer's
    model (GGUF ``tokenizer.ggml.model``: gpt2, llama, t5, ...; "" when not stated)."""

    template: str
    bos_token: str
    eos_token: str
    tokenizer_model: str = ""

    @classmethod
    def from_gguf(cls, path: Path) -> ModelTemplate | None:
        import gguf

        reader = gguf.GGUFReader(str(path))

        def field(key: str) -> Any:
            found = reader.fields.get(key)
            return found.contents() if found is not None else None

        template = field("tokenizer.chat_template")
        tokens = field("tokenizer.ggml.tokens") or []
        if not isinstance(template, str) or not tokens:
            return None

        def token(key: str) -> str:
            index = field(key)
            return tokens[index] if isinstance(index, int) and index < len(tokens) else ""

        model = field("tokenizer.ggml.model")
        return cls(
            template,
            token("tokenizer.ggml.bos_token_id"),
            token("tokenizer.ggml.eos_token_id"),
            model if isinstance(model, str) else "",
        )

    @cached_property
    def formatter(self) -> Jinja2ChatFormatter:
        """The template compiled once: compiling it on every job's fit check was dear
        (docs/performance.md); rendering a compiled template is thread-safe."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        return Jinja2ChatFormatter(
            self.template, eos_token=self.eos_token, bos_token=self.bos_token
        )

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        # llama_cpp types messages and tools as its own TypedDicts; these are the same JSON.
        return self.formatter(messages=messages, tools=tools).prompt  # type: ignore[arg-type]


class TemplateCounter:
    """Local render with the model's template, tokenized by the backend's count route."""

    kind = "exact"

    def __init__(self, client: BackendClient, route: str, template: ModelTemplate) -> None:
        self.client, self.route, self.template = client, route, template

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        text = self.template.render(messages, tools)
        return self._tokens(text)

    def upper_bound(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> int | None:
        """The rendered prompt's UTF-8 bytes plus ``BOUND_EXTRA_TOKENS``, for a tokenizer in
        ``BYTE_BOUNDED_TOKENIZERS``: never fewer than the count route's tokens, and no
        backend call (the render is local)."""
        if self.template.tokenizer_model not in BYTE_BOUNDED_TOKENIZERS:
            return None
        text = self.template.render(messages, tools)
        return len(text.encode("utf-8")) + BOUND_EXTRA_TOKENS

    def count_text(self, text: str) -> int:
        # the count route adds a BOS when the model asks for one: the empty text's count
        return self._tokens(text) - self._tokens("")

    def _tokens(self, text: str) -> int:
        if self.route.startswith("/api/extra"):  # koboldcpp
            return int(self.client.request_json("POST", self.route, {"prompt": text})["value"])
        return int(self.client.request_json("POST", self.route, {"input": text})["count"])


class LlamaCppCounter:
    """llama.cpp's server renders (``/apply-template``) and tokenizes (``/tokenize``)."""

    kind = "exact"

    def __init__(self, client: BackendClient) -> None:
        self.client = client

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        body: dict[str, Any] = {PARAM_MESSAGES: messages, **({PARAM_TOOLS: tools} if tools else {})}
        prompt = self.client.request_json("POST", "/apply-template", body)["prompt"]
        tokens = self.client.request_json(
            "POST", "/tokenize", {"content": prompt, "add_special": True}
        )["tokens"]
        return len(tokens)

    def count_text(self, text: str) -> int:
        body = {"content": text, "add_special": False}
        return len(self.client.request_json("POST", "/tokenize", body)["tokens"])


class VllmCounter:
    """vLLM's ``/tokenize`` applies the chat template itself."""

    kind = "exact"

    def __init__(self, client: BackendClient, model: str) -> None:
        self.client, self.model = client, model

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        body: dict[str, Any] = {
            PARAM_MODEL: self.model,
            PARAM_MESSAGES: messages,
            "add_generation_prompt": True,
            **({PARAM_TOOLS: tools} if tools else {}),
        }
        return int(self.client.request_json("POST", "/tokenize", body)["count"])

    def count_text(self, text: str) -> int:
        body = {PARAM_MODEL: self.model, "prompt": text, "add_special_tokens": False}
        return int(self.client.request_json("POST", "/tokenize", body)["count"])


@dataclass(frozen=True)
class ByteBoundCounter:
    """One token per UTF-8 byte of the JSON, plus the fixed part, plus the tool overhead."""

    fixed: int
    tool_overhead: int = 0
    kind: str = "byte-bound"

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        total = len(json.dumps(messages, ensure_ascii=False).encode("utf-8")) + self.fixed
        if tools:
            total += len(json.dumps(tools, ensure_ascii=False).encode("utf-8"))
            total += self.tool_overhead
        return total


@dataclass(frozen=True)
class Calibration:
    """The counter chosen at startup, and whether it backs prompt_overflow_refused."""

    counter: PromptCounter
    probe_count: int | None
    probe_usage: int | None
    not_short: bool
    note: str


def prompt_tokens_of(
    client: BackendClient, model: str, messages: list[dict[str, Any]]
) -> int | None:
    """The backend's own usage.prompt_tokens for a conversation (None when unreported)."""
    body = {PARAM_MODEL: model, PARAM_MESSAGES: messages, PARAM_MAX_TOKENS: 1, PARAM_TEMPERATURE: 0}
    usage = client.chat(body).get(REPLY_USAGE) or {}
    value = usage.get("prompt_tokens")
    return value if isinstance(value, int) else None


def calibrate(
    exact: PromptCounter | None,
    client: BackendClient,
    model: str,
    *,
    tool_overhead: int,
    format_messages: Any = None,
) -> Calibration:
    """Try the exact counter, else the byte bound; each must not be short on the probe."""
    shape = format_messages or (lambda m: m)
    usage = prompt_tokens_of(client, model, shape(PROBE_MESSAGES))
    if usage is None:
        bound = ByteBoundCounter(0, tool_overhead)
        return Calibration(bound, None, None, False, "the backend reports no usage")
    if exact is not None:
        try:
            counted = exact.count(shape(PROBE_MESSAGES), None)
        except Exception as exc:  # a missing or failing route: fall back to the bound
            note = f"exact counter failed ({exc}); "
        else:
            if counted >= usage:
                return Calibration(exact, counted, usage, True, "exact counter, not short")
            note = f"exact counter short ({counted} < {usage}); "
    else:
        note = "no exact counter for this backend; "
    fixed = prompt_tokens_of(client, model, shape(MINIMAL_MESSAGES)) or 0
    bound = ByteBoundCounter(fixed, tool_overhead)
    counted = bound.count(shape(PROBE_MESSAGES), None)
    ok = counted >= usage
    return Calibration(bound, counted, usage, ok, note + f"byte bound (fixed part {fixed})")
