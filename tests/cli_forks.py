"""Many `ujobs` runs for one test, each a process of its own forked from one interpreter that
imported the CLI and both drivers once: a run prints what `python -m jobs_core.cli ARGS` prints
(the same `main`, its logging set up in the run, its own stdout and stderr), for the cost of a
fork instead of an interpreter's imports (about a second of CPU each).

`python -m tests.cli_forks SPEC` runs the runs SPEC (a JSON file) lists, `at_once` at a time,
each `{"args", "env", "cwd", "out", "stop_when"}`: its output (stdout and stderr) goes to the file
`out`; once that holds every text of `stop_when` (non-empty) the run gets one SIGTERM. A run
still going `hang_s` after its start is killed. Writes `{"ended": [...], "took": [...]}` (per
run: it ended before the kill; the seconds it took) to `SPEC + ".done"`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from jobs_core.processes import signal_on_parent_death


def _child(run: dict[str, Any], fd: int, parent: int) -> None:
    """In the fork: become `ujobs ARGS` with the run's environment, directory and output `fd`;
    killed with `parent` (a run never outlives the harness)."""
    code: Any = 1
    try:
        signal_on_parent_death(signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.chdir(run["cwd"])
        os.environ.clear()
        os.environ.update(run["env"])
        sys.argv = ["ujobs", *run["args"]]
        from jobs_core.cli import main

        main(run["args"], prog_name="ujobs")
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # nothing left to tell it to
                stream.flush()
        os._exit(code if isinstance(code, int) else 1)


def run_all(spec: dict[str, Any]) -> tuple[list[bool], list[float]]:
    runs: list[dict[str, Any]] = spec["runs"]
    waiting = list(range(len(runs)))
    live: dict[int, tuple[int, float, bool]] = {}  # pid: (run, started, signalled)
    ended = [False] * len(runs)
    took = [0.0] * len(runs)
    try:
        _run_all(spec, runs, waiting, live, ended, took)
    finally:
        for pid in live:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    return ended, took


def _run_all(
    spec: dict[str, Any],
    runs: list[dict[str, Any]],
    waiting: list[int],
    live: dict[int, tuple[int, float, bool]],
    ended: list[bool],
    took: list[float],
) -> None:
    while waiting or live:
        while waiting and len(live) < spec["at_once"]:
            i = waiting.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            # Made before the fork: the file is there once the run is.
            fd = os.open(runs[i]["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:
                _child(runs[i], fd, parent)
            os.close(fd)
            live[pid] = (i, time.monotonic(), False)
        for pid, (i, started, signalled) in list(live.items()):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                ended[i] = True
                took[i] = round(time.monotonic() - started, 2)
                del live[pid]
                continue
            if time.monotonic() - started > spec["hang_s"]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                del live[pid]
                continue
            stop_when = runs[i]["stop_when"]
            if stop_when and not signalled:
                with open(runs[i]["out"], encoding="utf-8", errors="replace") as f:
                    text = f.read()
                if all(t in text for t in stop_when):
                    os.kill(pid, signal.SIGTERM)
                    live[pid] = (i, started, True)
        time.sleep(0.02)


def main() -> None:
    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    # Imported once, before any fork: what every run would import on its own.
    import jobs_core.cli  # noqa: F401
    import jobs_pg.driver
    import jobs_pg.migrate  # noqa: F401
    import jobs_redis.driver  # noqa: F401

    ended, took = run_all(spec)
    with open(path + ".done", "w", encoding="utf-8") as f:
        json.dump({"ended": ended, "took": took}, f)


if __name__ == "__main__":
    main()
