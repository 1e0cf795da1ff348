"""Prometheus metrics every service exposes (``prometheus-client``, one process for now).

``HttpMetrics(registry)``: ``horde_http_requests_total{method,route,status}`` and
``horde_http_request_duration_seconds{method,route}``. A route is the matched route's
template (``/api/v2/generate/text/status/{id}``), ``unmatched`` for a path no route holds,
so a client cannot grow the label set. ``exposition(registry, *collectors)`` renders a
registry plus collectors built for this scrape (gauges a service computes from its stores).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST
UNMATCHED = "unmatched"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Seconds; the front's waits last up to minutes, so the buckets reach five."""


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "horde_http_requests",
            "HTTP requests answered, by route and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "horde_http_request_duration_seconds",
            "Seconds from a request's arrival to its response (a stream: to its end).",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)


def exposition(registry: CollectorRegistry, collectors: Iterable[Collector] = ()) -> bytes:
    """The text exposition of ``registry`` and of ``collectors`` (computed now)."""
    out = generate_latest(registry)
    extra = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        extra.register(collector)
    return out + generate_latest(extra)
