"""Haidra's horde-sdk (its own Python 3.12 venv) on both sides of the native text flow.

Run as ``python horde_sdk_driver.py BASE_URL REQUESTER_KEY WORKER_KEY WORKER MODEL`` with
AI_HORDE_URL set to BASE_URL (the SDK reads it at import). The requester side is the SDK's
simple client (text_generate_request: submit, then its status polling); the worker side, in
a thread, pops and submits with the SDK's own request models; then it cancels a second
request and reads find_user, the workers, the models, the stats, the load and the news.
Every answer is parsed by the SDK's response models (an answer they refuse raises), and
what the test asserts is printed as one JSON object.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from horde_sdk.ai_horde_api import AIHordeAPIManualClient, AIHordeAPISimpleClient
from horde_sdk.ai_horde_api.apimodels import (
    AllWorkersDetailsRequest,
    AllWorkersDetailsResponse,
    DeleteTextGenerateRequest,
    FindUserRequest,
    HordePerformanceRequest,
    HordePerformanceResponse,
    HordeStatusModelsAllRequest,
    HordeStatusModelsAllResponse,
    HordeStatusModelsSingleRequest,
    HordeStatusModelsSingleResponse,
    ModelGenerationInputKobold,
    NewsRequest,
    NewsResponse,
    SingleWorkerDetailsResponse,
    SingleWorkerNameDetailsRequest,
    TextGenerateAsyncRequest,
    TextGenerateAsyncResponse,
    TextGenerateJobPopRequest,
    TextGenerateJobPopResponse,
    TextGenerateStatusResponse,
    TextGenerationJobSubmitRequest,
    TextStatsModelResponse,
    TextStatsModelsRequest,
    TextStatsModelsTotalRequest,
    TextStatsModelsTotalResponse,
    UserDetailsResponse,
)
from horde_sdk.generic_api.apimodels import RequestErrorResponse

REPLY = "A reply written by the horde-sdk worker."


def ask(client: AIHordeAPIManualClient, request: Any, expected: Any) -> Any:
    answer = client.submit_request(request, expected)
    if isinstance(answer, RequestErrorResponse):
        raise SystemExit(f"{type(request).__name__} refused: {answer.message} ({answer.rc})")
    assert isinstance(answer, expected), type(answer)
    return answer


def serve_one(client: AIHordeAPIManualClient, worker_key: str, worker: str, model: str) -> dict:
    """Pop until a job comes (within 60 s), submit REPLY; the pop and the reward."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pop = ask(
            client,
            TextGenerateJobPopRequest(
                apikey=worker_key,
                name=worker,
                models=[model],
                max_length=512,
                max_context_length=2048,
                bridge_agent="horde-sdk test worker:1:tests",
            ),
            TextGenerateJobPopResponse,
        )
        if pop.id_ is not None:
            submitted = ask(
                client,
                TextGenerationJobSubmitRequest(
                    apikey=worker_key, id=pop.id_, generation=REPLY, state="ok"
                ),
                TextGenerationJobSubmitRequest.get_default_success_response_type(),
            )
            return {"prompt": pop.payload.prompt, "model": pop.model, "reward": submitted.reward}
        time.sleep(0.2)
    raise SystemExit("no job within 60 s")


def main() -> None:
    _base, requester_key, worker_key, worker, model = sys.argv[1:6]
    client = AIHordeAPIManualClient()
    out: dict[str, Any] = {}

    me = ask(client, FindUserRequest(apikey=worker_key), UserDetailsResponse)
    out["find_user"] = {"username": me.username, "id": me.id_}

    served: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: served.update(serve_one(client, worker_key, worker, model)), daemon=True
    )
    thread.start()
    status, _gen_id = AIHordeAPISimpleClient().text_generate_request(
        TextGenerateAsyncRequest(
            apikey=requester_key,
            prompt="Tell me a story.",
            models=[model],
            params=ModelGenerationInputKobold(max_length=80, max_context_length=1024),
        ),
        timeout=120,
    )
    thread.join(timeout=60)
    out["served"] = served
    out["status"] = {
        "done": status.done,
        "kudos": status.kudos,
        "texts": [g.text for g in status.generations],
        "seeds": [g.seed for g in status.generations],
        "workers": [g.worker_name for g in status.generations],
    }

    queued = ask(
        client,
        TextGenerateAsyncRequest(apikey=requester_key, prompt="Cancel me.", models=[model]),
        TextGenerateAsyncResponse,
    )
    cancelled = ask(
        client,
        DeleteTextGenerateRequest(id=queued.id_),
        TextGenerateStatusResponse,
    )
    out["cancel"] = {"kudos": queued.kudos, "done": cancelled.done, "waiting": cancelled.waiting}

    workers = ask(client, AllWorkersDetailsRequest(), AllWorkersDetailsResponse)
    named = ask(client, AllWorkersDetailsRequest(name=worker.upper()), AllWorkersDetailsResponse)
    single = ask(
        client, SingleWorkerNameDetailsRequest(worker_name=worker), SingleWorkerDetailsResponse
    )
    out["workers"] = {
        "names": [w.name for w in workers],
        "by_name": [w.name for w in named],
        "bridge_agent": single.bridge_agent,
        "requests_fulfilled": single.requests_fulfilled,
    }
    models = ask(client, HordeStatusModelsAllRequest(type="text"), HordeStatusModelsAllResponse)
    images = ask(client, HordeStatusModelsAllRequest(type="image"), HordeStatusModelsAllResponse)
    one = ask(
        client, HordeStatusModelsSingleRequest(model_name=model), HordeStatusModelsSingleResponse
    )
    out["models"] = {
        "text": [m.name for m in models],
        "image": [m.name for m in images],
        "single": [m.name for m in one],
    }
    totals = ask(client, TextStatsModelsTotalRequest(), TextStatsModelsTotalResponse)
    per_model = ask(client, TextStatsModelsRequest(), TextStatsModelResponse)
    load = ask(client, HordePerformanceRequest(), HordePerformanceResponse)
    ask(client, NewsRequest(), NewsResponse)
    out["stats"] = {
        "total_requests": totals.total["requests"],
        "models_total": per_model.total,
        "text_worker_count": load.text_worker_count,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
