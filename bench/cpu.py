"""CPU seconds from /proc: one process with its reaped children, and the Postgres servers."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, list[str]]:
    """(comm, the fields after it) of /proc/<pid>/stat; comm may hold spaces and parens."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    head, _, tail = raw.rpartition(")")
    return head.partition("(")[2], tail.split()


def _seconds(fields: list[str]) -> float:
    # utime, stime, cutime, cstime (stat fields 14-17). The reaped children count: RQ forks a
    # work horse per job, and the postmaster reaps every backend that exits mid-measurement.
    return sum(int(f) for f in fields[11:15]) / _TICK


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of `pid` and of its children it has reaped."""
    return _seconds(_stat(pid)[1])


def backend_cpu(pid: int) -> float:
    """User + system CPU seconds of one Postgres backend (it has no children)."""
    return sum(int(f) for f in _stat(pid)[1][11:13]) / _TICK


def postgres_cpu() -> float:
    """User + system CPU seconds of every `postgres` process on this machine, with the
    backends that exited (charged to the postmaster that reaped them)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm, fields = _stat(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited between the listing and the read: its parent has it now
        if comm == "postgres":
            total += _seconds(fields)
    return total


def cluster_cpu(postmaster: int) -> float:
    """User + system CPU seconds of one Postgres cluster: the postmaster with every child it
    reaped, plus each child still running. (`postgres_cpu` counts every server on the machine,
    the one on 5432 too.)"""
    total = process_cpu(postmaster)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int(_stat(int(entry.name))[1][1]) == postmaster:
                total += backend_cpu(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # exited between the listing and the read: the postmaster reaped it
    return total
