"""Many `ujobs` runs for one test, each a process of its own forked from one interpreter that
imported the CLI (and both drivers, by default) once: a run prints what `python -m
jobs_core.cli ARGS` prints (the same `main`, its logging set up in the run, its own stdout and
stderr), for the cost of a fork instead of an interpreter's imports (about a second of CPU
each).

`python -m tests.cli_forks SPEC` runs the runs SPEC (a JSON file) lists, `at_once` at a time
(forks of one interpreter that imported the modules `preload` names, by default `PRELOAD`),
each `{"args", "env", "cwd", "out", "stop_when"}` and optionally `"err"`: its output (stdout, and
stderr unless `err` names a file of its own) goes to the file `out`; once that holds every text
of `stop_when` (non-empty) the run gets one SIGTERM. A run still going `hang_s` after its start
is killed. Writes `{"ended": [...], "took": [...], "codes": [...]}` (per run: it ended before
the kill; the seconds it took; its exit status, or None) to `SPEC + ".done"`.

`forked(runs, tmp)` is the whole round from a test: each run's exit status, stdout and stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs_core.processes import signal_on_parent_death

#: What the harness imports before its first fork unless the spec names its own `preload`.
PRELOAD = ("jobs_core.cli", "jobs_pg.driver", "jobs_pg.migrate", "jobs_redis.driver")


def _child(run: dict[str, Any], fd: int, err: int, parent: int) -> None:
    """In the fork: become `ujobs ARGS` with the run's environment, directory and output `fd`
    (stderr `err`); killed with `parent` (a run never outlives the harness)."""
    code: Any = 1
    try:
        signal_on_parent_death(signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
        os.dup2(fd, 1)
        os.dup2(err, 2)
        os.close(fd)
        if err != fd:
            os.close(err)
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


def run_all(spec: dict[str, Any]) -> tuple[list[bool], list[float], list[int | None]]:
    runs: list[dict[str, Any]] = spec["runs"]
    waiting = list(range(len(runs)))
    live: dict[int, tuple[int, float, bool]] = {}  # pid: (run, started, signalled)
    ended = [False] * len(runs)
    took = [0.0] * len(runs)
    codes: list[int | None] = [None] * len(runs)
    try:
        _run_all(spec, runs, waiting, live, ended, took, codes)
    finally:
        for pid in live:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    return ended, took, codes


def _run_all(
    spec: dict[str, Any],
    runs: list[dict[str, Any]],
    waiting: list[int],
    live: dict[int, tuple[int, float, bool]],
    ended: list[bool],
    took: list[float],
    codes: list[int | None],
) -> None:
    while waiting or live:
        while waiting and len(live) < spec["at_once"]:
            i = waiting.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            # Made before the fork: the file is there once the run is.
            fd = os.open(runs[i]["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = fd
            if runs[i].get("err"):
                err = os.open(runs[i]["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:
                _child(runs[i], fd, err, parent)
            os.close(fd)
            if err != fd:
                os.close(err)
            live[pid] = (i, time.monotonic(), False)
        for pid, (i, started, signalled) in list(live.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                ended[i] = True
                codes[i] = os.waitstatus_to_exitcode(status)
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
    # Imported once, before any fork: what every run would import on its own (the CLI imports
    # a command's module, and a driver, only when a run names them).
    import importlib

    for module in spec.get("preload", PRELOAD):
        importlib.import_module(module)

    ended, took, codes = run_all(spec)
    with open(path + ".done", "w", encoding="utf-8") as f:
        json.dump({"ended": ended, "took": took, "codes": codes}, f)


@dataclass(frozen=True)
class Forked:
    """What one forked run did, as `subprocess.run` would answer it."""

    args: list[str]
    returncode: int | None
    stdout: str
    stderr: str


def forked(
    runs: list[tuple[list[str], dict[str, str], Path]],
    tmp: Path,
    *,
    at_once: int = 4,
    hang_s: float = 60.0,
    preload: tuple[str, ...] = PRELOAD,
) -> list[Forked]:
    """Each `(args, env, cwd)` run as `ujobs ARGS`, a fork of one interpreter that imported
    `preload` (see the module), `at_once` at a time; answers each one's exit status (None:
    killed at `hang_s`), stdout and stderr, in order. For runs that do not depend on each
    other."""
    tmp.mkdir(parents=True, exist_ok=True)
    spec = {
        "at_once": at_once,
        "hang_s": hang_s,
        "preload": list(preload),
        "runs": [
            {
                "args": args,
                "env": env,
                "cwd": str(cwd),
                "out": str(tmp / f"run{i}.out"),
                "err": str(tmp / f"run{i}.err"),
                "stop_when": [],
            }
            for i, (args, env, cwd) in enumerate(runs)
        ],
    }
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    # The harness gets this process's environment as os.environ has it, without COLUMNS and
    # LINES: rich's console, made once before the forks, keeps a size it finds then for every
    # run (inheriting the environment as it stood, runs printed at a width none asked for).
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    subprocess.run(
        [sys.executable, "-m", "tests.cli_forks", str(path)],
        cwd=Path(__file__).resolve().parents[1],  # this checkout's `tests` and code, first
        env=env,
        check=True,
        timeout=hang_s * -(-len(runs) // at_once) + 60,  # each run is killed at hang_s
    )
    codes = json.loads((tmp / "spec.json.done").read_text(encoding="utf-8"))["codes"]
    read = lambda name: (tmp / name).read_text(encoding="utf-8", errors="replace")  # noqa: E731
    return [
        Forked(args, code, read(f"run{i}.out"), read(f"run{i}.err"))
        for i, ((args, _, _), code) in enumerate(zip(runs, codes, strict=True))
    ]


if __name__ == "__main__":
    main()
