"""The worker's side of the native API: pop, submit, fault; a submit is never lost quietly.

``http`` is the client itself (server root, the worker's key), for the progress posts of
streamed jobs (``runtime.worker.progress_poster``).

A submit or a fault is retried on a broken connection, a 5xx or a 429 (the claim is a
compare-and-set, so a repeat of a submit that did land answers DuplicateGen, which is
final). Any other refusal is final and logged with the native API's message and rc.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import httpx

from generated.errors import HordeError
from generated.routes import HEADER_APIKEY, HEADER_CLIENT_AGENT, ROUTES
from generated.wire import STATE_FAULTED
from generated.wire.native import GenMetadataEntry, PopOutput, SubmitInput

log = logging.getLogger("horde-chat.worker")

SUBMIT_ATTEMPTS = 6
FIRST_BACKOFF_SECONDS = 0.5
FAULT_METADATA_TYPE = "generation"
FAULT_METADATA_VALUE = STATE_FAULTED


def _route_path(operation: str) -> str:
    return ROUTES[operation].path


def fault_metadata(reason: HordeError) -> list[GenMetadataEntry]:
    """The gen_metadata entry that carries a fault's reason (docs/errors.md)."""
    ref = f"{reason.code}: {reason.message}"
    return [{"type": FAULT_METADATA_TYPE, "value": FAULT_METADATA_VALUE, "ref": ref[:500]}]


class HordeClient:
    def __init__(
        self,
        horde_root: str,
        api_key: str,
        *,
        agent: str = "horde-chat-worker:1:local",
        timeout: float = 30.0,
    ) -> None:
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=horde_root.rstrip("/"),
            headers={HEADER_APIKEY: api_key, HEADER_CLIENT_AGENT: agent},
            timeout=timeout,
        )

    @property
    def http(self) -> httpx.Client:
        """The client at the server root, sending the worker's key (progress posts use it)."""
        return self._http

    def close(self) -> None:
        self._http.close()

    def pop(self, body: dict[str, Any]) -> PopOutput:
        """One pop; raises httpx errors and HTTP errors for the loop to back off on.

        ``body`` is PopInput's fields with the worker's chat declaration merged in; with a
        ``wait`` (the long poll) the read timeout covers it."""
        timeout = self._timeout + float(body.get("wait") or 0)
        response = self._http.post(_route_path("text_pop"), json=body, timeout=timeout)
        response.raise_for_status()
        answer = response.json()
        if not isinstance(answer, dict):
            raise ValueError("the pop answer is not a JSON object")
        return cast(PopOutput, answer)

    def submit(self, body: SubmitInput) -> bool:
        """Deliver a submit (or fault); True when the native API took it."""
        delay = FIRST_BACKOFF_SECONDS
        for attempt in range(1, SUBMIT_ATTEMPTS + 1):
            if self._http.is_closed:  # stopped: held jobs were already faulted by the stop
                log.warning("job %s: not delivered, the worker has stopped", body.get("id"))
                return False
            try:
                response = self._http.post(_route_path("text_submit"), json=body)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            except RuntimeError:  # closed by a stop between the check and the request
                if not self._http.is_closed:
                    raise
                # mypy keeps is_closed narrowed to False from the check above; a stop flips it
                return False  # type: ignore[unreachable]
            else:
                if response.status_code < 400:
                    return True
                problem = f"{response.status_code} {response.text[:300]}"
                if response.status_code < 500 and response.status_code != 429:
                    log.warning("job %s: submit refused: %s", body.get("id"), problem)
                    return False
            log.warning("job %s: submit attempt %d failed: %s", body.get("id"), attempt, problem)
            time.sleep(delay)  # even while stopping: a shutdown still delivers what it holds
            delay *= 2
        log.error("job %s: submit gave up after %d attempts", body.get("id"), SUBMIT_ATTEMPTS)
        return False

    def fault(self, job_id: str, reason: HordeError) -> bool:
        log.info("job %s: faulted: %s: %s", job_id, reason.code, reason.message)
        body: SubmitInput = {
            "id": job_id,
            "state": STATE_FAULTED,
            "gen_metadata": fault_metadata(reason),
        }
        return self.submit(body)
