"""Admission, all before anything is submitted: caps, body size, key, validation.

``Admission.admit`` holds a per-source and a global slot for the whole request (503
FrontAtCapacity); ``read_body`` enforces the size limit (413) and body deadline (408);
``checked_request`` holds the body to its allowances, parses it strictly and runs the shared
validator. ``admitted_body`` runs that check in ``PARSER``, two processes of their own, for
a body over ``OFF_LOOP_BYTES``, because the json module holds the GIL for a whole parse;
turns there are shared fairly between addresses (``runtime.front.fair_share``).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import multiprocessing.forkserver as forkserver
import multiprocessing.resource_tracker as resource_tracker
import os
import select
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request

from generated.chat.names import HORDE_DRY_RUN, PARAM_HORDE
from generated.errors import (
    BodyReadTimeout,
    FrontAtCapacity,
    HordeError,
    InvalidAPIKey,
    InvalidJSON,
    InvalidPayload,
    NulByteInPayload,
    PayloadTooLarge,
    UnsupportedChatParameter,
)
from generated.routes import HEADER_AUTHORIZATION
from generated.wire import ANONYMOUS_API_KEY
from runtime import body_caps, strict_json
from runtime.contract.validator import drop_front_defaults, horde_option, validate_chat_request

BEARER = "bearer "
OFF_LOOP_BYTES = 16 * 1024
"""Bodies larger than this are parsed and validated in ``PARSER``, not on the event loop:
the size where the worst body's hold on the loop passes what the trip to a parser process
adds to a body's latency (docs/performance.md)."""
PARSER_PROCESSES = 2
"""One per core of the machines measured; more would only share the same cores."""
PARSER_NICENESS = 10
PARSER_SLOTS = 2 * PARSER_PROCESSES
"""Bodies handed to the parser processes at once (one parsing, one next, for each); the
others wait in ``FairShare``, where their turns are given fairly by address."""


class ClientGone(Exception):
    """The client closed its connection."""


class Admission:
    """Open-request counters of one front process (one event loop: no lock needed)."""

    def __init__(self, per_source_cap: int, global_cap: int) -> None:
        self.per_source_cap = per_source_cap
        self.global_cap = global_cap
        self.by_source: Counter[str] = Counter()
        self.total = 0

    @contextmanager
    def admit(self, source: str) -> Iterator[None]:
        if self.total >= self.global_cap:
            raise FrontAtCapacity(scope="global cap")
        if self.by_source[source] >= self.per_source_cap:
            raise FrontAtCapacity(scope="per-source cap")
        self.total += 1
        self.by_source[source] += 1
        try:
            yield
        finally:
            self.total -= 1
            self.by_source[source] -= 1
            if self.by_source[source] <= 0:
                del self.by_source[source]


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole body, refused at ``limit`` bytes (413) or after ``timeout`` seconds (408)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(limit=limit)
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(limit=limit)
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError as exc:
        raise BodyReadTimeout(seconds=timeout) from exc
    except ClientDisconnect as exc:
        raise ClientGone() from exc
    return b"".join(chunks)


def api_key_of(request: Request) -> str:
    """The bearer token; without Authorization, the anonymous key (as the native API)."""
    header = request.headers.get(HEADER_AUTHORIZATION)
    if header is None:
        return ANONYMOUS_API_KEY
    if not header[: len(BEARER)].lower() == BEARER or not header[len(BEARER) :].strip():
        raise InvalidAPIKey()
    key = header[len(BEARER) :].strip()
    if len(key) > 100 or not key.isprintable():
        raise InvalidAPIKey()
    return key


def checked_request(raw: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the body to forward, the normalised request), or the refusal: 413 for a body over
    an allowance, 400 for malformed JSON or a request the validator refuses."""
    return checked_chat_body(parsed_body(raw))


def parsed_body(raw: bytes) -> object:
    """The body parsed, held to its text and inline-image allowances (413), or the 400 of a
    malformed body."""
    body_caps.check_allowances(len(raw), body_caps.inline_image_bound(raw))
    try:
        body = strict_json.parse(raw, lift=body_caps.DATA_IMAGE)  # images: not json-scanned
    except strict_json.Malformed as bad:
        raise _refusal(bad) from None  # the traceback would only repeat the body's problem
    body_caps.check_allowances(len(raw), body_caps.inline_image_bytes_in(body))
    return body


def checked_chat_body(body: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the chat body to forward, the normalised request) of a parsed chat body: the front's
    default no-ops dropped, the shared validator's refusals raised."""
    forward = drop_front_defaults(body) if isinstance(body, dict) else body
    request = validate_chat_request(forward)
    if horde_option(request, HORDE_DRY_RUN):
        where = f"{PARAM_HORDE}.{HORDE_DRY_RUN}"
        raise UnsupportedChatParameter(
            key=where,
            reason="A kudos quote is served by the native chat route, not the chat front",
            param=where,
        )
    return forward, request  # type: ignore[return-value]  # the validator took a dict


def _refusal(bad: strict_json.Malformed) -> HordeError:
    """The front's 400 for a malformed body (strict_json's kinds)."""
    if bad.kind == "nul":
        return NulByteInPayload()
    if bad.kind == "non_finite":
        return InvalidPayload(field=bad.path, problem=bad.problem, param=bad.path)
    return InvalidJSON(detail=str(bad))


def encoded(body: dict[str, Any]) -> bytes:
    """A body to forward, as the native API receives it."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def checked_and_encoded(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    """A chat completion's admitted body: ``checked_request`` with the body encoded."""
    forward, request = checked_request(raw)
    return encoded(forward), request


Admitted = TypeVar("Admitted")
Check = Callable[[bytes], Admitted]
ParserTurn = Callable[[int], AbstractAsyncContextManager[None]]
"""A body's turn at the parser processes, given its size (``FairShare.turn`` for one address)."""
"""A route's check of its raw body: what it admits (for a chat completion
``checked_and_encoded``), or its refusal raised. A module-level function, so a parser
process can run it."""


def _parsed_apart(check: Check[Admitted], raw: bytes) -> Admitted | HordeError:
    """``check`` in a parser process: the refusal is returned, not raised (its traceback,
    which would travel with it, holds nothing the front answers)."""
    try:
        return check(raw)
    except HordeError as refusal:
        return refusal


def _parser_started(front_pid: int) -> None:
    """A parser process's initializer. It runs at a lower priority (niceness +10), so a
    hostile body's parse takes CPU the front's event loop does not need, not CPU it does;
    and a thread ends it once the front that started it is gone (a SIGKILLed front cannot
    shut its pool down)."""
    os.nice(PARSER_NICENESS)

    def watch() -> None:
        try:
            fd = os.pidfd_open(front_pid)
        except (AttributeError, OSError):  # no pidfd (not Linux 5.3+): poll instead
            while _alive(front_pid):
                threading.Event().wait(1.0)
        else:
            select.select([fd], [], [])  # readable once the front exited
        os._exit(0)

    threading.Thread(target=watch, name="front-gone", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ready() -> int:
    return os.getpid()


class Parser:
    """The parser processes of this front process, started by ``open`` (or the first large body).

    A thread would not do: the json module holds the GIL for a whole parse, stalling every
    other client (docs/performance.md, bench/front_hostile.py). A process
    answers the refusal, or the encoded body and the normalised request (cheap to unpickle).
    Bodies up to ``OFF_LOOP_BYTES`` stay on the loop: a few ms at worst, less than the trip.
    Two processes; a flood queues per address, and the address with the fewest bytes parsed
    goes next, so one client's flood delays another's by about one body. A dead process
    (OOM) is noticed by the next large body, which gets a new pool; the bodies it held answer
    503 FrontAtCapacity. Processes exit with the front, even on SIGKILL. Like ``--processes
    N``, a parser process imports the main module again: a script running a front needs the
    ``if __name__ == "__main__"`` guard."""

    def __init__(self, processes: int = PARSER_PROCESSES) -> None:
        self.processes = processes
        self.pool: ProcessPoolExecutor | None = None
        self.lock = threading.Lock()
        self.users = 0

    def _pool(self) -> ProcessPoolExecutor:
        with self.lock:
            if self.pool is not None and not _all_alive(self.pool):
                # The pool's own thread notices a death only when it waits with nothing else
                # to read: under a steady flow of bodies, never. A new pool now, and the
                # bodies the dead process held fail (BrokenProcessPool) when it does notice.
                self.pool.shutdown(wait=False)
                self.pool = None
            if self.pool is None:
                # forkserver: no fork of this threaded process; each parser starts from a
                # server that imported this module once
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload([__name__])
                # the resource tracker's start unblocks SIGINT in this thread: it goes first
                resource_tracker.ensure_running()
                with _sigint_blocked():
                    forkserver.ensure_running()  # and so every parser: SIGINT stays blocked
                self.pool = ProcessPoolExecutor(
                    self.processes,
                    mp_context=context,
                    initializer=_parser_started,
                    initargs=(os.getpid(),),
                )
                _start_every_process(self.pool)
            return self.pool

    def open(self) -> None:
        """An app starts using the parser: start every parser process now (blocking: call
        it off the loop), so the first large body does not wait for them."""
        with self.lock:
            self.users += 1
        pool = self._pool()
        for started in [pool.submit(_ready) for _ in range(self.processes)]:
            started.result()

    def close(self) -> None:
        """An app stops using the parser; the last one shuts the parser processes down."""
        with self.lock:
            self.users -= 1
            if self.users > 0:
                return
            pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def pids(self) -> list[int]:
        """The parser processes' pids (none before the first use)."""
        pool = self.pool
        return sorted(getattr(pool, "_processes", None) or {}) if pool is not None else []

    async def run(self, raw: bytes, check: Check[Admitted]) -> Admitted:
        pool = self._pool()
        try:
            try:
                future = pool.submit(_parsed_apart, check, raw)
            except BrokenProcessPool:  # broken before this body: it gets a new pool
                self._forget(pool)
                pool = self._pool()
                future = pool.submit(_parsed_apart, check, raw)
            done = await asyncio.wrap_future(future)
        except BrokenProcessPool:  # a parser died with this body in: the next gets a new pool
            self._forget(pool)
            raise FrontAtCapacity(scope="body parser restarting") from None
        if isinstance(done, HordeError):
            raise done
        return done

    def _forget(self, pool: ProcessPoolExecutor) -> None:
        with self.lock:
            if self.pool is pool:
                self.pool = None
        pool.shutdown(wait=False)


def _start_every_process(pool: ProcessPoolExecutor) -> None:
    """Start all of ``pool``'s processes now. Outside fork, the pool starts one a submit,
    unless a process is idle: a submit that finds the first body done already (the
    submitting thread held up on a busy machine) reuses that process, and the pool can stay
    one process short for good. The method is CPython's own (3.9+; it starts a fork pool's)."""
    launch = getattr(pool, "_launch_processes", None)
    if launch is not None:
        launch()


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread meanwhile: a process started here (the forkserver, and
    the parsers it forks) keeps it blocked. A terminal's Ctrl-C reaches every process of its
    group; the front stops on it and ends its parsers, and a parser (or the forkserver,
    while its interpreter starts) that took it printed a KeyboardInterrupt traceback."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _all_alive(pool: ProcessPoolExecutor) -> bool:
    """Whether every process of ``pool`` runs (a dead one was reaped: its sentinel says so;
    no wait, two polls of a pipe)."""
    processes = getattr(pool, "_processes", None) or {}
    return all(process.is_alive() for process in list(processes.values()))


PARSER = Parser()
"""This front process's parser processes (each app's lifespan opens and closes it)."""


async def admitted_body(raw: bytes, check: Check[Admitted], turn: ParserTurn) -> Admitted:
    """What ``check`` admits of the body (a chat completion's ``checked_and_encoded``: the
    body to forward, encoded, and the normalised request), or its refusal; in a parser
    process for a body over ``OFF_LOOP_BYTES``, once ``turn`` (the client address's place in
    the fair share) lets it in."""
    if len(raw) <= OFF_LOOP_BYTES:
        return check(raw)
    async with turn(len(raw)):
        return await PARSER.run(raw, check)
