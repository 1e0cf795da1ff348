"""A minimal horde-chat worker: one file, the standard library and httpx.

It serves chat jobs from a horde's native API with any OpenAI-compatible backend
(llama.cpp's server, llama-cpp-python, vLLM, ...). The guide is docs/chat-worker-guide.md.

* It renders nothing: the backend applies the model's own chat template to the messages.
* It declares on every pop only what its probes showed at startup.
* It counts every conversation before sending it, with the backend's exact counter
  (llama.cpp ``/apply-template`` + ``/tokenize``, vLLM ``/tokenize``) or the byte bound,
  and declares ``prompt_overflow_refused`` only when that count was not short of the
  backend's ``usage.prompt_tokens`` on a probe conversation.
* A conversation that does not fit is faulted with ``prompt_overflow``, never trimmed.
* The reply is submitted structured: content, tool_calls, finish_reason, usage.

    python worker.py --horde http://127.0.0.1:7001 --api-key KEY \\
        --backend http://127.0.0.1:8080 --context 2048
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
from typing import Any

import httpx

PROBE_CHAT = [{"role": "user", "content": "Answer with a flag in JSON."}]
PROBE_CONVERSATION = [  # several turns, a system prompt, text outside ASCII
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Wie spät ist es? 日本語で 🙂"},
    {"role": "assistant", "content": "Keine Ahnung."},
    {"role": "user", "content": "Then tell me who you are."},
]
MINIMAL = [{"role": "user", "content": "."}]
FLAG = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
PROBE_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": FLAG}} for n in ("flag", "other")
]
TOOL_FEATURES = ("tools", "tool_choice_enforced", "tool_choice_required_enforced")
# The OpenAI fields of a job's payload this worker passes on to the backend.
FORWARDED = (
    "max_tokens", "temperature", "top_p", "stop", "seed", "frequency_penalty",
    "presence_penalty", "tools", "tool_choice", "parallel_tool_calls", "response_format",
)  # fmt: skip
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")
INVALID = "The backend's reply cannot be submitted: "
UNSERVABLE = "This worker cannot serve the job: "
# The client left max_tokens out ("as much as fits"): the job says fit_max_tokens, and its
# max_tokens may be lowered to the room the count leaves, down to this reserve
# (spec/workers/limits.yaml, absent_max_tokens).
FIT_FLAG, REPLY_RESERVE_TOKENS = "fit_max_tokens", 64


class Fault(Exception):
    """A reason to fault a job: a code from the horde's fault reasons, and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


class Backend:
    """An OpenAI-compatible server at ``root`` (without ``/v1``)."""

    def __init__(self, root: str, timeout: float) -> None:
        self.timeout = timeout
        self.http = httpx.Client(base_url=root.rstrip("/").removesuffix("/v1"), timeout=timeout)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = self.http.request(method, path, json=body)
        except httpx.TimeoutException:
            message = f"The backend gave no reply within {self.timeout} seconds."
            raise Fault("backend_timeout", message) from None
        except httpx.TransportError as exc:
            raise Fault("backend_unreachable", f"The backend could not be reached: {exc}") from None
        if response.status_code >= 400:
            detail = response.text[:300]
            raise Fault("backend_error", f"The backend answered {response.status_code}: {detail}")
        try:
            return response.json()
        except ValueError:
            raise Fault("backend_invalid_reply", f"{INVALID}{path} answered no JSON") from None

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "/v1/chat/completions", body)

    def usage_of(self, model: str, messages: list[dict[str, Any]], **extra: Any) -> int | None:
        """The backend's own usage.prompt_tokens for a conversation."""
        body = {"model": model, "messages": messages, "max_tokens": 1, "temperature": 0, **extra}
        value = (self.chat(body).get("usage") or {}).get("prompt_tokens")
        return value if isinstance(value, int) else None


def json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


class Counter:
    """Tokens a conversation takes: exact where the backend renders and tokenizes it, else the
    byte bound (a byte-level tokenizer emits at least one byte per token, so the JSON's bytes
    bound the text's tokens; ``fixed`` is the template's fixed part, ``tool_overhead`` the
    operator's --template-overhead for a tool preamble the probe does not measure)."""

    def __init__(self, backend: Backend, route: str | None, model: str) -> None:
        self.backend, self.route, self.model = backend, route, model
        self.kind = "exact" if route else "byte-bound"
        self.fixed = self.tool_overhead = 0

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        with_tools = {"tools": tools} if tools else {}
        if self.route == "llama.cpp":
            body = {"messages": messages, **with_tools}
            prompt = self.backend.call("POST", "/apply-template", body)["prompt"]
            tokens = {"content": prompt, "add_special": True}
            return len(self.backend.call("POST", "/tokenize", tokens)["tokens"])
        if self.route == "vllm":
            body = {"model": self.model, "messages": messages, "add_generation_prompt": True}
            return int(self.backend.call("POST", "/tokenize", {**body, **with_tools})["count"])
        total = json_bytes(messages) + self.fixed
        return total + (json_bytes(tools) + self.tool_overhead if tools else 0)


def joined(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Text-only content part lists as one string (some templates take only strings), and
    an assistant's null content beside its tool calls as "" (llama-cpp-python answers 500 to
    null content; every backend takes the empty string)."""
    out = []
    for m in messages:
        parts = m.get("content")
        if isinstance(parts, list) and all(p.get("type") == "text" for p in parts):
            m = {**m, "content": "".join(p.get("text", "") for p in parts)}
        elif parts is None and m.get("role") == "assistant":
            m = {**m, "content": ""}
        out.append(m)
    return out


def backend_body(model: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The job's payload as the backend's request. A choice forced among one tool goes as
    that tool by name: the same thing in OpenAI's terms, and every backend takes a name."""
    body = {"model": model, "messages": joined(payload["messages"])}
    body.update({k: payload[k] for k in FORWARDED if payload.get(k) is not None})
    if body.get("tool_choice") == "required" and len(body.get("tools", [])) == 1:
        name = body["tools"][0]["function"]["name"]
        body["tool_choice"] = {"type": "function", "function": {"name": name}}
    return body


def reply_of(answer: dict[str, Any]) -> dict[str, Any]:
    """A chat completion -> the structured submit's fields."""
    try:
        choice = answer["choices"][0]
        message = choice.get("message") or {}
    except (KeyError, IndexError, TypeError):
        raise Fault("backend_invalid_reply", f"{INVALID}the completion has no choice") from None
    calls = []
    for raw in message.get("tool_calls") or []:
        function = raw.get("function") or {}
        if not function.get("name"):
            raise Fault("backend_invalid_reply", f"{INVALID}a tool call without a name")
        args = function.get("arguments")
        args = args if isinstance(args, str) else json.dumps(args)  # OpenAI: a JSON string
        call_id = raw.get("id") or f"call_{uuid.uuid4().hex[:24]}"
        call = {"name": function["name"], "arguments": args}
        calls.append({"id": call_id, "type": "function", "function": call})
    finish = choice.get("finish_reason")
    if finish not in FINISH_REASONS:
        raise Fault("backend_invalid_reply", f"{INVALID}finish_reason {finish!r}")
    usage = answer.get("usage") or {}
    return {
        "content": (message.get("content") or None) if calls else message.get("content"),
        "reasoning_content": message.get("reasoning_content") or message.get("reasoning"),
        "tool_calls": calls,
        "finish_reason": "tool_calls" if calls and finish == "stop" else finish,
        "usage": {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")},
    }


def parsed(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def find_model(backend: Backend, wanted: str | None) -> dict[str, Any]:
    models = backend.call("GET", "/v1/models")["data"]
    found = [m for m in models if m["id"] == wanted] if wanted else models
    if len(found) != 1:
        sys.exit(f"choose a model with --model among {[m['id'] for m in models]}")
    return found[0]


def llama_cpp_props(backend: Backend) -> dict[str, Any] | None:
    """llama.cpp's server answers /props (its context; it also renders and tokenizes)."""
    try:
        props = backend.call("GET", "/props")
    except Fault:
        return None
    return props if isinstance(props, dict) and "default_generation_settings" in props else None


def probe_features(backend: Backend, model: str) -> list[str]:
    """Each feature the backend showed on a probe (guarantees: see declare)."""

    def ask(**extra: Any) -> dict[str, Any] | None:
        body = {"messages": PROBE_CHAT, "max_tokens": 300, "temperature": 0, **extra}
        try:
            return reply_of(backend.chat(backend_body(model, body)))
        except Fault:
            return None

    def calls(reply: dict[str, Any] | None, names: set[str]) -> bool:
        return bool(reply and reply["tool_calls"]) and all(
            c["function"]["name"] in names and isinstance(parsed(c["function"]["arguments"]), dict)
            for c in reply["tool_calls"]
        )

    features = []
    # A forced call with one tool is how the horde sends a named function: it backs tools and
    # tool_choice_enforced. "required" among several tools is a guarantee of its own.
    if calls(ask(tools=PROBE_TOOLS[:1], tool_choice="required"), {"flag"}):
        features += ["tools", "tool_choice_enforced"]
        if calls(ask(tools=PROBE_TOOLS, tool_choice="required"), {"flag", "other"}):
            features.append("tool_choice_required_enforced")
    as_object = ask(response_format={"type": "json_object"})
    object_ok = as_object is not None and parsed(as_object["content"]) is not None
    schema = {"name": "flag", "schema": FLAG, "strict": True}
    as_schema = ask(response_format={"type": "json_schema", "json_schema": schema})
    flag = parsed(as_schema["content"]) if as_schema else None
    schema_ok = isinstance(flag, dict) and set(flag) == {"ok"} and isinstance(flag["ok"], bool)
    features += ["json_object"] * object_ok + ["json_schema", "json_schema_enforced"] * schema_ok
    features += ["json_output_enforced"] * (object_ok and schema_ok)
    first, again = ask(seed=1234, temperature=1), ask(seed=1234, temperature=1)
    if first and again and first["content"] == again["content"]:
        features.append("seed")
    return features


def calibrate(
    backend: Backend, model: str, route: str | None, template_overhead: int | None
) -> tuple[Counter, dict[str, Any]]:
    """The counter to use, and its count of the probe conversation against the backend's."""
    usage = backend.usage_of(model, PROBE_CONVERSATION)
    counter = Counter(backend, route, model)
    try:
        counted: int | None = counter.count(PROBE_CONVERSATION, None) if route else None
    except Fault:
        counted = None  # the route is missing or failed
    if counted is None or usage is None or counted < usage:  # no exact count, or a short one
        counter = Counter(backend, None, model)
        counter.fixed = backend.usage_of(model, MINIMAL) or 0  # BOS, generation prompt, ...
        counter.tool_overhead = template_overhead or 0
        counted = counter.count(PROBE_CONVERSATION, None)
    return counter, {"counter": counter.kind, "counted": counted, "usage": usage}


def declare(model: str, features: list[str], calibration: dict[str, Any], limits: dict[str, int],
            overhead: int | None) -> dict[str, Any]:  # fmt: skip
    """The chat keys of every pop: the probed features, and prompt_overflow_refused only when
    the counter was not short of the backend's own count."""
    features = list(features)
    usage = calibration["usage"]
    if usage is not None and calibration["counted"] >= usage:
        features.append("prompt_overflow_refused")
        if calibration["counter"] == "byte-bound" and overhead is None:
            # The probe has no tools: the bound covers a tool preamble only when told its size.
            features = [f for f in features if f not in TOOL_FEATURES]
    return {
        "chat_jobs": True,
        "prompt_jobs": False,  # chat only: text jobs would need /v1/completions
        "model_id": model,
        "chat_features": features,
        "chat_limits": limits,
    }


def probe(backend: Backend, args: argparse.Namespace) -> dict[str, Any]:
    """Model, context, counter and features, once at startup; the pop declaration."""
    entry = find_model(backend, args.model)
    props = llama_cpp_props(backend)
    context = args.context or entry.get("max_model_len")
    context = context or (props or {}).get("default_generation_settings", {}).get("n_ctx")
    if not context:
        sys.exit("the backend reports its context on no route: pass --context N")
    route = "llama.cpp" if props else "vllm" if entry.get("owned_by") == "vllm" else None
    features = probe_features(backend, entry["id"])
    counter, calibration = calibrate(backend, entry["id"], route, args.template_overhead)
    limits = {"max_context_length": context, "max_length": min(args.max_length, context)}
    declaration = declare(entry["id"], features, calibration, limits, args.template_overhead)
    return {
        "model": entry["id"],
        "counter": counter,
        "calibration": calibration,
        "declaration": declaration,
    }


class Horde:
    """The worker's side of the native API: pop, submit, fault, leave."""

    def __init__(self, url: str, api_key: str) -> None:
        self.root = url.rstrip("/").removesuffix("/api/v2") + "/api/v2"
        self.headers = {"apikey": api_key, "Client-Agent": "chat-worker-example:1:local"}
        self.http = httpx.Client(base_url=self.root, headers=self.headers, timeout=30)

    def pop(self, body: dict[str, Any]) -> dict[str, Any]:
        """One pop; a ``wait`` (the long poll) lengthens the read timeout to cover it."""
        timeout = 30 + body.get("wait", 0)
        response = self.http.post("/generate/text/pop", json=body, timeout=timeout)
        response.raise_for_status()
        return response.json()

    def submit(self, body: dict[str, Any]) -> None:
        """Deliver a submit or a fault; retried on a broken connection, a 5xx or a 429."""
        for attempt in range(5):
            try:
                response = self.http.post("/generate/text/submit", json=body)
            except httpx.TransportError as exc:
                print(f"job {body['id']}: submit failed ({exc}), retrying", flush=True)
            else:
                if response.status_code < 400:
                    return
                print(f"job {body['id']}: submit answered {response.text[:300]}", flush=True)
                if response.status_code < 500 and response.status_code != 429:
                    return  # refused for good (the message says why)
            time.sleep(0.5 * 2**attempt)

    def leave(self, name: str) -> None:
        """Stopping: leave the pool now (not upstream's), so a request only this worker could
        serve is refused at once rather than queued for it until its last pop is 300 s old.
        Closing the client first closes a pop still open (the long poll), which the horde
        would otherwise run again on a wake, checking the worker in again."""
        self.http.close()
        with httpx.Client(base_url=self.root, headers=self.headers, timeout=10) as http:
            try:
                http.post("/generate/text/leave", json={"name": name}).raise_for_status()
            except httpx.HTTPError as exc:
                print(f"leaving the pool failed: {exc}", flush=True)

    def fault(self, job_id: str, reason: Fault) -> None:
        print(f"job {job_id}: faulted: {reason}", flush=True)
        entry = {"type": "generation", "value": "faulted", "ref": str(reason)[:500]}
        self.submit({"id": job_id, "state": "faulted", "gen_metadata": [entry]})


def serve(job: dict[str, Any], probed: dict[str, Any], backend: Backend) -> dict[str, Any]:
    """One chat job -> the structured submit, or a Fault."""
    payload = job.get("payload") or {}
    if not job.get("is_chat") or not isinstance(payload.get("messages"), list):
        raise Fault("unservable_job", f"{UNSERVABLE}no messages array")
    body = backend_body(probed["model"], payload)
    counter, context = probed["counter"], probed["declaration"]["chat_limits"]
    prompt = counter.count(body["messages"], body.get("tools"))
    room = context["max_context_length"] - prompt
    if payload.get(FIT_FLAG) is True and room >= REPLY_RESERVE_TOKENS:
        body["max_tokens"] = min(body.get("max_tokens") or room, room)  # as much as fits
    needed = prompt + (body.get("max_tokens") or 1)
    if needed > context["max_context_length"]:
        raise Fault(
            "prompt_overflow",
            f"The conversation needs {needed} tokens ({counter.kind} count) but the backend "
            f"has {context['max_context_length']}; it is refused, not trimmed.",
        )
    # A streamed job (job["stream"]) could post progress here; this worker submits it whole.
    return {"id": job["id"], "state": "ok", **reply_of(backend.chat(body))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--horde", required=True, help="the native API, e.g. http://host:7001")
    parser.add_argument("--api-key", required=True, help="the worker owner's API key")
    parser.add_argument("--backend", required=True, help="the OpenAI-compatible server's URL")
    parser.add_argument("--model", help="the backend's model id (when it serves several)")
    parser.add_argument("--context", type=int, help="the backend's context in tokens")
    parser.add_argument("--max-length", type=int, default=512, help="longest reply, in tokens")
    parser.add_argument("--template-overhead", type=int, help="tool preamble (check.py)")
    parser.add_argument("--name", default="chat-worker-example")
    parser.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds a pop waits for a job (the native API's long poll, at most 30; 0: none)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        help="pause after a pop answered no job at once (an upstream horde has no long poll)",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="backend timeout, seconds")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C

    backend, horde = Backend(args.backend, args.timeout), Horde(args.horde, args.api_key)
    probed = probe(backend, args)
    declaration = probed["declaration"]
    print("calibration:", json.dumps(probed["calibration"]), flush=True)
    print("declaration:", json.dumps(declaration), flush=True)
    limits = declaration["chat_limits"]
    pop_body = {
        "name": args.name,
        "models": [probed["model"]],
        "max_length": limits["max_length"],
        "max_context_length": limits["max_context_length"],
        **({"wait": args.wait} if args.wait > 0 else {}),
        **declaration,
    }
    job_id = None
    try:
        while True:
            asked = time.monotonic()
            try:
                job = horde.pop(pop_body)
            except httpx.HTTPError as exc:
                print(f"pop failed: {exc}", flush=True)
                time.sleep(args.poll_interval * 5)
                continue
            job_id = job.get("id")
            if not job_id:  # after a long poll's deadline, at once; else after a pause
                time.sleep(max(0.0, args.poll_interval - (time.monotonic() - asked)))
                continue
            try:
                horde.submit(serve(job, probed, backend))
                print(f"job {job_id}: submitted", flush=True)
            except Fault as reason:
                horde.fault(job_id, reason)
            except Exception as exc:  # noqa: BLE001 - a bug still releases the job
                horde.fault(job_id, Fault("unservable_job", f"{UNSERVABLE}{exc!r}"))
            job_id = None
    except KeyboardInterrupt:
        if job_id:  # never leave a held job to its TTL
            stopped = Fault("worker_shutdown", "The worker stopped before the job finished.")
            horde.fault(job_id, stopped)
        horde.leave(args.name)
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
