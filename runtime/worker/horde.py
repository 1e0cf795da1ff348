"""The worker's side of the native API: pop, submit, fault, leave; a submit is never lost
quietly.

The pops, submits and leaves go over ``JsonHttp`` (plain keep-alive HTTP/1.1, a third of
httpx's CPU a call); pops on a client of their own, so a stop can cut a pop still waiting
(``cut_pops``) before ``leave`` takes the worker out of the pool. A submit or a fault is
retried on a broken connection, a 5xx or a 429 (the claim is a compare-and-set, so a
repeat of one that landed answers DuplicateGen, which is final); any other refusal is final
and logged with the native API's message and rc. ``http`` (httpx) serves the progress posts.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import httpx

from generated.errors import HordeError
from generated.routes import HEADER_APIKEY, HEADER_CLIENT_AGENT, ROUTES
from generated.wire import STATE_FAULTED
from generated.wire.native import GenMetadataEntry, LeaveInput, PopOutput, SubmitInput
from runtime.worker.json_http import CallFailed, JsonHttp

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


class PopsCut(Exception):
    """A pop refused (or cut short) because the worker is stopping."""


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
        root = horde_root.rstrip("/")
        headers = {HEADER_APIKEY: api_key, HEADER_CLIENT_AGENT: agent}
        self._calls = JsonHttp(root, headers=headers, timeout=timeout)
        self._pops = JsonHttp(root, headers=headers, timeout=timeout)
        self._http = httpx.Client(base_url=root, headers=headers, timeout=timeout)

    @property
    def http(self) -> httpx.Client:
        """The client at the server root, sending the worker's key (progress posts use it)."""
        return self._http

    def close(self) -> None:
        self._pops.cut()
        self._calls.close()
        self._http.close()

    def pop(self, body: dict[str, Any]) -> PopOutput:
        """One pop; raises ``CallFailed`` and ``StatusError`` for the loop to back off on,
        ``PopsCut`` once ``cut_pops`` was called.

        ``body`` is PopInput's fields with the worker's chat declaration merged in; with a
        ``wait`` (the long poll) the read timeout covers it."""
        timeout = self._timeout + float(body.get("wait") or 0)
        try:
            answer = self._pops.request("POST", _route_path("text_pop"), body, timeout=timeout)
        except CallFailed:
            if self._pops.is_closed():
                raise PopsCut() from None
            raise
        answer.raise_for_status()
        payload = answer.json()
        if not isinstance(payload, dict):
            raise ValueError("the pop answer is not a JSON object")
        return cast(PopOutput, payload)

    def cut_pops(self) -> None:
        """Stopping: end every pop waiting on the native API (its connection shut, both
        ways), and refuse new ones."""
        self._pops.cut()

    def leave(self, name: str) -> bool:
        """Take the worker ``name`` out of the pool now, its pops cut first (``cut_pops``: a
        pop left waiting would run again on a wake and check the worker in again); False
        (logged) when the native API did not take it: it then ages out, as upstream's."""
        self.cut_pops()
        body: LeaveInput = {"name": name}
        try:
            answer = self._calls.request("POST", _route_path("text_leave"), body)
        except CallFailed as exc:
            log.warning("leaving the pool failed: %s: %s", type(exc).__name__, exc)
            return False
        if answer.status >= 400:
            log.warning("leaving the pool refused: %s %s", answer.status, answer.text)
            return False
        return True

    def submit(self, body: SubmitInput) -> bool:
        """Deliver a submit (or fault); True when the native API took it."""
        delay = FIRST_BACKOFF_SECONDS
        for attempt in range(1, SUBMIT_ATTEMPTS + 1):
            if self._calls.is_closed():  # stopped: held jobs were already faulted by the stop
                log.warning("job %s: not delivered, the worker has stopped", body.get("id"))
                return False
            try:
                answer = self._calls.request("POST", _route_path("text_submit"), body)
            except CallFailed as exc:
                if self._calls.is_closed():  # closed by a stop while it was on its way
                    return False
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status < 400:
                    return True
                problem = f"{answer.status} {answer.text[:300]}"
                if answer.status < 500 and answer.status != 429:
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
