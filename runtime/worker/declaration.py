"""What the worker declares on every pop, probed once at startup: nothing unchecked.

Each capability and guarantee is declared only when a probe against the backend showed it
(docs/design.md, "Features and guarantees"; the probes are ``probe_features``'s): a worker
that claimed what its backend does not do would be routed requests it then fails or, worse,
answers wrongly. ``probe`` finds the model, context and counter; ``pop_declaration`` builds
what every pop sends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_JOBS,
    DECL_CHAT_LIMITS,
    DECL_IMAGE_TRANSPORTS,
    DECL_MODEL_ID,
    DECL_PROMPT_JOBS,
    FEATURE_JSON_OBJECT,
    FEATURE_JSON_SCHEMA,
    FEATURE_PENALTIES,
    FEATURE_REASONING,
    FEATURE_SEED,
    FEATURE_TOOLS,
    FEATURE_VISION,
    GUARANTEE_JSON_OUTPUT_ENFORCED,
    GUARANTEE_JSON_SCHEMA_ENFORCED,
    GUARANTEE_PROMPT_OVERFLOW_REFUSED,
    GUARANTEE_TOOL_CHOICE_ENFORCED,
    GUARANTEE_TOOL_CHOICE_REQUIRED_ENFORCED,
    LIMIT_MAX_CONTEXT_LENGTH,
    LIMIT_MAX_LENGTH,
    PARAM_FREQUENCY_PENALTY,
    PARAM_MAX_TOKENS,
    PARAM_MESSAGES,
    PARAM_PRESENCE_PENALTY,
    PARAM_RESPONSE_FORMAT,
    PARAM_SEED,
    PARAM_TEMPERATURE,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    RESPONSE_FORMAT_JSON_OBJECT,
    RESPONSE_FORMAT_JSON_SCHEMA,
    SCOPE_PROMPT_OVERFLOW_REFUSED_EXCEPT_TOOLS,
)
from generated.errors import HordeError
from runtime.worker.backend import BackendClient
from runtime.worker.backend_kinds import (
    LLAMA_CPP,
    LLAMA_CPP_PYTHON,
    VLLM,
    WIRE_REQUIRED,
    BackendKind,
    backend_completion,
    backend_messages,
    chat_body,
    detect_kind,
)
from runtime.worker.config import WorkerConfig
from runtime.worker.counter import (
    Calibration,
    LlamaCppCounter,
    ModelTemplate,
    PromptCounter,
    TemplateCounter,
    VllmCounter,
    calibrate,
)
from runtime.worker.reply import ChatReply, parse_chat_completion
from runtime.worker.vision import VisionRefused, probe_vision

PROBE_CHAT = [{"role": "user", "content": "Answer with a flag in JSON."}]
FLAG_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
PROBE_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": name, "parameters": FLAG_SCHEMA}}
    for name in ("probe_flag", "probe_other_flag")
]
# Room for a grammar-constrained reply from a model whose weights may ramble.
PROBE_MAX_TOKENS = 300
PROBE_CALL = {
    "id": "call_probe",
    "type": "function",
    "function": {"name": "probe_flag", "arguments": '{"ok": true}'},
}
# A tool loop's second turn as the OpenAI SDK, LangChain and openai-agents send it back.
PROBE_TOOL_TURN: list[dict[str, Any]] = [
    *PROBE_CHAT,
    {"role": "assistant", "content": None, "tool_calls": [PROBE_CALL]},
    {"role": "tool", "tool_call_id": "call_probe", "content": '{"ok": true}'},
]
PENALTY_KINDS = (LLAMA_CPP, LLAMA_CPP_PYTHON, VLLM)
# What a worker stops declaring when its tool calls cannot be served.
TOOL_NAMES = (
    FEATURE_TOOLS,
    GUARANTEE_TOOL_CHOICE_ENFORCED,
    GUARANTEE_TOOL_CHOICE_REQUIRED_ENFORCED,
)


class WorkerStartupError(RuntimeError):
    """The worker cannot serve this backend as configured (the message says why)."""


@dataclass
class Probed:
    model_id: str
    kind: BackendKind
    context: int
    max_length: int
    calibration: Calibration
    features: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    image_tokens: int = 0
    """Context tokens the fit check counts per image (vision workers)."""

    @property
    def counter(self) -> PromptCounter:
        return self.calibration.counter


def _pick_model(client: BackendClient, wanted: str | None) -> dict[str, Any]:
    entries = client.models()
    if wanted is not None:
        for entry in entries:
            if entry.get("id") == wanted:
                return entry
        raise WorkerStartupError(f"the backend does not serve {wanted!r}")
    if len(entries) != 1:
        ids = [e.get("id") for e in entries]
        raise WorkerStartupError(f"the backend serves {ids}: choose one with --model")
    return entries[0]


def _context(client: BackendClient, kind: BackendKind, entry: dict[str, Any]) -> int | None:
    if isinstance(entry.get("max_model_len"), int):  # vLLM
        return int(entry["max_model_len"])
    props = client.try_json("GET", "/props")  # llama.cpp's server
    if isinstance(props, dict):
        settings = props.get("default_generation_settings") or {}
        n_ctx = settings.get("n_ctx", props.get("n_ctx"))
        if isinstance(n_ctx, int):
            return n_ctx
    kobold = client.try_json("GET", "/api/extra/true_max_context_length")
    if isinstance(kobold, dict) and isinstance(kobold.get("value"), int):
        return int(kobold["value"])
    return None


def _exact_counter(
    client: BackendClient, kind: BackendKind, model: str, config: WorkerConfig
) -> PromptCounter | None:
    if kind is LLAMA_CPP:
        return LlamaCppCounter(client)
    if kind is VLLM:
        return VllmCounter(client, model)
    if kind.count_route and config.gguf is not None:
        template = ModelTemplate.from_gguf(config.gguf)
        return TemplateCounter(client, kind.count_route, template) if template else None
    return None


def _ask(
    client: BackendClient, kind: BackendKind, model: str, payload: dict[str, Any]
) -> ChatReply | None:
    try:
        probe_payload = {PARAM_MAX_TOKENS: PROBE_MAX_TOKENS, PARAM_TEMPERATURE: 0, **payload}
        body = chat_body(kind, probe_payload, model)
        return parse_chat_completion(backend_completion(kind, probe_payload, client.chat(body)))
    except HordeError:
        return None


def _json(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except ValueError:
        return None


def _calls_named(reply: ChatReply | None, names: list[str]) -> bool:
    return bool(reply and reply.tool_calls) and all(
        c["function"]["name"] in names and isinstance(_json(c["function"]["arguments"]), dict)
        for c in reply.tool_calls  # type: ignore[union-attr]
    )


def probe_features(client: BackendClient, kind: BackendKind, model: str) -> list[str]:
    """The features and guarantees a probe showed, each on this evidence.

    tools: a call forced as dispatch sends a named function (``required``, one tool) comes
    back as that call, and a tool loop's second turn (content null beside tool_calls, then
    the tool's result, as the OpenAI SDK sends it) is answered (``tool_turn_refusal``: a
    backend refusing it declares no tools); the forced call is also tool_choice_enforced;
    tool_choice_required_enforced needs ``required`` with two tools to produce a call
    (on llama-cpp-python, through ``BackendKind``'s one-call grammar).
    json_object / json_schema: the content parses (and validates); json_output_enforced
    needs either, json_schema_enforced the schema. reasoning: the reply carried some. seed:
    the same seed gave the same reply. penalties: backends whose samplers implement OpenAI's
    (llama.cpp, llama-cpp-python, vLLM) that accepted them. prompt_overflow_refused and
    vision are ``probe``'s."""
    ask: Callable[[dict[str, Any]], ChatReply | None] = lambda extra: _ask(  # noqa: E731
        client, kind, model, {PARAM_MESSAGES: PROBE_CHAT, **extra}
    )
    found: list[str] = []
    one = ask({PARAM_TOOLS: PROBE_TOOLS[:1], PARAM_TOOL_CHOICE: WIRE_REQUIRED})
    if _calls_named(one, ["probe_flag"]):
        found += [FEATURE_TOOLS, GUARANTEE_TOOL_CHOICE_ENFORCED]
        two = ask({PARAM_TOOLS: PROBE_TOOLS, PARAM_TOOL_CHOICE: WIRE_REQUIRED})
        if _calls_named(two, [t["function"]["name"] for t in PROBE_TOOLS]):
            found.append(GUARANTEE_TOOL_CHOICE_REQUIRED_ENFORCED)
    as_object = ask({PARAM_RESPONSE_FORMAT: {"type": RESPONSE_FORMAT_JSON_OBJECT}})
    object_ok = as_object is not None and _json(as_object.content) is not None
    schema_format = {"name": "flag", "schema": FLAG_SCHEMA, "strict": True}
    as_schema = ask(
        {
            PARAM_RESPONSE_FORMAT: {
                "type": RESPONSE_FORMAT_JSON_SCHEMA,
                RESPONSE_FORMAT_JSON_SCHEMA: schema_format,
            }
        }
    )
    schema_ok = as_schema is not None and jsonschema.Draft202012Validator(FLAG_SCHEMA).is_valid(
        _json(as_schema.content)
    )
    if object_ok:
        found.append(FEATURE_JSON_OBJECT)
    if schema_ok:
        found += [FEATURE_JSON_SCHEMA, GUARANTEE_JSON_SCHEMA_ENFORCED]
    if object_ok or schema_ok:
        found.append(GUARANTEE_JSON_OUTPUT_ENFORCED)
    plain = ask({PARAM_SEED: 1234, PARAM_TEMPERATURE: 1})
    again = ask({PARAM_SEED: 1234, PARAM_TEMPERATURE: 1})
    if plain is not None and plain.reasoning_content:
        found.append(FEATURE_REASONING)
    if plain is not None and again is not None and plain.content == again.content:
        found.append(FEATURE_SEED)
    if kind in PENALTY_KINDS and ask({PARAM_FREQUENCY_PENALTY: 0.5, PARAM_PRESENCE_PENALTY: 0.5}):
        found.append(FEATURE_PENALTIES)
    return found


def tool_turn_refusal(client: BackendClient, kind: BackendKind, model: str) -> str | None:
    """Why the backend refused a tool-result turn sent in this kind's mapping; None: answered."""
    payload = {
        PARAM_MAX_TOKENS: PROBE_MAX_TOKENS,
        PARAM_TEMPERATURE: 0,
        PARAM_MESSAGES: PROBE_TOOL_TURN,
        PARAM_TOOLS: PROBE_TOOLS[:1],
    }
    try:
        parse_chat_completion(client.chat(chat_body(kind, payload, model)))
    except HordeError as exc:
        return str(exc)
    return None


def probe(client: BackendClient, config: WorkerConfig) -> Probed:
    """Probe the backend once: model, kind, context, counter, features and guarantees.

    prompt_overflow_refused: the counter was not short on the probe (counter.py); on the
    byte bound without --template-overhead it comes with prompt_overflow_refused_except_tools
    (the probe has no tools, so the bound does not cover a tool preamble: tools stay
    declared and only strict tool requests go elsewhere). vision: only with
    --vision (no backend route says a projector is loaded, and a text-only backend may answer
    an image part without seeing it) and a probe image answered; the prompt tokens with and
    without it give one image's cost in the context, which the fit check adds per image."""
    entry = _pick_model(client, config.model)
    model_id = str(entry["id"])
    kind = detect_kind(entry, config.backend_kind)
    context = config.context or _context(client, kind, entry)
    if context is None:
        raise WorkerStartupError(
            f"the {kind.name} backend reports its context on no route: pass --context N"
        )
    features = probe_features(client, kind, model_id)
    notes: list[str] = []
    refused = tool_turn_refusal(client, kind, model_id) if FEATURE_TOOLS in features else None
    if refused is not None:
        features = [f for f in features if f not in TOOL_NAMES]
        notes.append(f"tools not declared: the backend refused a tool-result turn ({refused})")
    exact = _exact_counter(client, kind, model_id, config)
    calibration = calibrate(
        exact,
        client,
        model_id,
        tool_overhead=config.template_overhead or 0,
        format_messages=lambda messages: backend_messages(kind, messages),
    )
    probed = Probed(
        model_id,
        kind,
        context,
        min(config.max_length, context),
        calibration,
        [],
        [calibration.note, *notes],
    )
    if calibration.not_short:
        features.append(GUARANTEE_PROMPT_OVERFLOW_REFUSED)
        if (
            calibration.counter.kind != "exact"
            and config.template_overhead is None
            and FEATURE_TOOLS in features
        ):
            # The probe has no tools, so the bound does not cover a tool preamble: tools stay
            # declared, the guarantee is withheld for tool requests only (its scope).
            features.append(SCOPE_PROMPT_OVERFLOW_REFUSED_EXCEPT_TOOLS)
            probed.notes.append(
                "tools declared without prompt_overflow_refused: the byte bound does not"
                " cover a tool preamble, so strict tool requests go to other workers and"
                " best_effort ones come here (pass --template-overhead N to cover it)"
            )
    if config.vision:  # the operator's word, checked: see runtime/worker/vision.py
        try:
            measured = probe_vision(client, kind, model_id)
        except VisionRefused as exc:
            raise WorkerStartupError(
                f"--vision: the backend refused a probe image ({exc})"
            ) from None
        probed.image_tokens = max(measured, config.image_tokens)
        features.append(FEATURE_VISION)
        probed.notes.append(f"vision: {probed.image_tokens} tokens counted per image")
    probed.features = features
    return probed


def pop_declaration(probed: Probed, config: WorkerConfig) -> dict[str, Any]:
    """The chat keys of every pop body."""
    return {
        DECL_CHAT_JOBS: True,
        DECL_PROMPT_JOBS: not config.chat_only,
        DECL_MODEL_ID: probed.model_id,
        DECL_CHAT_FEATURES: list(probed.features),
        DECL_CHAT_LIMITS: {
            LIMIT_MAX_CONTEXT_LENGTH: probed.context,
            LIMIT_MAX_LENGTH: probed.max_length,
        },
        DECL_IMAGE_TRANSPORTS: list(config.image_transports),
    }
