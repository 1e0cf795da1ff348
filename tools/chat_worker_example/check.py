"""Check an OpenAI-compatible backend before a chat worker goes online with it.

It runs worker.py's own probes and reports what they found: the model and its context, a
plain chat, each feature (a forced tool call, json_object, json_schema, seed), how the
backend's token count route and the byte bound compare with the backend's own
``usage.prompt_tokens`` on a probe conversation (exact, over by N, or short by N), the tool
preamble's size, and the declaration worker.py would send with the same options.

    python check.py --backend http://127.0.0.1:8080 [--context N] [--template-overhead N]
    python check.py --backend ... --json     # the same report as one JSON object
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worker import (  # worker.py beside this file
    MINIMAL,
    PROBE_CONVERSATION,
    PROBE_TOOLS,
    Backend,
    Counter,
    Fault,
    backend_body,
    calibrate,
    declare,
    find_model,
    llama_cpp_props,
    probe_features,
    reply_of,
)


def verdict(counted: int | None, usage: int | None) -> str:
    if counted is None or usage is None:
        return "not measured"
    if counted == usage:
        return "exact"
    return f"over by {counted - usage}" if counted > usage else f"short by {usage - counted}"


def count_route(backend: Backend, model: str, route: str | None) -> tuple[str, int | None]:
    """The backend's token count route on the probe conversation: (what was counted, count)."""
    if route is not None:
        try:
            return f"{route} render and tokenize", Counter(backend, route, model).count(
                PROBE_CONVERSATION, None
            )
        except Fault as exc:
            return f"{route} route failed ({exc})", None
    # llama-cpp-python counts text but renders no template on any route: only the message
    # texts can be counted, without the template's role markup.
    text = "\n".join(m["content"] for m in PROBE_CONVERSATION)
    try:
        count = backend.call("POST", "/extras/tokenize/count", {"input": text})["count"]
    except Fault:
        return "no token count route", None
    return "/extras/tokenize/count of the message texts (no template route)", int(count)


def check(backend: Backend, args: argparse.Namespace) -> dict[str, Any]:
    entry = find_model(backend, args.model)
    model = entry["id"]
    props = llama_cpp_props(backend)
    context = args.context or entry.get("max_model_len")
    context = context or (props or {}).get("default_generation_settings", {}).get("n_ctx")
    route = "llama.cpp" if props else "vllm" if entry.get("owned_by") == "vllm" else None
    plain = reply_of(backend.chat(backend_body(model, {"messages": MINIMAL, "max_tokens": 64})))
    features = probe_features(backend, model)
    usage = backend.usage_of(model, PROBE_CONVERSATION)
    counted_what, counted = count_route(backend, model, route)
    _, calibration = calibrate(backend, model, route, args.template_overhead)
    bound = Counter(backend, None, model)
    bound.fixed = backend.usage_of(model, MINIMAL) or 0
    forced = {"type": "function", "function": {"name": "flag"}}
    one_tool = {"tools": PROBE_TOOLS[:1], "tool_choice": forced}
    with_tools = backend.usage_of(model, PROBE_CONVERSATION, **one_tool)
    preamble = with_tools - usage if with_tools is not None and usage is not None else None
    limits = {"max_context_length": context or 0, "max_length": min(args.max_length, context or 0)}
    declaration = declare(model, features, calibration, limits, args.template_overhead)
    guarantees = [f for f in declaration["chat_features"] if f.endswith(("_enforced", "_refused"))]
    return {
        "model": model,
        "context": context,
        "plain_chat": {k: plain[k] for k in ("content", "finish_reason", "usage")},
        "features": features,
        "usage_prompt_tokens": usage,
        "count_route": {"what": counted_what, "count": counted, "verdict": verdict(counted, usage)},
        "byte_bound": {
            "count": bound.count(PROBE_CONVERSATION, None),
            "fixed": bound.fixed,
            "verdict": verdict(bound.count(PROBE_CONVERSATION, None), usage),
        },
        "counter": {**calibration, "verdict": verdict(calibration["counted"], usage)},
        "tool_preamble": preamble,
        "guarantees": guarantees,
        "declaration": declaration if context else None,
    }


def report(found: dict[str, Any], args: argparse.Namespace) -> list[str]:
    declaration, usage = found["declaration"], found["usage_prompt_tokens"]
    lines = [
        f"model: {found['model']}",
        f"context: {found['context'] or 'on no route: pass --context N'}",
        f"plain chat: {found['plain_chat']['content']!r} "
        f"(finish {found['plain_chat']['finish_reason']}, usage {found['plain_chat']['usage']})",
        f"features the probes showed: {', '.join(found['features']) or 'none'}",
        f"probe conversation: the backend counts {usage} prompt tokens (usage.prompt_tokens)",
        f"count route: {found['count_route']['what']}: {found['count_route']['count']} "
        f"-> {found['count_route']['verdict']}",
        f"byte bound: {found['byte_bound']['count']} (fixed part {found['byte_bound']['fixed']})"
        f" -> {found['byte_bound']['verdict']}",
        f"calibration: the worker counts with the {found['counter']['counter']} counter "
        f"-> {found['counter']['verdict']}",
        f"tool preamble: {found['tool_preamble']} tokens (prompt_tokens with one tool minus "
        "without)",
        f"guarantees it could declare: {', '.join(found['guarantees']) or 'none'}",
    ]
    if declaration is None:
        return [*lines, "declaration: none until the context is known (--context N)"]
    if found["counter"]["counter"] == "byte-bound" and args.template_overhead is None:
        lines.append(
            f"note: on the byte bound tools are declared only with --template-overhead "
            f"(measured here: {found['tool_preamble']})"
        )
    return [*lines, f"declaration: {json.dumps(declaration)}"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", required=True, help="the OpenAI-compatible server's URL")
    parser.add_argument("--model", help="the backend's model id (when it serves several)")
    parser.add_argument("--context", type=int, help="the backend's context in tokens")
    parser.add_argument("--max-length", type=int, default=512, help="longest reply, in tokens")
    parser.add_argument("--template-overhead", type=int, help="as worker.py would be given it")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    found = check(Backend(args.backend, 120.0), args)
    print(json.dumps(found) if args.json else "\n".join(report(found, args)))


if __name__ == "__main__":
    main()
