"""`ujobs` as a new user meets it: every refusal one line with its `X_*` code and exit 2, seconds
on every option, `--version`, no silent memory store, and JSON log lines for `--log-format json`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.cli_forks import Forked, forked
from tests.core.support import ROOT

JOBS_MODULE = (
    "import logging\n"
    "from jobs_core.job import job\n"
    "@job(tenant='none', idempotency_key=lambda i: str(i['n']))\n"
    "async def hello(input, ctx):\n"
    "    return None\n"
)


def run(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, pre: str = ""
) -> subprocess.CompletedProcess[str]:
    """`ujobs ARGS` in a subprocess with `UJOBS_DRIVER` unset unless `env` sets it; `pre` is
    Python run first in the same process (to hide an installed library, as a missing extra)."""
    base = {k: v for k, v in os.environ.items() if k != "UJOBS_DRIVER"}
    code = f"{pre}\nimport sys\nfrom jobs_core.cli import main\nsys.argv[0] = 'ujobs'\nmain()\n"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, **(env or {})},
        timeout=120,
    )


def run_forked(tmp: Path, *runs: tuple[Sequence[str], Path, dict[str, str] | None]) -> list[Forked]:
    """Each `(args, cwd, env)` as `run` would, but a fork of one interpreter that imported the
    CLI once (tests/cli_forks.py): its own process, exit status, stdout and stderr, without an
    interpreter's imports each (a second of CPU). For runs that do not depend on each other."""
    base = {k: v for k, v in os.environ.items() if k != "UJOBS_DRIVER"}
    # The memory store's runs: the CLI alone is imported before the forks, as `run` would.
    return forked(
        [(list(a), {**base, **(env or {})}, cwd) for a, cwd, env in runs],
        tmp,
        preload=("jobs_core.cli", "jobs_core.cli.run"),
    )


def one_line_refusal(done: subprocess.CompletedProcess[str] | Forked, code: str) -> str:
    """The refusal's single line, checked: exit 2, its code, no traceback, nothing else."""
    out = (done.stdout + done.stderr).strip()
    assert done.returncode == 2, out
    assert "Traceback" not in out, out
    assert out.count("\n") == 0, out
    assert out.startswith(f"{code}: "), out
    return out


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "myjobs.py").write_text(JOBS_MODULE, encoding="utf-8")
    (tmp_path / "nojobs.py").write_text("X = 1\n", encoding="utf-8")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n", "utf-8")
    (tmp_path / "typo.py").write_text("X = 1\n\ndef f(:\n    pass\n", "utf-8")
    # What a Celery task becomes on a first try: no key function, or no tenant at all.
    keyless = "from jobs_core import job\n@job(tenant='none')\ndef add(input, ctx):\n    return 1\n"
    (tmp_path / "keyless.py").write_text(keyless, "utf-8")
    untenanted = "from jobs_core import job\n@job()\ndef add(input, ctx):\n    return 1\n"
    (tmp_path / "untenanted.py").write_text(untenanted, "utf-8")
    return tmp_path


def test_version(tmp_path: Path) -> None:
    version, *bares = run_forked(
        tmp_path, (["--version"], ROOT, None), ([], ROOT, None), (["db"], ROOT, None)
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "ujobs 0.1.0"
    for done in bares:  # a bare group asks for its help, not a refusal
        assert done.returncode == 0 and "Commands:" in done.stdout, done.stdout + done.stderr


def test_a_missing_extra_is_one_line_naming_it_with_its_brackets() -> None:
    hide = "import sys\nfor m in ('redis', 'psycopg', 'sqlalchemy'): sys.modules[m] = None"
    for url, extra in (("redis://127.0.0.1:1/0", "redis"), ("postgresql://h/db", "pg")):
        done = run("worker", "json", "--driver", url, pre=hide)
        line = one_line_refusal(done, "X_DRIVER_NOT_INSTALLED")
        assert f"pip install 'ultimat3-jobs[{extra}]'" in line


def test_an_unknown_module_is_one_line(app: Path, tmp_path: Path) -> None:
    mem = ["--driver", "memory"]
    worker, enqueue, missing, broken, typo = run_forked(
        tmp_path / "runs",
        (["worker", "nosuch_module", *mem], app, None),
        (["enqueue", "nosuch_module", "hello", "{}", *mem], app, None),
        (["worker", "missing/file.py", *mem], app, None),
        (["worker", "broken", *mem], app, None),
        (["worker", "typo", *mem], app, None),
    )
    for done in (worker, enqueue):
        line = one_line_refusal(done, "X_CLI_MODULE_INVALID")
        assert "nosuch_module" in line
    one_line_refusal(missing, "X_CLI_MODULE_INVALID")
    line = one_line_refusal(broken, "X_CLI_MODULE_INVALID")
    assert "failed at broken.py:1: RuntimeError: boom at import" in line
    # A module that does not parse has no frame of its own: the place is the syntax error's,
    # not importlib's (it was `at <frozen importlib._bootstrap>:241`).
    line = one_line_refusal(typo, "X_CLI_MODULE_INVALID")
    assert "failed at typo.py:3: SyntaxError: invalid syntax (-vv" in line, line


def test_a_module_without_jobs_is_its_own_refusal(app: Path, tmp_path: Path) -> None:
    mem = ["--driver", "memory"]
    for done in run_forked(
        tmp_path / "runs",
        (["worker", "nojobs", *mem], app, None),
        (["enqueue", "nojobs", "hello", "{}", *mem], app, None),
    ):
        assert "nojobs" in one_line_refusal(done, "X_CLI_NO_JOBS")


def test_a_first_try_without_a_key_or_a_tenant_is_told_what_to_add(
    app: Path, tmp_path: Path
) -> None:
    """A job declared with no idempotency key, enqueued from the CLI without `--key`, is refused
    naming `--key`; a `@job()` with no tenant is refused by its code naming `tenant=`, not by
    Python's TypeError about a missing argument."""
    mem = ["--driver", "memory"]
    keyless, keyed, untenanted = run_forked(
        tmp_path / "runs",
        (["enqueue", "keyless", "add", "{}", *mem], app, None),
        (["enqueue", "keyless", "add", "{}", "--key", "first", *mem], app, None),
        (["worker", "untenanted", *mem], app, None),
    )
    assert "--key" in one_line_refusal(keyless, "X_JOB_KEY_REQUIRED")
    assert keyed.returncode == 0 and '"deduped": false' in keyed.stdout, keyed.stderr
    line = one_line_refusal(untenanted, "X_CLI_MODULE_INVALID")
    assert "X_JOB_TENANT_REQUIRED" in line and "tenant=" in line and "TypeError" not in line


def test_worker_and_enqueue_never_fall_back_to_memory(app: Path, tmp_path: Path) -> None:
    enqueue = ["enqueue", "myjobs", "hello", '{"n": 1}']
    *unnamed, named, from_env = run_forked(
        tmp_path / "runs",
        (["worker", "myjobs"], app, None),
        (enqueue, app, None),
        (["jobs", "list"], app, None),
        # Asked for explicitly, on the command line or in the environment, memory is fine.
        ([*enqueue, "--driver", "memory"], app, None),
        (enqueue, app, {"UJOBS_DRIVER": "memory"}),
    )
    for done, command in zip(unnamed, ("worker", "enqueue", "jobs list"), strict=True):
        line = one_line_refusal(done, "X_CLI_DRIVER_REQUIRED")
        assert "--driver memory" in line and "UJOBS_DRIVER" in line
        # The command the user typed (it read "ujobs operator commands needs --driver URL").
        assert line.startswith(f"X_CLI_DRIVER_REQUIRED: ujobs {command} needs --driver"), line
    for done in (named, from_env):
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["deduped"] is False
        # Done as asked, but said plainly: no worker will ever see that job.
        assert "the memory store lives in this process alone" in done.stderr, done.stderr


def test_the_driver_url_comes_from_the_environment_and_help_says_so(
    app: Path, tmp_path: Path
) -> None:
    done, *helps = run_forked(
        tmp_path / "runs",
        (["enqueue", "myjobs", "hello", "{}"], app, {"UJOBS_DRIVER": "nosuch://h"}),
        (["worker", "--help"], ROOT, None),
        (["enqueue", "--help"], ROOT, None),
        (["db", "upgrade", "--help"], ROOT, None),
    )
    assert "nosuch" in one_line_refusal(done, "X_DRIVER_URL_INVALID")
    for shown in helps:
        assert "UJOBS_DRIVER" in shown.stdout, shown.stdout + shown.stderr


def test_a_misspelt_url_option_is_one_line_naming_it(tmp_path: Path) -> None:
    """`?shema=` / `?prefx=`: refused before any connection (port 1 answers nothing), not a
    traceback from psycopg or redis-py at the first call."""
    pg, outbox, redis, known = run_forked(
        tmp_path / "runs",
        (["queues", "--driver", "postgresql://postgres@127.0.0.1:1/test?shema=app"], ROOT, None),
        (["outbox", "--outbox", "postgresql://postgres@127.0.0.1:1/test?shema=app"], ROOT, None),
        (["queues", "--driver", "redis://127.0.0.1:1/0?prefx=app"], ROOT, None),
        # A libpq parameter and redis-py's own options still reach their libraries.
        (["queues", "--driver", "redis://127.0.0.1:1/0?prefix=app&client_name=me"], ROOT, None),
    )
    for done in (pg, outbox):
        line = one_line_refusal(done, "X_DRIVER_URL_INVALID")
        assert '"shema"' in line and "options are schema, pool_size" in line, line
    line = one_line_refusal(redis, "X_DRIVER_URL_INVALID")
    assert "'prefx'" in line and "options are prefix" in line, line
    assert "X_DRIVER_UNAVAILABLE" in one_line_refusal(known, "X_DRIVER_UNAVAILABLE")


def test_usage_errors_and_bad_values_are_typed_refusals(app: Path, tmp_path: Path) -> None:
    mem = ["--driver", "memory"]
    bads = ("nan", "-1", "inf")
    option, missing, unregistered, unparsed, *delays, lease = run_forked(
        tmp_path / "runs",
        (["worker", "--no-such-option"], ROOT, None),
        (["enqueue", "myjobs"], app, None),
        (["enqueue", "myjobs", "nope", "{}", *mem], app, None),
        (["enqueue", "myjobs", "hello", "{", *mem], app, None),
        *(
            (["enqueue", "myjobs", "hello", '{"n": 1}', "--delay", b, *mem], app, None)
            for b in bads
        ),
        (["worker", "myjobs", "--lease", "0", *mem], app, None),
    )
    one_line_refusal(option, "X_CLI_USAGE_INVALID")
    one_line_refusal(missing, "X_CLI_USAGE_INVALID")
    assert "hello" in one_line_refusal(unregistered, "X_JOB_NOT_REGISTERED")
    one_line_refusal(unparsed, "X_JOB_INPUT_INVALID")
    assert len(delays) == len(bads)
    for done in delays:
        assert "--delay" in one_line_refusal(done, "X_CLI_USAGE_INVALID")
    assert "--lease" in one_line_refusal(lease, "X_CLI_USAGE_INVALID")


def test_every_duration_is_in_seconds_options_and_banner_alike(tmp_path: Path) -> None:
    """Each option that takes a duration says seconds and takes a fraction; the worker's banner
    shows its lease and the jobs' timeouts in seconds too."""
    from jobs_core.cli import _print_plan, console
    from jobs_core.job import job
    from jobs_core.worker import Worker
    from jobs_memory import MemoryDriver

    @job(tenant="none", timeout=1.5)
    async def slow(input: object, ctx: object) -> None:
        return None

    driver = MemoryDriver()
    with console.capture() as cap:
        _print_plan(Worker(driver, [slow], lease=2.5), [slow], driver, loop="asyncio")
    banner = cap.get()
    assert "lease 2.5 s" in banner and "1.5 s" in banner and " ms" not in banner
    worker, enqueue = run_forked(
        tmp_path, (["worker", "--help"], ROOT, None), (["enqueue", "--help"], ROOT, None)
    )
    helps = {"worker": worker.stdout, "enqueue": enqueue.stdout}
    assert "--lease SECONDS" in helps["worker"] and "--drain-timeout SECONDS" in helps["worker"]
    assert "--delay SECONDS" in helps["enqueue"]
    for text in helps.values():
        assert " ms" not in text and "millisecond" not in text and "econds" in text


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://reporting_app:Pw-s3cret-pw@db-primary-01.eu-west-3.internal"
        ".example.com:5432/reporting?schema=ujobs_reporting_tenants",
        "redis://default:Pw-s3cret-pw@cache-primary-01.eu-west-3.internal.example.com:6379/4"
        "?prefix=ujobs-reporting-tenants",
    ],
)
def test_the_worker_banner_keeps_each_line_within_80_columns(url: str) -> None:
    """A long store URL, a dozen queues, the default retention and three rate limits: each
    banner line holds 80 columns (a terminal of 80 wrapped the settings line, the retention
    and the first line in the middle of a word); the URL is elided in its middle, its password
    masked and its schema or prefix kept; the queue list says how many it leaves out; no
    setting is lost."""
    from rich.cells import cell_len

    from jobs_core.cli import _print_plan, console
    from jobs_core.job import JobRegistry, job
    from jobs_core.leases import RateLimit
    from jobs_core.urls import driver_from_url
    from jobs_core.worker import Worker

    @job(tenant="none", registry=JobRegistry())
    async def report(input: object, ctx: object) -> None:
        return None

    driver = driver_from_url(url)
    queues = [f"reports-{region}-{n}" for region in ("eu", "us", "ap") for n in range(4)]
    limits = [RateLimit(100, per=60), RateLimit(10, per=1, by="queue")]
    limits.append(RateLimit(5, per=0.5, by="tenant"))
    w = Worker(driver, [report], queues=queues, lease=2.5, rate_limits=limits)
    with console.capture() as cap:
        _print_plan(w, [report], driver, loop="uvloop")
    text = cap.get()
    banner = text.splitlines()  # the jobs' table, one short job, is narrower than 80 too
    assert all(cell_len(line) <= 80 for line in banner), text
    assert banner[0].startswith("ujobs worker " + w.worker_id[:20]), banner
    assert "Pw-s3cret-pw" not in text, text
    assert "***@" in text or "://\u2026" in text, text  # masked, or cut with the user
    assert "ujobs_reporting_tenants" in text or "ujobs-reporting-tenants" in text, text
    assert "-01.eu-west-3.internal.example.com:" in text  # cut after its scheme if at all
    assert "reports-eu-0, " in text and "more)" in text, text
    flat = " ".join(line.strip() for line in banner)
    for setting in (
        "concurrency 50",
        "max in flight 50",
        "lease 2.5 s",
        "loop uvloop",
        "completed 86400 s",
        "cancelled 86400 s",
        "failed 604800 s",
        "dead 604800 s",
        "webhook_attempts 604800 s",
        "100/60 s",
        "10/1 s per queue",
        "5/0.5 s per tenant",
    ):
        assert setting in flat, (setting, banner)


def test_log_format_json_prints_one_object_per_line_with_extra_fields(tmp_path: Path) -> None:
    (tmp_path / "logjobs.py").write_text(
        JOBS_MODULE + "log = logging.getLogger('logjobs')\n"
        "log.debug('a detail')\n"
        "log.warning('hello %s', 'there', extra={'job_id': 'j1', 'job_name': 'hello',"
        " 'queue': 'default', 'attempt': 2, 'worker_id': 'w9'})\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    log.exception('it broke', extra={'job_id': 'j2'})\n",
        encoding="utf-8",
    )
    base = [sys.executable, "-m", "jobs_core.cli", "-vv", "worker", "logjobs", "--quiet"]
    lines: dict[str, list[str]] = {}
    stdout: dict[str, str] = {}
    for fmt in ("json", "text"):
        proc = subprocess.Popen(
            [*base, "--driver", "memory", "--log-format", fmt],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            # The banner: a table on stdout, or (json) the `jobs.worker.plan` line on stderr.
            banner, seen = (
                (proc.stderr, "jobs.worker.plan")
                if fmt == "json"
                else (proc.stdout, "ujobs worker")
            )
            assert banner is not None
            first: list[str] = []
            deadline = time.monotonic() + 60
            while seen not in (first or [""])[-1]:
                first.append(banner.readline())
                assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            # Read through the same buffered files the banner was read from (communicate()
            # would bypass what their buffers already hold); the little left fits the pipes.
            assert proc.stdout is not None and proc.stderr is not None
            out, err = proc.stdout.read(), proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        if fmt == "json":
            err = "".join(first) + err
        stdout[fmt] = out
        lines[fmt] = [line for line in err.splitlines() if line.strip()]
    assert stdout["json"] == ""  # no table: a log pipeline reads every line the worker writes
    records = [json.loads(line) for line in lines["json"]]  # every line is one JSON object
    assert all(isinstance(r["event"], str) and r["event"] for r in records)
    plan = next(r for r in records if r["event"] == "jobs.worker.plan")
    assert plan["queues"] and plan["jobs"] and plan["lease_s"] > 0 and plan["worker_id"]
    counts = next(r for r in records if r["event"] == "jobs.worker.counts")
    assert counts["worker_id"] == plan["worker_id"] and counts["completed"] == 0
    assert any(r["event"] == "jobs.worker.draining" for r in records)
    hello = next(r for r in records if r["logger"] == "logjobs" and r["level"] == "WARNING")
    assert hello["message"] == "hello there" and hello["event"] == "log"
    assert {k: hello[k] for k in ("job_id", "job_name", "queue", "attempt", "worker_id")} == {
        "job_id": "j1",
        "job_name": "hello",
        "queue": "default",
        "attempt": 2,
        "worker_id": "w9",
    }
    assert hello["time"].endswith("+00:00") and "T" in hello["time"]
    broke = next(r for r in records if r["message"] == "it broke")
    assert broke["level"] == "ERROR" and broke["job_id"] == "j2"
    assert "ZeroDivisionError" in broke["exc_info"] and "Traceback" in broke["exc_info"]
    # -vv reached the root logger (on uvloop, asyncio logs no DEBUG line of its own at start)
    assert any(r["level"] == "DEBUG" and r["message"] == "a detail" for r in records)
    text = lines["text"]
    first = next(line for line in text if "hello there" in line)
    assert "WARNING logjobs hello there" in first and "job_id=j1" in first and "attempt=2" in first


def test_keep_sets_the_workers_retention_and_refuses_what_it_cannot_read(
    app: Path, tmp_path: Path
) -> None:
    """`--keep STATE=SECONDS|forever` overrides one final state's retention over the defaults;
    a malformed option or an unknown state is a usage refusal, a bad number names the state."""
    from jobs_core.cli import _retention_text, retention_from
    from jobs_core.retention import DAY, Retention

    keep = retention_from(["completed=3600", "dead=forever", " failed = 1.5 "])
    assert keep == Retention(completed=3600.0, cancelled=DAY, failed=1.5, dead=None)
    assert retention_from([]) == Retention()
    assert retention_from(["webhook_attempts=forever"]) == Retention(webhook_attempts=None)
    assert _retention_text(keep) == (
        "keeps completed 3600 s, cancelled 86400 s, failed 1.5 s, dead forever,"
        " webhook_attempts 604800 s"
    )
    mem = ["--driver", "memory"]
    usage, values = ("completed", "running=10", "=10"), ("dead=soon", "dead=-1", "dead=nan")
    done = run_forked(
        tmp_path / "runs",
        *((["worker", "myjobs", "--keep", b, *mem], app, None) for b in usage + values),
    )
    for refusal in done[: len(usage)]:
        assert "--keep" in one_line_refusal(refusal, "X_CLI_USAGE_INVALID")
    for refusal in done[len(usage) :]:
        assert "retention.dead" in one_line_refusal(refusal, "X_JOB_OPTION_INVALID")


def test_rate_limit_sets_the_workers_limits_and_refuses_what_it_cannot_read(
    app: Path, tmp_path: Path
) -> None:
    """`--rate-limit N/SECONDS[:BY]` declares a worker-wide rate limit; a malformed one is a
    usage refusal, a bad number names the limit's field."""
    from jobs_core.cli.run import rate_limit_from
    from jobs_core.leases import RateLimit

    assert rate_limit_from("100/60:tenant") == RateLimit(100, per=60.0, by="tenant")
    assert rate_limit_from("5/0.5") == RateLimit(5, per=0.5)
    mem = ["--driver", "memory"]
    usage = ("100", "ten/60", "100/60:team", "/")
    *refusals, zero, twice = run_forked(
        tmp_path / "runs",
        *((["worker", "myjobs", "--rate-limit", b, *mem], app, None) for b in usage),
        (["worker", "myjobs", "--rate-limit", "0/60", *mem], app, None),
        (["worker", "myjobs", "--rate-limit", "1/60", "--rate-limit", "2/60", *mem], app, None),
    )
    assert len(refusals) == len(usage)
    for done in refusals:
        assert "--rate-limit" in one_line_refusal(done, "X_CLI_USAGE_INVALID")
    assert "rate_limit.limit" in one_line_refusal(zero, "X_JOB_OPTION_INVALID")
    assert "rate_limits" in one_line_refusal(twice, "X_JOB_DECLARATION_INVALID")


def test_a_worker_starts_whatever_its_jobs_and_queues_are_named(tmp_path: Path) -> None:
    """Names that look like Rich markup, an emoji code or a terminal escape are printed as they
    are in the banner (`report[/x]` stopped the worker from starting: a markup error)."""
    (tmp_path / "oddjobs.py").write_text(
        "from jobs_core.job import job\n"
        "@job(name='report[/x]', queue='emails[eu]', tenant='none',"
        " idempotency_key=lambda i: 'k')\n"
        "async def report(input, ctx):\n"
        "    return None\n"
        "@job(name=':smile:\\x1b[2J', tenant='none', idempotency_key=lambda i: 'k')\n"
        "async def smile(input, ctx):\n"
        "    return None\n",
        encoding="utf-8",
    )
    # --metrics-port: its line is printed once the worker handles SIGTERM (a drain).
    worker = ["worker", "oddjobs", "--driver", "memory", "--metrics-port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs_core.cli", *worker],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "120"},
    )
    seen = ""
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while "metrics on" not in seen:
            assert time.monotonic() < deadline and proc.poll() is None, seen
            seen += proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        seen += proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, seen
    assert "emails[eu]" in seen and ":smile:\\x1b[2J" in seen and "\x1b" not in seen, seen
