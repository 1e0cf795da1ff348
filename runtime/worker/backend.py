"""The HTTP side of an OpenAI-compatible backend: every failure becomes a fault reason.

A backend error is a :class:`generated.errors.BackendError` (with the status and the
backend's own message), a timeout a ``BackendTimeout``, a broken connection a
``BackendUnreachable`` and a 200 that is not JSON a ``BackendInvalidReply``; the job that
hit it is faulted with that reason. A whole answer comes over ``JsonHttp`` (a job's
completion is on its critical path); a stream over httpx, read as server-sent events, where
a stream that ends without a finish_reason is a failure, not a short reply.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Self

import httpx

from generated.errors import BackendError, BackendInvalidReply, BackendTimeout, BackendUnreachable
from runtime.worker.json_http import Answer, CallFailed, CallTimedOut, JsonHttp

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
_DETAIL_CHARS = 300


def _error_detail(response: Answer | httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        reason = response.reason if isinstance(response, Answer) else response.reason_phrase
        return response.text[:_DETAIL_CHARS] or reason
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        code = error.get("code")
        text = str(error["message"])[:_DETAIL_CHARS]
        return f"{text} ({code})" if code else text
    if isinstance(error, str):
        return error[:_DETAIL_CHARS]
    return json.dumps(body)[:_DETAIL_CHARS]


class BackendClient:
    """One backend root (``http://host:port``, without ``/v1``)."""

    def __init__(self, base_url: str, *, timeout: float, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._calls = JsonHttp(self.base_url, headers=headers, timeout=timeout)
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._calls.close()
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any, timeout: float | None) -> Answer:
        seconds = self.timeout if timeout is None else timeout
        try:
            return self._calls.request(method, path, body, timeout=seconds)
        except CallTimedOut as exc:
            raise BackendTimeout(seconds=round(seconds, 1)) from exc
        except CallFailed as exc:
            raise BackendUnreachable(detail=str(exc)) from exc

    def request_json(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Any:
        """The JSON answer of a 2xx, else the fault reason."""
        response = self._call(method, path, body, timeout)
        if response.status >= 400:
            raise BackendError(status=response.status, detail=_error_detail(response))
        try:
            return response.json()
        except ValueError as exc:
            raise BackendInvalidReply(detail=f"{path} answered no JSON") from exc

    def try_json(self, method: str, path: str, body: Any = None) -> Any | None:
        """The JSON answer, or None when the route is absent or fails (for probing)."""
        try:
            return self.request_json(method, path, body, timeout=min(self.timeout, 30.0))
        except (BackendError, BackendInvalidReply, BackendUnreachable, BackendTimeout):
            return None

    def models(self) -> list[dict[str, Any]]:
        body = self.request_json("GET", MODELS_PATH)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise BackendInvalidReply(detail=f"{MODELS_PATH} has no data list")
        return [entry for entry in data if isinstance(entry, dict)]

    def chat(self, body: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        answer = self.request_json("POST", CHAT_PATH, body, timeout=timeout)
        if not isinstance(answer, dict):
            raise BackendInvalidReply(detail="the chat completion is not a JSON object")
        return answer

    def complete(self, body: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        answer = self.request_json("POST", COMPLETIONS_PATH, body, timeout=timeout)
        if not isinstance(answer, dict):
            raise BackendInvalidReply(detail="the completion is not a JSON object")
        return answer

    def stream_chat(
        self,
        body: dict[str, Any],
        on_event: Callable[[dict[str, Any]], bool],
        *,
        timeout: float | None = None,
    ) -> None:
        """POST with ``stream: true``; ``on_event`` gets each chunk and returns False to stop.

        Raises a fault reason on an HTTP error, an error event, or a stream cut early.
        """
        seconds = self.timeout if timeout is None else timeout
        try:
            with self._http.stream("POST", CHAT_PATH, json=body, timeout=seconds) as response:
                if response.status_code >= 400:
                    response.read()
                    raise BackendError(status=response.status_code, detail=_error_detail(response))
                for event in _sse_events(response.iter_lines()):
                    if not on_event(event):
                        return
        except httpx.TimeoutException as exc:
            raise BackendTimeout(seconds=round(seconds, 1)) from exc
        except httpx.TransportError as exc:
            raise BackendInvalidReply(detail=f"the stream broke: {type(exc).__name__}") from exc


def _sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise BackendInvalidReply(detail="a stream event is not JSON") from exc
        if isinstance(event, dict) and "error" in event:
            detail = event["error"].get("message") if isinstance(event["error"], dict) else None
            raise BackendInvalidReply(detail=f"error event in the stream: {detail or event}")
        if isinstance(event, dict):
            yield event
