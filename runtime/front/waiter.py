"""The wait for a submitted request's reply: the Submitted -> Waiting states
(docs/design.md, "The front").

``ReplyWait.open`` takes the submit's first status and turns gaps and fail_fast into errors
before a stream opens; ``ReplyWait.reply`` then wakes on the completion signal and a slow
fallback poll until the request ends, answering from the outcome Redis holds when it can,
so a plain request costs no status read. Transient answers, Redis restarts and lost signals
delay a wait, never fail it; the caller cancels on every exit but a reply or a fault.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from generated.chat.names import HORDE_AVAILABILITY_MODE
from generated.errors import (
    ChatRequestFaulted,
    DeadlineExceeded,
    HordeError,
    HordeUnavailable,
    NoEligibleWorker,
    NoGeneration,
    NoWorkerSupportsLimit,
    QueueUnavailable,
    StreamDiverged,
)
from generated.signals import CHAT_SIGNALS
from generated.wire.native import ChatStatus
from runtime.contract.requirements import features_gap
from runtime.contract.validator import horde_option
from runtime.front.native_client import NativeClient, RequestGone, Transient
from runtime.front.observe import OPEN_WAITS, WAKE_POLL, WAKE_SIGNAL, WAKES
from runtime.front.responses import Reply
from runtime.front.signals import Mark, Signal, SignalHub

FAIL_FAST = "fail_fast"
READ_WHILE_WAITING = (
    "processing",
    "is_possible",
    "eligible_threads",
    "queue_position",
    "wait_time",
    "generations",
)
"""What a wait reads of a status that is neither done nor faulted until the next one (its
grace check, a stream's queue note and model name); it keeps no more of it."""
QUEUE_INFO_RECHECK = 0.25
POLL_JITTER = (0.8, 1.2)
"""Waits opened together (a burst of clients) do not poll the native API in step."""
NEEDS_NO_CANCEL = (ChatRequestFaulted, StreamDiverged)
"""A fault, or a reply that arrived (and diverged from the relayed text), ends the request."""
BACKOFF_FIRST = 0.5
"""Seconds before repeating a read or cancel after its first transient answer (then x2)."""
CANCEL_BACKOFF_MAX = 10.0
"""The longest pause between two attempts of a cancel."""
CANCEL_PATIENCE = 20 * 60.0
"""How long a cancel is repeated: the native API expires a request still waiting after
this long (Policy.waiting_expiry_seconds), so then there is nothing left to cancel."""

log = logging.getLogger(__name__)


def backoff(attempt: int, retry_after: float | None, cap: float) -> float:
    """The pause before repeat ``attempt`` (0 first): doubling and jittered, raised to the
    native API's Retry-After, at most ``cap`` (a refused call costs the native API little,
    and the cap bounds how late the wait notices the window's end or its reply)."""
    delay = BACKOFF_FIRST * 2.0**attempt * random.uniform(*POLL_JITTER)
    return min(cap, max(delay, retry_after or 0.0))


async def cancel_until_confirmed(
    native: NativeClient,
    request_id: str,
    source: str | None = None,
    *,
    patience: float = CANCEL_PATIENCE,
) -> bool:
    """Cancel on the native side, repeating after transient answers until it is confirmed
    (True); False on a refusal no repeat changes, or after ``patience`` seconds."""
    loop = asyncio.get_running_loop()
    until = loop.time() + patience
    attempt = 0
    while True:
        retry_after: float | None = None
        try:
            return await native.cancel_once(request_id, source)
        except Transient as exc:
            retry_after, reason = exc.retry_after, exc.message
        except HordeUnavailable as exc:
            reason = exc.message
        delay = backoff(attempt, retry_after, CANCEL_BACKOFF_MAX)
        if loop.time() + delay > until:
            log.warning("cancel of %s never confirmed: %s", request_id, reason)
            return False
        log.info("cancel of %s not confirmed (%s); again in %.1f s", request_id, reason, delay)
        await asyncio.sleep(delay)
        attempt += 1


@dataclass(frozen=True)
class WaitBudget:
    deadline: float
    grace: float
    poll_interval: float
    queue_info_wait: float


def needs_cancel(error: BaseException) -> bool:
    """Every exit after submission but a reply or a fault cancels the Horde request."""
    return not isinstance(error, NEEDS_NO_CANCEL)


def gap_error(status: ChatStatus) -> HordeError | None:
    """The declaration gap (404) or limits gap (400) a status reports, if any."""
    missing = [str(m) for m in status.get("missing_features") or []]
    if missing:
        return features_gap(missing, metadata={"missing": missing})
    limits = status.get("exceeded_limits") or []
    if limits:
        first = limits[0]
        return NoWorkerSupportsLimit(
            limit=first.get("limit"),
            value=first.get("value"),
            maximum=first.get("maximum"),
            metadata={"exceeded_limits": limits},
        )
    return None


def _has_queue_info(status: ChatStatus) -> bool:
    return bool(
        status.get("queue_position") or status.get("wait_time") or status.get("processing")
    ) or bool(status.get("finished") or status.get("done"))


class ReplyWait:
    """One submitted request's wait; use as ``async with`` (it holds the subscription).
    Slotted: thousands are open at once, and a dict per wait costs memory."""

    __slots__ = (
        "_impossible_since",
        "_retry_after",
        "_signal",
        "_since",
        "budget",
        "clock",
        "fail_fast",
        "failed_reads",
        "hub",
        "native",
        "outcome_reads",
        "reads",
        "request_id",
        "source",
        "started",
        "status",
    )

    def __init__(
        self,
        native: NativeClient,
        hub: SignalHub,
        request_id: str,
        request: dict[str, Any],
        budget: WaitBudget,
        clock: Callable[[], float] | None = None,
        source: str | None = None,
        since: Mark | None = None,
    ) -> None:
        self.native = native
        self.source = source
        self.hub = hub
        self.request_id = request_id
        self.fail_fast = horde_option(request, HORDE_AVAILABILITY_MODE) == FAIL_FAST
        self.budget = budget
        self.clock = clock or asyncio.get_running_loop().time
        self.started = self.clock()
        self.status: ChatStatus | None = None
        self.reads = 0
        """Status reads of the native status route."""
        self.outcome_reads = 0
        """Final statuses read from the outcome key instead."""
        self.failed_reads = 0
        """Transient answers in a row (reset by a read that succeeds)."""
        self._retry_after: float | None = None
        self._impossible_since: float | None = None
        self._signal: Signal | None = None
        self._since = since

    async def __aenter__(self) -> ReplyWait:
        self._signal = await self.hub.subscribe(self.request_id, self._since)
        self._since = None
        OPEN_WAITS.inc()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._signal is not None:
            OPEN_WAITS.dec()
            self.hub.release(self.request_id, self._signal)

    def _left(self) -> float:
        return self.started + self.budget.deadline - self.clock()

    async def _read(self) -> ChatStatus | None:
        """One status read; None after a transient answer (429, 5xx) or a lost one."""
        self.reads += 1
        try:
            status = await self.native.status(self.request_id, self.source)
        except RequestGone as exc:
            raise NoGeneration() from exc
        except Transient as exc:
            self.failed_reads += 1
            self._retry_after = exc.retry_after
            return None
        except HordeUnavailable:
            self.failed_reads += 1
            self._retry_after = None
            return None
        self.failed_reads = 0
        self._keep(status)
        return status

    def _keep(self, status: ChatStatus) -> None:
        """``status`` as the wait's last: whole when final (its reply or fault is built from
        it), else only ``READ_WHILE_WAITING`` (a first status's ~30 fields, each key a string
        of its own from the JSON parse, weighed on every open wait)."""
        if status.get("done") or status.get("faulted"):
            self.status = status
            return
        kept = {field: status[field] for field in READ_WHILE_WAITING if field in status}  # type: ignore[literal-required]
        self.status = cast(ChatStatus, kept)

    def _retry_delay(self) -> float:
        """The back-off before reading again after ``failed_reads`` transient answers."""
        cap = self.budget.poll_interval
        return backoff(self.failed_reads - 1, self._retry_after, cap)

    async def _sleep(self, seconds: float) -> None:
        """Until the signal, or ``seconds``; the deadline ends the wait."""
        assert self._signal is not None
        left = self._left()
        if left <= 0:
            raise DeadlineExceeded(seconds=round(self.budget.deadline))
        signalled = await self._signal.wait(min(seconds, left))
        WAKES.labels(WAKE_SIGNAL if signalled else WAKE_POLL).inc()
        self._signal.clear()

    async def _outcome_of(self, key: str) -> ChatStatus | None:
        """The final status stored under ``key``, if Redis has it."""
        status = await self.hub.outcome(key)
        if status is not None:
            self.outcome_reads += 1
            self.status = status
        return status

    async def _reread(self) -> ChatStatus | None:
        """After a wake: the final status under the outcome key the signal named, else a
        status read (None after a transient answer)."""
        assert self._signal is not None
        key, self._signal.outcome = self._signal.outcome, None
        if key is not None:
            status = await self._outcome_of(key)
            if status is not None:
                return status
        return await self._read()

    async def open(self, first: ChatStatus | None = None) -> None:
        """From the submit's status (``first``; else reads until one succeeds) to the
        fail_fast decision; gaps raise here. A request that already ended is taken from its
        outcome key: the one its signal named when the hub heard everything since the
        submit (``Signal.heard``), else looked up (it may have ended unheard).

        A declaration gap (missing_features) is 404, a limits gap (exceeded_limits) 400;
        under fail_fast, no eligible thread or a wait_time over the budget left is
        queue_unavailable, reading again up to ``queue_info_wait`` seconds for a status
        with queue information."""
        assert self._signal is not None
        if self._signal.heard:
            key, self._signal.outcome = self._signal.outcome, None
        else:
            key = CHAT_SIGNALS.outcome_key(self.request_id)
        if key is not None and await self._outcome_of(key) is not None:
            return
        status: ChatStatus | None
        if first is not None:
            self._keep(first)
            status = first
        else:
            status = await self._read()
        while status is None:
            await self._sleep(self._retry_delay())
            status = await self._read()
        gap = gap_error(status)
        if gap is not None:
            raise gap
        if self.fail_fast:
            await self._decide_fail_fast(status)

    async def _decide_fail_fast(self, status: ChatStatus) -> None:
        until = self.clock() + self.budget.queue_info_wait
        while True:
            if status.get("done") or status.get("faulted") or status.get("processing"):
                return
            if not status.get("eligible_threads"):
                raise QueueUnavailable(reason="no eligible worker thread is online")
            wait_time = float(status.get("wait_time") or 0)
            if wait_time > self._left():
                raise QueueUnavailable(
                    reason=f"the estimated wait of {round(wait_time)} s is over the "
                    f"{round(self._left())} s left",
                    retry_after=min(wait_time, 120),
                )
            if _has_queue_info(status) or self.clock() >= until:
                return
            await self._sleep(QUEUE_INFO_RECHECK)
            status = await self._read() or status

    def _outcome(self, status: ChatStatus) -> Reply | None:
        if status.get("faulted"):
            reason = "workers faulted it more times than its limit allows"
            last = status.get("fault_reasons") or []
            if last:
                reason += "; the latest reasons: " + "; ".join(last)
            raise ChatRequestFaulted(reason=reason, metadata={"request_id": self.request_id})
        if status.get("done"):
            reply = Reply.from_status(self.request_id, status)
            if reply is None:
                raise NoGeneration()
            return reply
        return None

    def _check_possible(self, status: ChatStatus) -> float:
        """Raises after the grace; else the seconds until the grace would end (or inf)."""
        if status.get("is_possible", True):
            self._impossible_since = None
            return float("inf")
        now = self.clock()
        if self._impossible_since is None:
            self._impossible_since = now
        left = self._impossible_since + self.budget.grace - now
        if left <= 0:
            waited = round(self.budget.grace)
            raise NoEligibleWorker(reason=f"no online worker could take it for {waited} s")
        return left

    async def reply(self) -> Reply:
        """Wait (signal, recheck, fallback poll) until the request ends.

        Ends done with a generation (the Reply), faulted (502 ChatRequestFaulted), done
        without one (502 no_generation), at the deadline (408), or is_possible false for
        the whole grace (503 no_eligible_worker). A signal naming the outcome key is
        answered from Redis; any other wake, or an outcome Redis cannot give, reads the
        status route. A status read answered 429 or 5xx, or lost, is retried after
        ``backoff`` until the deadline, on the front's service budget."""
        status = self.status
        while True:
            if status is not None:
                reply = self._outcome(status)
                if reply is not None:
                    return reply
                grace_left = self._check_possible(status)
            else:
                grace_left = float("inf")
            if self.failed_reads:
                pause = self._retry_delay()
            else:
                pause = self.budget.poll_interval * random.uniform(*POLL_JITTER)
            await self._sleep(min(pause, grace_left))
            status = await self._reread()
