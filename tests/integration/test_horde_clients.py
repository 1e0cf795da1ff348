"""The horde's own clients, unmodified, on the native text flow against the embedded stack
(the shipped native API on the embedded Postgres and Redis, at its shipped rate limits):
Haidra's horde-sdk, horde-client and the npm @zeldafan0225/ai_horde, each from its own
environment (``make install`` builds them under .venv/clients), and a worker popping and
submitting exactly as a KoboldAI bridge does (AI-Horde-Worker's scribe, koboldcpp's embedded
worker): their bodies as those programs send them, no nsfw, no seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.native_flow import status

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENTS = Path(sys.prefix) / "clients"
DRIVERS = Path(__file__).parents[1] / "support" / "horde_clients"
MODEL = "koboldcpp/tiny-horde-model"
SCRIBE_AGENT = "AI Horde Worker:24:https://github.com/db0/AI-Horde-Worker"
KOBOLDCPP_AGENT = "KoboldCppEmbedWorker:2:https://github.com/LostRuins/koboldcpp"


def _client(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: `make install` builds the horde clients' environments")
    return path


def _run(argv: list[Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, f"{argv[1]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


KOBOLD_POP = {
    "models": [MODEL],
    "max_length": 512,
    "max_context_length": 2048,
    "priority_usernames": [],
    "softprompts": [],
}
"""What both KoboldAI bridges pop with besides their name, agent and threads: no nsfw."""


def _bridge_pop(
    client: httpx.Client, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    answer = client.post("/generate/text/pop", headers=headers, json={**body, **KOBOLD_POP})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _scribe_pop(client: httpx.Client, key: str, name: str) -> dict[str, Any]:
    """AI-Horde-Worker's ScribePopper.pop_payload (worker/jobs/poppers.py), as sent."""
    body = {"name": name, "bridge_agent": SCRIBE_AGENT, "threads": 1}
    return _bridge_pop(client, body, {"apikey": key})


def _koboldcpp_pop(client: httpx.Client, key: str, name: str) -> dict[str, Any]:
    """koboldcpp's embedded worker's gen_dict (koboldcpp.py), with its headers."""
    headers = {
        "apikey": key,
        "User-Agent": "KoboldCppEmbeddedWorkerV2",
        "Client-Agent": "KoboldCppEmbedWorker:2",
    }
    return _bridge_pop(client, {"name": name, "bridge_agent": KOBOLDCPP_AGENT}, headers)


def _serve_in_background(native_url: str, key: str, name: str, reply: str) -> threading.Thread:
    """A koboldcpp-style worker in a thread: pops until one job comes, submits ``reply``."""

    def serve() -> None:
        with httpx.Client(base_url=native_url, timeout=30) as client:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                job = _koboldcpp_pop(client, key, name)
                if job["id"]:
                    body = {"id": job["id"], "generation": reply, "state": "ok"}
                    client.post("/generate/text/submit", headers={"apikey": key}, json=body)
                    return
                time.sleep(0.2)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_kobold_bridge_serves_a_request_sent_with_nsfw_true_as_upstream(native_client, make_user):
    """Upstream's pop parser defaults nsfw to true, and KoboldAI bridges send none: they
    serve nsfw requests. Neither sends a seed; the status shows upstream's default 0."""
    requester = make_user("requester", kudos=100)
    owner = make_user("bridge-owner")
    body = {
        "prompt": "An nsfw story.",
        "nsfw": True,
        "models": [MODEL],
        "params": {"max_length": 80},
    }
    queued = native_client.post(
        "/generate/text/async", headers={"apikey": requester.api_key}, json=body
    )
    assert queued.status_code == 202, queued.text
    assert isinstance(queued.json()["kudos"], int)

    job = _scribe_pop(native_client, owner.api_key, "scribe-bridge")
    assert job["id"], job["skipped"]
    assert job["payload"]["prompt"] == "An nsfw story."
    # scribe's submit (worker/jobs/scribe.py prepare_submit_payload): id, generation, seed 0
    answer = native_client.post(
        "/generate/text/submit",
        headers={"apikey": owner.api_key},
        json={"id": job["id"], "generation": "Once, in a tavern...", "seed": 0},
    )
    assert answer.status_code == 200, answer.text

    second = native_client.post(
        "/generate/text/async", headers={"apikey": requester.api_key}, json=body
    )
    job = _koboldcpp_pop(native_client, owner.api_key, "koboldcpp-embedded")
    assert job["id"], job["skipped"]
    answer = native_client.post(
        "/generate/text/submit",
        headers={"apikey": owner.api_key},
        json={"id": job["id"], "generation": "Far away...", "state": "ok"},
    )
    assert answer.status_code == 200, answer.text
    done = status(native_client, second.json()["id"])
    assert done["done"] is True
    assert done["generations"][0]["seed"] == 0
    assert isinstance(done["kudos"], int)

    workers = {w["name"]: w for w in native_client.get("/workers").json()}
    assert workers["scribe-bridge"]["nsfw"] is True
    assert workers["scribe-bridge"]["bridge_agent"] == SCRIBE_AGENT
    assert workers["koboldcpp-embedded"]["bridge_agent"] == KOBOLDCPP_AGENT


def test_a_worker_that_declares_no_nsfw_is_not_given_an_nsfw_request(native_client, make_user):
    """Ours, where upstream stores every text request as nsfw false (docs/compatibility.md):
    a worker popping nsfw false is skipped an nsfw request, and serves one that omits nsfw."""
    requester = make_user("requester", kudos=100)
    owner = make_user("sfw-owner")
    nsfw = {"prompt": "nsfw", "nsfw": True, "params": {"max_length": 80}}
    native_client.post("/generate/text/async", headers={"apikey": requester.api_key}, json=nsfw)
    pop = {"name": "sfw-worker", "models": [MODEL], "nsfw": False}
    skipped = native_client.post("/generate/text/pop", headers={"apikey": owner.api_key}, json=pop)
    assert skipped.json()["id"] is None
    assert skipped.json()["skipped"].get("nsfw") == 1
    plain = {"prompt": "plain", "params": {"max_length": 80}}
    native_client.post("/generate/text/async", headers={"apikey": requester.api_key}, json=plain)
    served = native_client.post("/generate/text/pop", headers={"apikey": owner.api_key}, json=pop)
    assert served.json()["payload"]["prompt"] == "plain"


def test_horde_sdk_drives_the_text_flow_on_both_sides(native_service, native_db, make_user):
    python = _client(CLIENTS / "horde-sdk" / "bin" / "python")
    requester = make_user("requester", kudos=100)
    owner = make_user("sdk-owner")
    base = f"{native_service.url}/api/"
    out = _run(
        [
            python,
            DRIVERS / "horde_sdk_driver.py",
            base,
            requester.api_key,
            owner.api_key,
            "sdk-worker",
            MODEL,
        ],
        env={"AI_HORDE_URL": base},
    )
    assert out["find_user"] == {"username": f"sdk-owner#{owner.id}", "id": owner.id}
    assert out["served"]["prompt"] == "Tell me a story."
    assert out["status"]["done"] is True
    assert out["status"]["texts"] == ["A reply written by the horde-sdk worker."]
    assert out["status"]["seeds"] == [0]
    assert out["cancel"]["done"] is True
    assert out["workers"]["names"] == ["sdk-worker"]
    assert out["workers"]["by_name"] == ["sdk-worker"]
    assert out["workers"]["bridge_agent"] == "horde-sdk test worker:1:tests"
    assert out["workers"]["requests_fulfilled"] == 1
    assert out["models"] == {"text": [MODEL], "image": [], "single": [MODEL]}
    assert out["stats"]["text_worker_count"] == 1
    assert out["stats"]["total_requests"] == 1  # the served job; the cancelled one had none
    assert out["stats"]["models_total"] == {MODEL: 1}


def test_horde_client_text_gen_and_models(native_service, native_url, native_db, make_user):
    python = _client(CLIENTS / "horde-client" / "bin" / "python")
    requester = make_user("requester", kudos=100)
    owner = make_user("kcpp-owner")
    worker = _serve_in_background(native_url, owner.api_key, "kcpp-worker", "Far away...")
    with httpx.Client(base_url=native_url, timeout=30) as client:  # the model is online first
        _koboldcpp_pop(client, owner.api_key, "kcpp-worker")
    out = _run(
        [
            python,
            DRIVERS / "horde_client_driver.py",
            f"{native_service.url}/api/",
            requester.api_key,
            MODEL,
        ]
    )
    worker.join(timeout=60)
    assert out["models"] == [MODEL]
    assert out["image_models"] == []
    assert out["done"] is True
    assert out["texts"] == ["Far away..."]
    assert out["seeds"] == [0]  # koboldcpp sends no seed


def test_the_npm_client_drives_the_text_flow_and_reads_every_public_route(
    native_url, native_db, make_user
):
    package = _client(CLIENTS / "ai-horde-npm" / "node_modules" / "@zeldafan0225" / "ai_horde")
    requester = make_user("requester", kudos=100)
    owner = make_user("npm-owner")
    out = _run(
        [
            "node",
            DRIVERS / "ai_horde_driver.mjs",
            native_url,
            requester.api_key,
            owner.api_key,
            "npm-worker",
            MODEL,
        ],
        env={"AI_HORDE_NPM": str(package.parents[1].parent)},
    )
    assert out["find_user"]["username"] == f"npm-owner#{owner.id}"
    assert isinstance(out["flow"]["kudos"], int)
    assert out["flow"]["prompt"] == "Tell me a story."
    assert out["flow"]["status"]["done"] is True
    assert out["flow"]["status"]["generations"][0]["seed"] == 0
    assert out["cancelled"]["done"] is True
    assert [w["name"] for w in out["workers"]] == ["npm-worker"]
    assert out["worker"]["bridge_agent"] == "unknown:0:unknown"
    assert [m["name"] for m in out["model"]] == [MODEL]
    assert [m["name"] for m in out["models"]] == [MODEL]
    assert out["text_totals"]["total"] == {"requests": 1, "tokens": 80}
    assert out["text_models"] == {"day": {MODEL: 1}, "month": {MODEL: 1}, "total": {MODEL: 1}}
    assert out["performance"]["text_worker_count"] == 1
    assert out["modes"] == {"maintenance_mode": False, "invite_only_mode": False}
    assert out["news"] == []
