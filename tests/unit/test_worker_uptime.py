"""runtime.native.queue.jobs.checked_in: a pop's check-in adds the time since the previous
one to the worker's uptime when it was online then and is not in maintenance (upstream's
Worker.check_in), and always moves its last check-in to now. The pop's SQL does the same
(tests/integration/test_native_public_routes.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runtime.native.db.tables import Worker
from runtime.native.queue.jobs import checked_in
from runtime.native.queue.policy import Policy

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
POLICY = Policy()


def worker(seconds_ago: float, maintenance: bool = False) -> Worker:
    return Worker(
        name="w",
        maintenance=maintenance,
        last_check_in=NOW - timedelta(seconds=seconds_ago),
        uptime=10.0,
    )


@pytest.mark.parametrize(
    ("seconds_ago", "maintenance", "uptime"),
    [
        (120.5, False, 130.5),  # online since its last pop: counted
        (POLICY.worker_stale_seconds + 1, False, 10.0),  # stale: back online, nothing counted
        (60, True, 10.0),  # in maintenance: nothing counted
        (-5, False, 10.0),  # a check-in stamped after now (another clock): nothing taken off
    ],
)
def test_a_check_in_counts_the_time_online_since_the_last(seconds_ago, maintenance, uptime):
    checking = worker(seconds_ago, maintenance)
    checked_in(checking, POLICY, NOW)
    assert checking.uptime == uptime
    assert checking.last_check_in == NOW
