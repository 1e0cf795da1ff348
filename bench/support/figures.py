"""What every bench computes from its samples: the nearest-rank percentile, and how far a
figure computed from interleaved rounds could move (``bootstrap_interval``)."""

from __future__ import annotations

import random
from collections.abc import Callable


def percentile(values: list[float], p: float) -> float:
    """The ``p``th percentile of ``values`` by nearest rank (in the values' own unit)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def bootstrap_interval(
    rounds: dict[str, list[list[float]]],
    statistic: Callable[[dict[str, list[float]]], float],
    *,
    coverage: float = 90.0,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """The central ``coverage`` % interval of ``statistic`` over a run's rounds drawn again
    with replacement (a bootstrap): how far the figure could have moved had the machine's
    slow and fast moments fallen on other rounds. ``rounds``: every leg's samples, a list a
    round, the same rounds for each leg (one draw takes a round of every leg together);
    ``statistic`` takes every leg's samples pooled. Seeded: a run prints the same interval
    for the same samples."""
    draw = random.Random(seed)
    count = len(next(iter(rounds.values())))
    values = []
    for _ in range(resamples):
        picked = [draw.randrange(count) for _ in range(count)]
        pooled = {leg: [t for i in picked for t in blocks[i]] for leg, blocks in rounds.items()}
        values.append(statistic(pooled))
    tail = (100.0 - coverage) / 2
    return percentile(values, tail), percentile(values, 100.0 - tail)
