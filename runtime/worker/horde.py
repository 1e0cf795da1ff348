"""The worker's side of the native API: pop, submit, fault, leave; a submit is never lost
quietly.

Each pop thread pops on a connection of its own, so a stop can cut a pop still waiting
(``cut_pops``) before ``leave`` takes the worker out of the pool. A submit or a fault is
retried on a broken connection, a 5xx or a 429 (the claim is a compare-and-set, so a
repeat of one that landed answers DuplicateGen, which is final); any other refusal is final
and logged with the native API's message and rc. ``http`` serves the progress posts.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from typing import Any, cast

import httpx

from generated.errors import HordeError
from generated.routes import HEADER_APIKEY, HEADER_CLIENT_AGENT, ROUTES
from generated.wire import STATE_FAULTED
from generated.wire.native import GenMetadataEntry, LeaveInput, PopOutput, SubmitInput

log = logging.getLogger("horde-chat.worker")

SUBMIT_ATTEMPTS = 6
FIRST_BACKOFF_SECONDS = 0.5
FAULT_METADATA_TYPE = "generation"
FAULT_METADATA_VALUE = STATE_FAULTED


def _shut(sock: socket.socket) -> None:
    """Shut a connection both ways (a read waiting on it in another thread ends at once;
    closing it would not wake that read)."""
    with contextlib.suppress(OSError):  # closed meanwhile
        sock.shutdown(socket.SHUT_RDWR)


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
        self._settings: dict[str, Any] = {
            "base_url": horde_root.rstrip("/"),
            "headers": {HEADER_APIKEY: api_key, HEADER_CLIENT_AGENT: agent},
            "timeout": timeout,
        }
        self._http = httpx.Client(**self._settings)
        self._pops = threading.local()
        self._pop_clients: list[httpx.Client] = []
        self._pop_sockets: dict[int, socket.socket] = {}
        """Each pop thread's connection's socket (by thread id), as its client connected."""
        self._pops_cut = False
        self._pops_lock = threading.Lock()

    @property
    def http(self) -> httpx.Client:
        """The client at the server root, sending the worker's key (progress posts use it)."""
        return self._http

    def close(self) -> None:
        self.cut_pops()
        with self._pops_lock:
            clients, self._pop_clients = self._pop_clients, []
        for client in clients:
            client.close()
        self._http.close()

    def pop(self, body: dict[str, Any]) -> PopOutput:
        """One pop, on this thread's own connection; raises httpx errors and HTTP errors for
        the loop to back off on, ``PopsCut`` once ``cut_pops`` was called.

        ``body`` is PopInput's fields with the worker's chat declaration merged in; with a
        ``wait`` (the long poll) the read timeout covers it."""
        timeout = self._timeout + float(body.get("wait") or 0)
        client = self._pop_client()
        try:
            response = client.post(
                _route_path("text_pop"),
                json=body,
                timeout=timeout,
                extensions={"trace": self._connected},
            )
        except httpx.TransportError:
            if self._pops_cut:
                raise PopsCut() from None
            raise
        response.raise_for_status()
        answer = response.json()
        if not isinstance(answer, dict):
            raise ValueError("the pop answer is not a JSON object")
        return cast(PopOutput, answer)

    def _pop_client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._pops, "client", None)
        if client is None:
            client = httpx.Client(**self._settings)
            with self._pops_lock:
                if self._pops_cut:
                    client.close()
                    raise PopsCut()
                self._pop_clients.append(client)
            self._pops.client = client
        if self._pops_cut:
            raise PopsCut()
        return client

    def _connected(self, event: str, info: dict[str, Any]) -> None:
        """httpx's trace hook on a pop: keeps the socket each connection (and TLS) made."""
        if event not in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            return
        sock = info["return_value"].get_extra_info("socket")
        if not isinstance(sock, socket.socket):
            return
        with self._pops_lock:
            self._pop_sockets[threading.get_ident()] = sock
            if self._pops_cut:  # connected while the cut ran: cut this one too
                _shut(sock)

    def cut_pops(self) -> None:
        """Stopping: end every pop waiting on the native API (its connection shut, both
        ways), and refuse new ones."""
        with self._pops_lock:
            self._pops_cut = True
            sockets = list(self._pop_sockets.values())
        for sock in sockets:
            _shut(sock)

    def leave(self, name: str) -> bool:
        """Take the worker ``name`` out of the pool now, its pops cut first (``cut_pops``: a
        pop left waiting would run again on a wake and check the worker in again); False
        (logged) when the native API did not take it: it then ages out, as upstream's."""
        self.cut_pops()
        body: LeaveInput = {"name": name}
        try:
            response = self._http.post(_route_path("text_leave"), json=body)
        except httpx.HTTPError as exc:
            log.warning("leaving the pool failed: %s: %s", type(exc).__name__, exc)
            return False
        if response.status_code >= 400:
            log.warning("leaving the pool refused: %s %s", response.status_code, response.text)
            return False
        return True

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
