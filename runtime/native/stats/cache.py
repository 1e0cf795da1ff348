"""A figure kept for a few seconds, so a dashboard polling the public routes costs one
read per process per period, whatever the number of pollers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Kept(Generic[T]):
    """``get(read)``: the value ``read`` gave, read again once ``seconds`` have passed; at
    most one reader at a time (the others wait for it and take its value)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._value: T | None = None
        self._until = 0.0

    def get(self, read: Callable[[], T]) -> T:
        with self._lock:
            now = time.monotonic()
            if self._value is None or now >= self._until:
                self._value = read()
                self._until = time.monotonic() + self.seconds
            return self._value
