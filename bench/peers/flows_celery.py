"""Celery in `bench/flows.py`: `chord(group(child.s(i) for i in range(N)), callback.s(key))`
on one Redis as both broker and result backend (Celery's native Redis chord join: each child's
result is pushed to the group's list and counted by a script; the last child's process reads
the list back and sends the callback). Worked by
`celery -A bench.peers.flows_celery worker ...` from Celery's own virtualenv.

    python -m bench.peers.flows_celery N KEY

(with that virtualenv's interpreter) sends a warm-up chord of 10 and waits for it (the worker
is up, every connection made), then the measured chord of N, polls the callback's result key
until it says SUCCESS, reads every child's `date_done`, and prints one JSON line. It imports
only the standard library and Celery (with redis-py, its transport and backend).

BENCH_CELERY_BROKER and BENCH_CELERY_BACKEND name the Redis dbs; the callback appends
"callback <key> 1 <wall time>" to BENCH_FLOWS_FILE as it starts, like ours' parent."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from typing import Any

from celery import Celery, chord, group

app = Celery(
    "bench_flows",
    broker=os.environ["BENCH_CELERY_BROKER"],
    backend=os.environ["BENCH_CELERY_BACKEND"],
)

POLL_SECONDS = 0.005
TIMEOUT_SECONDS = 600.0


def mark(phase: str, key: str) -> None:
    path = os.environ.get("BENCH_FLOWS_FILE")
    if path:
        with open(path, "a") as side:
            side.write(f"{phase} {key} 1 {time.time()}\n")


@app.task(name="flows.child")
def child(i: int) -> None:
    return None


@app.task(name="flows.callback")
def callback(results: list[Any], key: str) -> int:
    mark("callback", key)
    return len(results)


def _meta(raw: bytes | None) -> dict[str, Any] | None:
    return None if raw is None else dict(json.loads(raw))


def _done_at(meta: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(meta["date_done"])).timestamp()


def measure(n: int, key: str) -> dict[str, Any]:
    backend: Any = app.backend
    client = backend.client
    warm = chord(group(child.s(i) for i in range(10)))(callback.s(f"{key}-warm"))
    warm.get(timeout=TIMEOUT_SECONDS)

    header = group(child.s(i) for i in range(n))
    sent_at = time.time()
    began = time.perf_counter()
    result = chord(header)(callback.s(key))
    sent = time.perf_counter()
    meta_key = backend.get_key_for_task(result.id)
    before = sent
    while True:
        polled = time.perf_counter()
        meta = _meta(client.get(meta_key))
        if meta is not None and meta["status"] in ("SUCCESS", "FAILURE"):
            break
        if polled - began > TIMEOUT_SECONDS:
            raise SystemExit(f"celery: no callback result after {TIMEOUT_SECONDS:.0f} s")
        before = polled
        time.sleep(POLL_SECONDS)
    if meta["status"] != "SUCCESS" or meta["result"] != n:
        raise SystemExit(f"celery: the callback ended {meta['status']}: {meta['result']!r}")
    ids = [r.id for r in result.parent.results]
    children: list[float] = []
    for at in range(0, len(ids), 1000):
        keys = [backend.get_key_for_task(i) for i in ids[at : at + 1000]]
        children += [_done_at(dict(json.loads(raw))) for raw in client.mget(keys)]
    return {
        "sent_at": sent_at,
        "send_s": sent - began,
        "total_s": (before + polled) / 2 - began,
        "first_child_done": min(children),
        "last_child_done": max(children),
        "parent_done": _done_at(meta),
        "children": len(children),
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), sys.argv[2])), flush=True)
