"""`BodyThreads`: every submitted call starts at once, idle threads are reused and bounded."""

from __future__ import annotations

import threading

import pytest

from jobs_core.threads import BodyThreads


def test_a_call_never_waits_behind_a_busy_thread_and_idle_threads_are_bounded() -> None:
    pool = BodyThreads(keep_idle=1)
    stuck = threading.Event()
    blocked = pool.submit(stuck.wait, 30)
    # The one thread is busy: the next calls start at once on threads of their own.
    assert [pool.submit(lambda n=n: n * 2).result(timeout=10) for n in range(5)] == [
        0,
        2,
        4,
        6,
        8,
    ]
    assert not blocked.done()
    stuck.set()
    assert blocked.result(timeout=10) is True
    names = {pool.submit(lambda: threading.current_thread().name).result(timeout=10)}
    names |= {pool.submit(lambda: threading.current_thread().name).result(timeout=10)}
    assert len(names) == 1, "sequential calls reuse the idle thread"
    pool.shutdown(wait=True)
    assert pool.alive() == 0
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)


def test_shutdown_cancels_nothing_running_and_daemon_threads_finish_their_call() -> None:
    pool = BodyThreads(keep_idle=2)
    gate = threading.Event()
    running = pool.submit(gate.wait, 30)
    pool.shutdown(wait=False, cancel_futures=True)
    assert not running.cancelled()
    gate.set()
    assert running.result(timeout=10) is True
    threads = [t for t in threading.enumerate() if t.name.startswith("ujobs-body")]
    assert all(t.daemon for t in threads)
