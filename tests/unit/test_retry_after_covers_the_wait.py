"""A refusal's Retry-After never asks for less than its own wait (retry-after-ms), rounded up.

flask-limiter writes Retry-After as its window's end in whole seconds rounded down, and the
lane's ``limit_headers`` does the same, so a refusal whose window ends within the current
second said ``Retry-After: 0`` beside ``retry-after-ms: 940``: a client reading only the
seconds came back at once and was refused again."""

from __future__ import annotations

import math
import time

from flask import Flask, Response
from limits import parse

from generated.errors import RateLimited
from runtime.native.api.errors import error_parts
from runtime.native.api.rate_limits import (
    LaneHit,
    _retry_after_covers_the_wait,
    limit_headers,
    make_limiter,
    rate_limited,
)


def test_flask_answers_keep_the_wait_they_carry() -> None:
    def after(**headers: str) -> str | None:
        return _retry_after_covers_the_wait(Response(headers=headers)).headers.get("Retry-After")

    assert after(**{"Retry-After": "0", "retry-after-ms": "940"}) == "1"
    assert after(**{"Retry-After": "1", "retry-after-ms": "1500"}) == "2"
    assert after(**{"Retry-After": "3600", "retry-after-ms": "940"}) == "3600"  # the later
    assert after(**{"Retry-After": "0"}) == "0"  # no wait of its own: flask-limiter's


def test_a_lane_refusal_in_the_windows_last_second_says_at_least_one_second() -> None:
    limiter = make_limiter(Flask("t"), "redis://127.0.0.1:9/0", enabled=True)  # never dialled
    now = time.time()
    while now % 1 > 0.9:  # the window's end must fall within the current second
        time.sleep(0.1)
        now = time.time()
    reset = math.floor(now) + 0.99
    hit = LaneHit(parse("2/second"), ("peer",), True, count=3, reset=reset)
    refused = RateLimited(limit="2 per 1 second", seconds="x", retry_after=reset - now)
    _, _, own = error_parts(refused)
    headers = dict(limit_headers(hit, own, limiter))
    assert int(headers["retry-after-ms"]) > 0
    assert headers["Retry-After"] == "1"


def test_a_refusal_whose_window_end_is_unknown_asks_for_the_specs_wait() -> None:
    refused = rate_limited("2 per 1 second", None)
    assert refused.retry_after == RateLimited.default_retry_after
    assert refused.message.endswith(f"Try again in {RateLimited.default_retry_after} seconds.")
