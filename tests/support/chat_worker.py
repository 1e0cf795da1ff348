"""A test chat worker: a thread that pops chat jobs from the live native API over HTTP and
submits what ``respond(job)`` returns. No model: the reply is the test's.

    with ChatTestWorker(native_url, api_key, model="m", respond=lambda job: {"content": "Hi"}):
        ...  # requests for model "m" are answered

``respond`` gets the pop response (``job["payload"]`` holds the narrowed chat payload) and
returns the submit fields (content, reasoning_content, tool_calls, finish_reason, usage); it
may return None to leave the job unanswered (the test then watches the request wait).
``jobs`` records every popped job; ``pause()`` / ``resume()`` stop and restart popping.
The worker declares every feature and guarantee unless ``features`` says otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Self

import httpx

from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_JOBS,
    DECL_CHAT_LIMITS,
    DECL_MODEL_ID,
    DECL_PROMPT_JOBS,
)
from generated.chat.tables import FEATURES, GUARANTEES

Respond = Callable[[dict[str, Any]], dict[str, Any] | None]
POP_INTERVAL = 0.05


def echo_reply(job: dict[str, Any]) -> dict[str, Any]:
    """A plain answer naming the last user message."""
    last = job["payload"]["messages"][-1].get("content")
    return {"content": f"You said: {last}", "finish_reason": "stop"}


class ChatTestWorker:
    def __init__(
        self,
        native_url: str,
        api_key: str,
        *,
        model: str,
        respond: Respond = echo_reply,
        features: list[str] | None = None,
        limits: dict[str, Any] | None = None,
        name: str = "test-chat-worker",
    ) -> None:
        self.client = httpx.Client(base_url=native_url, headers={"apikey": api_key}, timeout=30)
        self.model = model
        self.respond = respond
        self.features = [*FEATURES, *GUARANTEES] if features is None else features
        self.limits = limits or {}
        self.name = name
        self.jobs: list[dict[str, Any]] = []
        self.submits: list[httpx.Response] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._idle = threading.Event()  # the loop saw the pause: no pop of its own in flight
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def pop_once(self) -> dict[str, Any]:
        body = {
            "name": self.name,
            "models": [self.model],
            "max_length": 512,
            "max_context_length": 4096,
            DECL_CHAT_JOBS: True,
            DECL_MODEL_ID: self.model,
            DECL_CHAT_FEATURES: self.features,
            DECL_CHAT_LIMITS: self.limits,
            DECL_PROMPT_JOBS: False,
        }
        response = self.client.post("/generate/text/pop", json=body)
        response.raise_for_status()
        return dict(response.json())

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._paused.is_set():
                self._idle.set()
                self._stop.wait(POP_INTERVAL)
                continue
            self._idle.clear()
            try:
                job = self.pop_once()
                if not job.get("id"):
                    self._stop.wait(POP_INTERVAL)
                    continue
                self.jobs.append(job)
                fields = self.respond(job)
                if fields is not None:
                    submitted = self.client.post(
                        "/generate/text/submit", json={"id": job["id"], **fields}
                    )
                    self.submits.append(submitted)
            except Exception as exc:  # recorded for the test; the loop goes on
                self.errors.append(exc)
                self._stop.wait(POP_INTERVAL)

    def pause(self) -> None:
        """Stop popping; returns once the loop's last pop has been answered, so no pop of
        the loop (with the declaration it was sent with) lands after this."""
        self._paused.set()
        if self._thread.is_alive():
            self._idle.wait(timeout=30)

    def resume(self) -> None:
        self._paused.clear()

    def __enter__(self) -> Self:
        self.pop_once()  # online before the first request: the native API admits on it
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.client.close()
