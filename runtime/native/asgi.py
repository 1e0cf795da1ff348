"""The native API as an ASGI app: Flask behind a2wsgi, the workers' lane and the chat submit
without Flask, and the long-poll pop served asynchronously.

Requests run on two bounded thread pools, the workers' lane (``WORKER_LANE_THREADS``) and
the clients' (``THREADS``), so a burst of clients never holds up a worker or the liveness
probe. Every body is read first on the event loop within the body deadline (408 after), so
a slow sender holds a coroutine, never a thread. A pop that asked to ``wait`` waits here,
holding no thread, connection or row lock, until a wake (``WakeHub``) or its deadline.
A wake from a commit in this process runs one such pop at once on the committing thread
(``InPlacePop``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from a2wsgi import WSGIMiddleware
from flask import Flask
from redis.exceptions import RedisError

from generated.defences import BODY_DEADLINE_SECONDS
from generated.errors import HordeError, RequestTimeout
from generated.routes import ROUTES
from generated.signals import WAKE_CHANNEL
from runtime.native.api.errors import error_parts
from runtime.native.lane_threads import LaneThreads
from runtime.native.queue.wake import wake_here
from runtime.observability.metrics import process_exited
from runtime.stop_signals import STOP_SIGNALS

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from runtime.native.api.lane import Lane

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

THREADS = 24
"""Threads that run the Flask app for clients' routes. Waitress had 45; under the GIL, more
runnable threads than this only lengthen every request's turns: with 100 image requests sent
at once (tests/integration/test_native_slow_image_host.py) a pop meanwhile took 100-190 ms
at 45 client threads, 80-120 ms at 32 and 30-90 ms at 24 (2 cores, load 4-5). 24 still
leave 8 threads when the fetch pool's 16 slots each hold one waiting."""
WORKER_LANE_THREADS = 16
"""Threads of the workers' lane: pop, submit, progress, leave and heartbeat run there, so a
burst of client requests (their cheap checks, their image fetches waited on) queues behind
the clients' threads instead of in front of the workers and the liveness probe."""
LANE = "horde_lane"
"""The Flask app's extension holding its workers' lane (``runtime.native.api.lane.Lane``)."""
CLIENT_LANE = "horde_client_lane"
"""The Flask app's extension holding the clients' routes served without Flask (a ``Lane``
too, run on the clients' threads): the chat submit."""
FALLBACK_REPOP_SECONDS = 1.0
"""How often a waiting pop pops again while the wake subscription is down."""
RESUBSCRIBE_SECONDS = 1.0
SUBSCRIBE_TIMEOUT = 5.0
POP_OPERATION = "text_pop"
POP_PATH = ROUTES[POP_OPERATION].path

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
"""A lane's response whole: status, headers (lower-case names), body."""


@dataclass
class PopAttempt:
    """One run of the pop view for the shell: ``retry`` is the shell's (a woken pop popping
    again), ``wait`` and ``no_job`` the view's (the validated wait; the answer is empty)."""

    retry: bool = False
    last: bool = False
    """The shell's: the wait is over, so an empty answer is sent; only this run (or a pop
    that does not wait) counts what the worker skipped (upstream's ``skipped``, a count over
    the queue), not a run that goes on waiting (the count is dear: ``queue.jobs``)."""
    wait: float = 0.0
    no_job: bool = False
    models: frozenset[str] | None = None
    """The worker's models and chat model (the view's): wakes for other models pass it by."""
    parsed: Any = None
    """The view's, handed from run to run: what it made of the request's headers and body
    on its first run, which a woken pop's run uses again instead of parsing them anew."""


class InPlacePop:
    """A waiting pop's next run, offered to the thread whose commit queues work for it.

    Woken through the loop, a pop runs again on a lane thread: the wake, the pop's resumption
    and its hand-over to a thread come after the commit, and the pop then runs beside the
    committing view's own tail. Taken by that thread (``WakeHub.wake_threadsafe``), it runs
    there at once, and the loop only sends its answer (docs/performance.md)."""

    __slots__ = ("claimed", "models", "result", "run", "waiter")

    def __init__(
        self,
        waiter: asyncio.Event,
        models: frozenset[str],
        run: Callable[[], tuple[Answer, PopAttempt]],
    ) -> None:
        self.waiter = waiter
        self.models = models
        self.run = run
        self.claimed = asyncio.Event()
        """Set on the loop once a thread took it: the pop then waits for ``result``."""
        self.result: concurrent.futures.Future[tuple[Answer, PopAttempt]]
        self.result = concurrent.futures.Future()

    def run_here(self) -> None:
        """Run it on this thread; its answer (or exception) goes to the waiting pop."""
        try:
            self.result.set_result(self.run())
        except BaseException as exc:
            self.result.set_exception(exc)
            if not isinstance(exc, Exception):
                raise


class HubMetrics:
    """The /metrics families of waiting pops (``runtime.native.api.observe``'s registry)."""

    def __init__(self) -> None:
        from runtime.native.api.observe import POP_WAKES, POPS_WAITING  # it imports this module

        self.waiting, self.wakes = POPS_WAITING, POP_WAKES


class WakeHub:
    """This process's waiting pops and its one subscription to the wake channel.

    ``wake_workers`` publishes on ``WAKE_CHANNEL`` and wakes this process's pops directly
    first (``wake_here``). While the subscription is down, a waiting pop pops again every
    ``FALLBACK_REPOP_SECONDS``; ``close()`` (shutdown) answers every waiting pop "no job"."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.waiters: dict[asyncio.Event, frozenset[str] | None] = {}
        """Each waiting pop's wake-up, and the models it serves (None: not known yet)."""
        self.offers: dict[asyncio.Event, InPlacePop] = {}
        """The waiting pops' next runs a committing thread may take (by their wake-ups),
        read and changed under ``offers_lock`` (threads take them)."""
        self.offers_lock = threading.Lock()
        self.wakes = 0  # wake messages received (tests read it)
        self.waiting = 0  # pops waiting now (between two runs of the view)
        self.repops = 0  # woken pops run again (tests read it)
        self.subscribed = asyncio.Event()
        self.closing = False
        self._task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.metrics = HubMetrics()

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._listen(), name="horde-wake")
        with contextlib.suppress(TimeoutError):  # Redis down: waits fall back to re-popping
            await asyncio.wait_for(self.subscribed.wait(), SUBSCRIBE_TIMEOUT)

    async def stop(self) -> None:
        self.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def close(self) -> None:
        """Shutting down: every waiting pop answers now, and none waits from here on."""
        self.closing = True
        self.wake_all()

    def close_threadsafe(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.close)

    def wake_threadsafe(self, models: frozenset[str]) -> None:
        """``wake_all`` from any thread (``queue.wake.wake_here``'s hook: a view that queued
        work wakes this process's waiting pops without Redis's round trip). With ``models``
        named, the longest waiting pop serving one of them runs here too, at once: its
        answer is sent when it has a job; without one, it waits again."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        taken = self._take(models) if models and not self.closing else None
        try:
            loop.call_soon_threadsafe(self.wake_all, models, taken)
        except RuntimeError:  # the loop closed meanwhile: nothing waits
            return
        if taken is not None:
            taken.run_here()

    def serves(self, waiter: asyncio.Event, models: frozenset[str] | None) -> None:
        """A waiting pop's models, once its first run has read them."""
        if models is not None and waiter in self.waiters:
            self.waiters[waiter] = models

    def offer(self, pop: InPlacePop) -> None:
        with self.offers_lock:
            self.offers[pop.waiter] = pop

    def withdraw(self, waiter: asyncio.Event) -> bool:
        """End the offer: True when it stood, False when a thread took it (its run's result
        is coming)."""
        with self.offers_lock:
            return self.offers.pop(waiter, None) is not None

    def _take(self, models: frozenset[str]) -> InPlacePop | None:
        with self.offers_lock:
            for waiter, pop in self.offers.items():
                if pop.models & models:
                    del self.offers[waiter]
                    return pop
        return None

    def wake_all(
        self, models: frozenset[str] = frozenset(), taken: InPlacePop | None = None
    ) -> None:
        """Wake the waiting pops that could take work for ``models`` (empty: any model);
        the one a thread runs for this wake (``taken``) waits for that run instead (a wake
        during it still runs it again after, should it find nothing)."""
        for waiter, serves in self.waiters.items():
            if taken is not None and waiter is taken.waiter:
                continue
            if not models or serves is None or serves & models:
                waiter.set()
        if taken is not None:
            taken.claimed.set()

    async def _listen(self) -> None:
        while True:
            client = aioredis.Redis.from_url(self.redis_url)
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(WAKE_CHANNEL)
                async for message in pubsub.listen():
                    if message["type"] == "subscribe":
                        self.subscribed.set()
                        self.wake_all()  # a wake may have been missed while unsubscribed
                    elif message["type"] == "message":
                        self.wakes += 1
                        self.metrics.wakes.inc()
                        self.wake_all(wake_models(message["data"]))
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:  # Redis away: re-pop slowly, subscribe again
                if self.closing:
                    return  # stopping (its stores may go first): nothing waits any more
                log.warning("wake subscription lost (%s); retrying", exc)
            finally:
                self.subscribed.clear()
                # redis-py types PubSub.aclose from 8.2 on; a typed alias calls it either way
                close_pubsub: Callable[[], Awaitable[object]] = pubsub.aclose
                with contextlib.suppress(Exception):
                    await close_pubsub()
                    await client.aclose()
            await asyncio.sleep(RESUBSCRIBE_SECONDS)

    async def wait(self, waiter: asyncio.Event, seconds: float) -> None:
        """Until a wake, ``seconds``, or shutdown (a slice only while unsubscribed)."""
        if not self.subscribed.is_set():
            seconds = min(seconds, FALLBACK_REPOP_SECONDS)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):  # no task of its own, as wait_for makes
                await waiter.wait()


class NativeASGI:
    """The ASGI app: lifespan starts the wake hub; the pop route long-polls.

    The clients' routes run the Flask app through a2wsgi on the body read, but the chat
    submit, answered whole by the clients' ``Lane`` on a clients' thread (``_client_lane``);
    the workers' lane's are answered by its ``Lane`` on a lane thread (``_lane_answer``). A
    pop that finds no job waits on the loop; a woken pop runs the view again as a retry
    (neither rate limited nor logged twice, so a waiting pop counts as one), and at the
    deadline once more (``PopAttempt.last``), whose answer is sent. The client's address is
    the TCP peer (``proxy_headers=False``): X-Forwarded-For is trusted only from a passkey
    holder."""

    def __init__(self, flask_app: Flask, redis_url: str, *, threads: int = THREADS) -> None:
        self.flask_app = flask_app
        self.max_body = int(flask_app.config["MAX_CONTENT_LENGTH"])
        self.body_deadline: float = BODY_DEADLINE_SECONDS
        self.wsgi = WSGIMiddleware(flask_app.wsgi_app, workers=threads)  # type: ignore[arg-type]
        self.lane: Lane = flask_app.extensions[LANE]
        self.client_lane: Lane = flask_app.extensions[CLIENT_LANE]
        self.lane_threads = LaneThreads(WORKER_LANE_THREADS, "horde-lane")
        self.hub = WakeHub(redis_url)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            await self.wsgi(scope, receive, send)  # type: ignore[arg-type]
            return
        found = await self._body_first(scope, receive, send)
        if found is None:
            return  # the client left, or did not send its body in time (answered 408)
        scope, receive = found
        if scope["method"] == "POST" and scope["path"] == POP_PATH:
            await self._pop(scope, receive, send)
        elif (operation_id := self.lane.routes.get((scope["method"], scope["path"]))) is not None:
            await self._lane(operation_id, scope, receive, send)
        elif operation_id := self.client_lane.routes.get((scope["method"], scope["path"])):
            await self._client_lane(operation_id, scope, receive, send)
        else:
            await self.wsgi(scope, receive, send)  # type: ignore[arg-type]

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.hub.start()
                wake_here(self.lane.ctx.redis, self.hub.wake_threadsafe)
                _chain_exit_signals(self.hub)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                wake_here(self.lane.ctx.redis, None)
                await self.hub.stop()
                self.wsgi.executor.shutdown(wait=False)
                self.lane_threads.shutdown()
                process_exited()  # several processes: its live gauges leave /metrics' sums
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _pop(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._lane_body(scope, receive)
        if body is None:
            return
        gone = _Gone(receive)
        waiter = asyncio.Event()
        self.hub.waiters[waiter] = None
        deadline: float | None = None
        loop = asyncio.get_running_loop()
        try:
            retry = last = False
            parsed = None
            ran: tuple[Answer, PopAttempt] | None = None  # a run a committing thread made
            while True:
                if ran is None:
                    waiter.clear()  # a wake from here on (during this pop) is not lost
                    attempt = PopAttempt(retry=retry, last=last, parsed=parsed)
                    answer = await self._lane_answer(POP_OPERATION, scope, body, attempt)
                else:
                    (answer, attempt), ran = ran, None
                parsed = attempt.parsed
                self.hub.serves(waiter, attempt.models)
                done = not attempt.no_job or attempt.wait <= 0 or last
                if done or self.hub.closing or gone.is_set():
                    break
                if deadline is None:
                    deadline = loop.time() + attempt.wait
                remaining = deadline - loop.time()
                if remaining > 0:
                    offered = self._offer(waiter, scope, body, attempt)
                    ran = await self._wait(waiter, gone, remaining, offered)
                    if ran is not None:
                        retry = True
                        continue  # its answer is this pop's, as a lane thread's run's
                    if gone.is_set() or self.hub.closing:
                        break  # shutting down: the last empty answer, at once (no skipped)
                retry = True
                if waiter.is_set():
                    self.hub.repops += 1
                elif loop.time() >= deadline:
                    last = True  # over: one last run answers, with what the worker skipped
        finally:
            self.hub.waiters.pop(waiter, None)
            gone.stop()
        if not gone.is_set():
            await _send_answer(send, answer)

    async def _wait(
        self, waiter: asyncio.Event, gone: _Gone, seconds: float, offered: InPlacePop | None
    ) -> tuple[Answer, PopAttempt] | None:
        """Until a wake, ``seconds``, the client leaving or shutdown; then the run a
        committing thread made of the pop meanwhile, if one took ``offered``."""
        gone.watch()
        self.hub.waiting += 1
        self.hub.metrics.waiting.inc()
        waits = [self.hub.wait(waiter, seconds), gone.event.wait()]
        if offered is not None:
            waits.append(offered.claimed.wait())
        try:
            await _first(*waits)
        finally:
            self.hub.waiting -= 1
            self.hub.metrics.waiting.dec()
            taken = offered is not None and not self.hub.withdraw(waiter)
        if offered is None or not taken:
            return None
        self.hub.repops += 1
        return await asyncio.wrap_future(offered.result)

    async def _lane(self, operation_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        """A route of the workers' lane but the pop: its body read here, its answer whole."""
        body = await self._lane_body(scope, receive)
        if body is None:
            return
        await _send_answer(send, await self._lane_answer(operation_id, scope, body, None))

    async def _client_lane(
        self, operation_id: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A clients' route served without Flask, on the clients' threads (the chat submit:
        a burst of them queues there, never in front of the workers' lane)."""
        body = await self._lane_body(scope, receive)
        if body is None:
            return
        request = self.client_lane.request(operation_id, scope, *body, None)
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        respond = self.client_lane.respond_in
        answer = await loop.run_in_executor(self.wsgi.executor, respond, context, request)
        await _send_answer(send, answer)

    async def _lane_body(self, scope: Scope, receive: Receive) -> tuple[bytes, bool] | None:
        """A workers' lane request's body, read here, and whether it is over the cap (then
        only its first bytes, or none: a declared length over the cap is not read); None
        when the client left. The view refuses one over the cap 413 where it reads the body
        (``LaneRequest.data``), as Flask did."""
        if (_content_length(scope) or 0) > self.max_body:
            return b"", True
        body = await _read_body(receive, self.max_body)
        return None if body is None else (body, len(body) > self.max_body)

    async def _lane_answer(
        self,
        operation_id: str,
        scope: Scope,
        body: tuple[bytes, bool],
        attempt: PopAttempt | None,
    ) -> Answer:
        """The lane's whole answer to a request whose body was read, on a lane thread (each
        request's own context variables)."""
        request = self.lane.request(operation_id, scope, *body, attempt)
        context = contextvars.copy_context()
        answer: Answer = await self.lane_threads.call(self.lane.respond_in, context, request)
        return answer

    def _offer(
        self, waiter: asyncio.Event, scope: Scope, body: tuple[bytes, bool], last: PopAttempt
    ) -> InPlacePop | None:
        """Offer a waiting pop's next run to the thread whose commit queues work for it
        (None: its models are not known, so no wake can name them)."""
        if last.models is None:
            return None
        woken = PopAttempt(retry=True, parsed=last.parsed)
        context = contextvars.copy_context()  # the pop's own, taken here on its task

        def run() -> tuple[Answer, PopAttempt]:  # only once a thread takes it
            request = self.lane.request(POP_OPERATION, scope, *body, woken)
            return self.lane.respond_in(context, request), woken

        pop = InPlacePop(waiter, last.models, run)
        self.hub.offer(pop)
        return pop

    async def _body_first(
        self, scope: Scope, receive: Receive, send: Send
    ) -> tuple[Scope, Receive] | None:
        """The request with its body read here, on the event loop, within the body deadline
        (so a client sending it slowly holds no request thread), up to the cap: the route is
        handed the body read (a chunked one with its Content-Length: Flask reads it, or
        refuses a longer one with its 413 unread). A declared length over the cap is not
        read (the route refuses it 413). None: the client left, or its body did not arrive
        within the deadline (answered 408 here, the connection closed)."""
        chunked = _header(scope, b"transfer-encoding") is not None
        if not chunked and (_content_length(scope) or 0) > self.max_body:
            return scope, receive
        try:
            async with asyncio.timeout(self.body_deadline):
                body = await _read_body(receive, self.max_body)
        except TimeoutError:
            await _send_answer(
                send, _closing(RequestTimeout(part="body", seconds=self.body_deadline))
            )
            return None
        if body is None:
            return None
        if chunked:
            length = str(len(body) if len(body) <= self.max_body else self.max_body + 1)
            headers = [
                (k, v)
                for k, v in scope["headers"]
                if k not in (b"transfer-encoding", b"content-length")
            ]
            headers.append((b"content-length", length.encode()))
            scope = {**scope, "headers": headers}
        return scope, _replay(body, receive)


def _closing(error: HordeError) -> Answer:
    """``error``'s answer in upstream's envelope, closing the connection after it."""
    status, payload, headers = error_parts(error)
    body = json.dumps(payload).encode()
    pairs = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    pairs += [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return status, pairs, body


def wake_models(data: Any) -> frozenset[str]:
    """The models a wake message names (spec/signals.yaml ``wake``); empty: any, or a
    message this process cannot read (then every waiting pop wakes, which is safe)."""
    try:
        found = json.loads(data)
    except (TypeError, ValueError):
        return frozenset()
    if not isinstance(found, list) or not all(isinstance(m, str) for m in found):
        return frozenset()
    return frozenset(found)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body (None: the client left), or its first bytes once more than
    ``limit`` came."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _send_answer(send: Send, answer: Answer) -> None:
    status, headers, body = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, then: Receive | None = None) -> Receive:
    """A receive that gives ``body`` once, then reads on from ``then`` (the connection's:
    it answers when the client leaves), or without one says the client left."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await then() if then is not None else {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class _Gone:
    """Whether a pop's client left, watched from its first wait on: a pop answered at once
    (a job found, or no wait asked) starts no watcher task, sparing a task created and
    cancelled on every pop."""

    __slots__ = ("_receive", "_task", "event")

    def __init__(self, receive: Receive) -> None:
        self.event = asyncio.Event()
        self._receive = receive
        self._task: asyncio.Task[None] | None = None

    def is_set(self) -> bool:
        return self.event.is_set()

    def watch(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(_watch_disconnect(self._receive, self.event))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def _watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


async def _first(*waits: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _chain_exit_signals(hub: WakeHub) -> None:
    """In a server process of its own (uvicorn in the main thread), SIGTERM and SIGINT also
    answer the waiting pops at once, then reach uvicorn's handler (graceful shutdown)."""
    if threading.current_thread() is not threading.main_thread():
        return  # a NativeService in a thread: its stop() closes the hub
    for sig in STOP_SIGNALS:
        previous = signal.getsignal(sig)

        def chained(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            hub.close_threadsafe()
            if callable(previous):
                previous(signum, frame)

        signal.signal(sig, chained)


def app_from_env() -> ASGIApp:
    """The app factory of ``horde-chat native --processes N``: each server process builds
    its context from the environment (HORDE_DATABASE_URL, HORDE_REDIS_URL, ...) and settles
    its heap once started (``runtime.service_process``); the supervisor runs the sweep."""
    from runtime.config import Settings
    from runtime.native.server import build_app
    from runtime.service_process import settled_after_startup

    settings = Settings.from_env()
    app, _ctx = build_app(
        settings,
        database_url=settings.database_url or "",
        redis_url=settings.redis_url or "",
        base_url=f"http://{settings.native_host}:{settings.native_port}",
    )
    return settled_after_startup(app)
