"""The Lua scripts, one per driver operation: loaded from `lua/<method>.lua` with their includes.

A script file may hold `--!include <file>` lines; each is replaced by `lua/includes/<file>`
before the source is hashed, so the server sees one self-contained script per operation.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib.resources import files
from typing import Final

#: Every operation with a script, named after its `JobDriver` method.
SCRIPT_NAMES: Final = (
    "counter_fold",
    "counter_read",
    "event_find",
    "event_publish",
    "event_purge",
    "job_ack",
    "job_cancel_many",
    "job_claim",
    "job_enqueue",
    "job_enqueue_many",
    "job_get_many",
    "job_heartbeat",
    "job_list",
    "job_nack",
    "job_progress",
    "job_promote",
    "job_purge",
    "job_remove",
    "job_requeue_many",
    "job_watch",
    "join_enqueue",
    "join_pending",
    "lease_abandon",
    "lease_holders",
    "lease_purge",
    "lease_release",
    "lease_renew",
    "lease_take",
    "migrate",
    # The lease half of `migrate` (holdings stored before their expiry index).
    "migrate_leases",
    # The webhook half of `migrate` (attempts stored before their age index).
    "migrate_webhooks",
    "pause_add",
    "pause_list",
    "pause_remove",
    "posting_balances",
    "posting_get",
    "posting_put",
    "queue_demand",
    "queue_stats",
    "step_list",
    "step_put",
    "sweep_advance",
    "sweep_checkpoint",
    "sweep_finish",
    "sweep_list",
    "sweep_start",
    "task_arm",
    "task_fire",
    "task_marks",
    # -- webhooks --
    "webhook_attempt_list",
    "webhook_attempt_purge",
    "webhook_attempt_put",
    "webhook_endpoint_enable",
    "webhook_endpoint_get",
    "webhook_endpoint_list",
    "webhook_endpoint_put",
    "worker_beat",
    "worker_forget",
    "worker_list",
    "worker_purge",
    # -- consumers --
    "consumer_cursor_get",
    "consumer_cursor_put",
    "consumer_list",
)

_INCLUDE: Final = "--!include "


@dataclass(frozen=True, slots=True)
class LuaScript:
    """One operation's self-contained source and the SHA1 the server knows it by."""

    name: str
    source: str
    sha: str


def load_source(name: str) -> str:
    """The source of `lua/<name>.lua` with every include inlined."""
    root = files("jobs_redis") / "lua"
    lines = []
    for line in (root / f"{name}.lua").read_text(encoding="utf-8").splitlines():
        if line.startswith(_INCLUDE):
            include = line[len(_INCLUDE) :].strip()
            lines.append((root / "includes" / include).read_text(encoding="utf-8"))
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


@functools.cache
def load_all() -> dict[str, LuaScript]:
    """Every operation's script, by name (read once per process; do not mutate)."""
    out: dict[str, LuaScript] = {}
    for name in SCRIPT_NAMES:
        source = load_source(name)
        out[name] = LuaScript(name, source, hashlib.sha1(source.encode()).hexdigest())
    return out
