"""runtime.observability.metrics.GcPauses: every garbage collection's pause is noted by
its hook and observed, by generation, when flushed; the hook itself observes nothing."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from runtime.observability.metrics import GC_PAUSES_KEPT, GcPauses, HttpMetrics

NAME = "horde_gc_pause_seconds"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def pauses(registry: CollectorRegistry) -> Iterator[GcPauses]:
    started = GcPauses(registry).start()
    try:
        yield started
    finally:
        started.stop()


def count(registry: CollectorRegistry, generation: int) -> float:
    value = registry.get_sample_value(f"{NAME}_count", {"generation": str(generation)})
    assert value is not None
    return value


def test_a_full_collection_is_observed_once_flushed(
    registry: CollectorRegistry, pauses: GcPauses
) -> None:
    gc.collect()
    assert count(registry, 2) == 0  # noted by the hook, not observed yet
    assert any(generation == 2 for generation, _ in pauses.noted)
    pauses.flush()
    assert count(registry, 2) >= 1
    total = registry.get_sample_value(f"{NAME}_sum", {"generation": "2"})
    assert total is not None
    assert total > 0
    assert not pauses.noted


def test_young_collections_are_observed_by_their_generation(
    registry: CollectorRegistry, pauses: GcPauses
) -> None:
    gc.collect(0)
    gc.collect(1)
    pauses.flush()
    assert count(registry, 0) >= 1
    assert count(registry, 1) >= 1


def test_a_stopped_hook_notes_nothing(registry: CollectorRegistry) -> None:
    pauses = GcPauses(registry).start()
    pauses.stop()
    gc.collect()
    assert not pauses.noted


def test_an_unflushed_process_keeps_a_bounded_number_of_pauses(
    registry: CollectorRegistry, pauses: GcPauses
) -> None:
    for _ in range(GC_PAUSES_KEPT + 10):
        gc.collect(0)
    assert len(pauses.noted) == GC_PAUSES_KEPT


def test_each_request_observed_flushes_the_pauses() -> None:
    registry = CollectorRegistry()
    http = HttpMetrics(registry)
    try:
        gc.collect()
        http.observe("GET", "/healthz", 200, 0.001)
        assert count(registry, 2) >= 1
        assert not http.gc.noted
    finally:
        http.gc.stop()


def test_one_hook_times_each_collection_for_every_registry_of_the_process() -> None:
    """Under ``horde-chat up`` the front's and the native API's metrics share one process:
    one hook, each pause noted for both."""
    first, second = GcPauses(CollectorRegistry()).start(), GcPauses(CollectorRegistry()).start()
    try:
        assert len(pause_hooks()) == 1
        gc.collect()
        assert first.noted
        assert list(first.noted) == list(second.noted)
    finally:
        first.stop()
        second.stop()


def pause_hooks() -> list[object]:
    """The GcPauses hooks among the process's gc callbacks."""
    return [hook for hook in gc.callbacks if "GcPauses" in getattr(hook, "__qualname__", "")]
