"""The native API's rate-limit table (generated from spec/rate_limits.yaml) against the
chat front it serves: the front's service budget covers every wait it may hold open."""

from __future__ import annotations

import pytest
from flask import Flask

from generated.rate_limits import (
    RATE_LIMITS,
    SERVICE_FRONT_OPEN_WAITS,
    SERVICE_READS_PER_WAIT_PER_MINUTE,
)
from runtime.front.config import FrontConfig
from runtime.front.waiter import POLL_JITTER, QUEUE_INFO_RECHECK
from runtime.native.api.rate_limits import make_limiter

SIGNALS_PER_REQUEST = 3
"""Completion signals one request can wake its wait with (started, progress end, done)."""


def per_minute(amount: str) -> int:
    count, per = amount.split(" per ")
    assert per == "minute"
    return int(count)


def test_the_service_budget_covers_every_open_wait_of_a_front() -> None:
    front = FrontConfig(redis_url="unix:///unused")
    assert front.global_cap == SERVICE_FRONT_OPEN_WAITS
    # a wait's busiest minute: its fail_fast rechecks, the jittered fallback poll, signals
    rechecks = front.queue_info_wait / QUEUE_INFO_RECHECK
    polls = 60 / (front.poll_interval * POLL_JITTER[0])
    assert rechecks + polls + SIGNALS_PER_REQUEST <= SERVICE_READS_PER_WAIT_PER_MINUTE
    (status,) = RATE_LIMITS["chat_status"]
    assert status.service is not None
    budget = SERVICE_FRONT_OPEN_WAITS * SERVICE_READS_PER_WAIT_PER_MINUTE
    assert per_minute(status.service) >= budget


def test_a_client_gets_only_its_own_limits_through_the_front() -> None:
    """A submission is the client's: no service budget on a submit route."""
    for operation in ("chat_async", "text_async"):
        assert all(limit.service is None for limit in RATE_LIMITS[operation])


@pytest.mark.parametrize("enabled", [True, False])
def test_the_limiter_leaves_no_request_hook_enabled_or_not(enabled: bool) -> None:
    # Its before_request check counts only default and application limits, which it has
    # none of; a disabled limiter (HORDE_RATE_LIMITS off, the benches) registers no hook to
    # take away, and the native API must still start.
    app = Flask("limited")
    make_limiter(app, "redis://127.0.0.1:1", enabled)
    assert app.before_request_funcs.get(None, []) == []
