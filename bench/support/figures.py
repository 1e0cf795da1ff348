"""What every bench computes from its samples: the nearest-rank percentile."""

from __future__ import annotations


def percentile(values: list[float], p: float) -> float:
    """The ``p``th percentile of ``values`` by nearest rank (in the values' own unit)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
