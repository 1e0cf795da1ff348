"""CPU time a group of processes spent, read from Linux's /proc: what a leg of a bench cost
the machine, beside how long its requests took."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    # the fields after the command's closing parenthesis (a command may hold spaces)
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def parent_pid(pid: int) -> int:
    """The process that started ``pid`` (a Postgres backend's is the server's postmaster)."""
    return int(_stat(pid)[1])


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def cpu_seconds(pid: int, *, descendants: bool = True) -> float:
    """User and system CPU of ``pid``; with ``descendants``, also of its live descendants
    and of the children it has waited for (a Postgres server's exited backends)."""
    if not descendants:
        return sum(int(value) for value in _stat(pid)[11:13]) / TICKS  # utime, stime
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = _stat(current)
            pending += _children(current)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited since it was listed
        # utime, stime, cutime, cstime: fields 14-17 of proc(5), 12-15 after the command
        total += sum(int(value) for value in fields[11:15]) / TICKS
    return total


class CpuMeter:
    """CPU of named process groups between ``start`` and ``stop``, in seconds."""

    def __init__(self, pids: dict[str, int], alone: frozenset[str] = frozenset()) -> None:
        """``alone``: the names whose process is counted without its descendants (the
        bench's own process, whose children are the other processes and the client)."""
        self.pids = pids
        self.alone = alone
        self.started: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    def start(self) -> None:
        self.started = {name: self._read(name) for name in self.pids}

    def stop(self) -> None:
        self.spent = {name: self._read(name) - self.started[name] for name in self.pids}

    def _read(self, name: str) -> float:
        return cpu_seconds(self.pids[name], descendants=name not in self.alone)
