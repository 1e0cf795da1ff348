"""Helpers for driving the native chat routes in tests: requester and chat-worker calls."""

from __future__ import annotations

from typing import Any

import httpx

from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_JOBS,
    DECL_CHAT_LIMITS,
    DECL_MODEL_ID,
    DECL_PROMPT_JOBS,
    GUARANTEE_PROMPT_OVERFLOW_REFUSED,
)

MODEL = "chat-model-7B"
BASIC = [GUARANTEE_PROMPT_OVERFLOW_REFUSED]
"""What a plain strict request requires: the worker refuses a prompt that does not fit."""


def chat_body(content: str = "Say hello.", **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}


def chat_async(
    client: httpx.Client, api_key: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    return client.post("/generate/chat/async", headers={"apikey": api_key, **headers}, json=body)


def submit_chat(client: httpx.Client, api_key: str, **fields: Any) -> str:
    response = chat_async(client, api_key, chat_body(**fields))
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def chat_status(client: httpx.Client, request_id: str) -> dict[str, Any]:
    response = client.get(f"/generate/chat/status/{request_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def chat_pop(client: httpx.Client, api_key: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A chat worker's pop (``chat_pop_body``'s), answered 200; its answer."""
    body = chat_pop_body(*args, **kwargs)
    response = client.post("/generate/text/pop", headers={"apikey": api_key}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def chat_pop_body(
    name: str = "chat-worker",
    *,
    model: str = MODEL,
    features: list[str] | None = None,
    limits: dict[str, Any] | None = None,
    prompt_jobs: bool = True,
    **fields: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "models": [model],
        "max_length": 512,
        "max_context_length": 4096,
        DECL_CHAT_JOBS: True,
        DECL_MODEL_ID: model,
        DECL_CHAT_FEATURES: BASIC if features is None else features,
        DECL_CHAT_LIMITS: limits or {},
        DECL_PROMPT_JOBS: prompt_jobs,
        **fields,
    }


def submit_reply(
    client: httpx.Client, api_key: str, job_id: str, content: str | None = "Hello!", **fields: Any
) -> httpx.Response:
    body = {"id": job_id, "content": content, **fields}
    return client.post("/generate/text/submit", headers={"apikey": api_key}, json=body)
