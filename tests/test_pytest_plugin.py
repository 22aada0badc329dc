"""The `ujobs` pytest plugin as a user meets it: a user's test file run by pytest (in process,
through `pytester`) on memory, on real Postgres and on real Redis; the driver's configuration;
the entry point; and the harness's refusals, called directly."""

from __future__ import annotations

import asyncio
import tomllib
import uuid
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from jobs_core import Retry, job, urls
from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import (
    DeclarationInvalidError,
    DriverUnavailableError,
    DriverUnsupportedError,
    OptionInvalidError,
    ResultInvalidError,
)
from jobs_core.facade import Jobs, default_client
from jobs_core.records import ClaimedJob, ClaimParams
from jobs_core.steps import StepSuspension
from jobs_core.testing import RunOutcome, UJobs, stores, ujobs_for
from jobs_core.testing.harness import DrainLimitError
from jobs_core.testing.pytest_plugin import driver_url
from jobs_core.urlparams import pop_param
from jobs_core.urls import driver_from_url
from jobs_pg.urls import libpq_url
from tests.pg.conftest import PG_URL
from tests.plugin_support import PLUGIN, installed_plugin, plugin_args
from tests.redis.conftest import REDIS_URL

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


def quiet_ini(pytester: pytest.Pytester, extra: str = "") -> None:
    pytester.makeini(f"[pytest]\nasyncio_default_fixture_loop_scope = function\n{extra}")


#: A user's test file. Job names carry a suffix: in-process runs share the default registry.
USER_FILE = """
from pathlib import Path

import pytest

from jobs_core import JobState, Outcome, Retry, job
from jobs_core.errors import DeclarationInvalidError
from jobs_core.facade import default_client

STORE_FILE = Path({store_file!r})
CLIENTS = []
tries = []


@job(name="flaky_{sfx}", tenant="none", idempotency_key=lambda i: str(i["order"]),
     retry=Retry(attempts=3, base_ms=1_000, jitter="none"))
def flaky(inp, ctx):
    tries.append(ctx.attempt)
    if ctx.attempt < 3:
        raise ConnectionError("smtp down")
    receipt.enqueue_sync({{"order": inp["order"]}})  # a child, through the bound client
    return {{"sent": inp["order"]}}


@job(name="receipt_{sfx}", tenant="none", idempotency_key=lambda i: str(i["order"]))
async def receipt(inp, ctx):
    doubled = await ctx.step.run("double", lambda: inp["order"] * 2)
    await ctx.step.sleep("cool", 30)
    return doubled


@job(name="broken_{sfx}", tenant=lambda i: i["org"], idempotency_key=lambda i: i["org"],
     retry=Retry(attempts=1))
def broken(inp, ctx):
    raise ValueError(f"no account for {{ctx.tenant}}")


@job(name="counted_{sfx}", tenant="none", idempotency_key=lambda i: "k")
def counted(inp, ctx):
    return ctx.sync_step.run("add", lambda: inp["a"] + inp["b"])


def test_a_retrying_job_drains_to_completed_within_the_advance(ujobs):
    STORE_FILE.write_text(ujobs.url)
    CLIENTS.append(ujobs.client)
    assert default_client() is ujobs.client
    flaky.enqueue_sync({{"order": 7}})
    assert ujobs.enqueued_sync("flaky_{sfx}") == [{{"order": 7}}]
    first = ujobs.drain_sync()  # no advance: the retry 1 s later is not due
    assert [(o.outcome, o.attempt) for o in first] == [(Outcome.RETRIED, 1)]
    assert first[0].error.type == "ConnectionError" and first[0].error.message == "smtp down"
    start = ujobs.clock.now_ms()
    rest = ujobs.drain_sync(advance=60)
    assert [(o.name, o.outcome) for o in rest] == [
        ("flaky_{sfx}", "retried"),
        ("flaky_{sfx}", "completed"),
        ("receipt_{sfx}", "suspended"),  # its step.sleep of 30 s parks it
        ("receipt_{sfx}", "completed"),
    ]
    assert rest[1].result == {{"sent": 7}} and rest[1].error is None
    assert rest[3].result == 14
    assert tries == [1, 2, 3]
    assert ujobs.clock.now_ms() == start + 60_000
    assert [r.state for r in ujobs.jobs_sync()] == [JobState.COMPLETED, JobState.COMPLETED]


def test_a_failing_job_is_dead_with_its_error(ujobs):
    broken.enqueue_sync({{"org": "acme"}})
    (out,) = ujobs.drain_sync()
    assert out.outcome is Outcome.DEAD_LETTERED and out.name == "broken_{sfx}"
    assert out.input == {{"org": "acme"}}
    assert (out.error.type, out.error.message) == ("ValueError", "no account for acme")
    assert "raise ValueError" in out.error.traceback
    (dead,) = ujobs.jobs_sync("broken_{sfx}", state="dead")
    assert dead.id == out.job_id
    assert ujobs.jobs_sync(state=["ready", "running"]) == []


def test_run_calls_one_body_with_a_real_context(ujobs):
    assert ujobs.run_sync(counted, {{"a": 2, "b": 3}}) == 5
    assert ujobs.run_sync(flaky, {{"order": 9}}, attempt=3) == {{"sent": 9}}
    with pytest.raises(ConnectionError):
        ujobs.run_sync(flaky, {{"order": 9}}, attempt=1)
    with pytest.raises(ValueError, match="no account for acme"):
        ujobs.run_sync(broken, {{"org": "acme"}})
    # run writes no row of its own; the child its body enqueued is in the store
    assert ujobs.enqueued_sync() == [{{"order": 9}}]


def test_the_client_is_unbound_after_a_test():
    try:
        now = default_client()
    except DeclarationInvalidError:
        now = None
    assert CLIENTS and now is not CLIENTS[0]


@pytest.mark.asyncio
async def test_an_async_test_awaits_the_same_calls(ujobs):
    await receipt.enqueue({{"order": 2}})
    with pytest.raises(RuntimeError, match="await ujobs.drain"):
        ujobs.drain_sync()
    outcomes = await ujobs.drain(advance=30)
    assert [o.outcome for o in outcomes] == ["suspended", "completed"]
    assert outcomes[-1].result == 4
    assert await ujobs.run(counted, {{"a": 1, "b": 1}}) == 2
    assert await ujobs.enqueued("receipt_{sfx}") == [{{"order": 2}}]
"""


def write_user_file(pytester: pytest.Pytester) -> Path:
    """The user's test file, its job names unique to this run; answers where its first test
    writes the URL of its store."""
    store_file = pytester.path / "store-url.txt"
    pytester.makepyfile(
        test_user=USER_FILE.format(store_file=str(store_file), sfx=uuid.uuid4().hex[:8])
    )
    return store_file


@pytest.fixture
def user_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user's file in place; the driver is what each test names (memory unless it does)."""
    monkeypatch.delenv("UJOBS_TEST_DRIVER", raising=False)
    quiet_ini(pytester)
    yield write_user_file(pytester)


def test_a_users_file_passes_on_memory(pytester: pytest.Pytester, user_run: Path) -> None:
    result = pytester.runpytest_inprocess(*plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    assert user_run.read_text() == "memory"


def test_a_users_file_passes_on_postgres_in_a_schema_dropped_after(
    pytester: pytest.Pytester, user_run: Path
) -> None:
    result = pytester.runpytest_inprocess(
        *plugin_args(), "-p", "no:cacheprovider", "--ujobs-driver", PG_URL
    )
    result.assert_outcomes(passed=5)
    _, schema = pop_param(user_run.read_text(), "schema", "")
    assert schema.startswith("ujobs_test_"), user_run.read_text()
    with psycopg.connect(libpq_url(PG_URL), autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert left == (0,)


def test_a_users_file_passes_on_redis_under_a_prefix_deleted_after(
    pytester: pytest.Pytester, user_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UJOBS_TEST_DRIVER", REDIS_URL)  # the environment's way to name it
    result = pytester.runpytest_inprocess(*plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    _, prefix = pop_param(user_run.read_text(), "prefix", "")
    assert prefix.startswith("ujobs-test-"), user_run.read_text()
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert list(client.scan_iter(match="{" + prefix + "}:*")) == []
    finally:
        client.close()


def test_the_option_beats_the_environment_which_beats_the_ini(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet_ini(pytester, "ujobs_driver = redis://from-ini\n")
    monkeypatch.delenv("UJOBS_TEST_DRIVER", raising=False)
    assert driver_url(pytester.parseconfig(*plugin_args())) == "redis://from-ini"
    monkeypatch.setenv("UJOBS_TEST_DRIVER", "redis://from-env")
    assert driver_url(pytester.parseconfig(*plugin_args())) == "redis://from-env"
    config = pytester.parseconfig(*plugin_args(), "--ujobs-driver", "redis://from-option")
    assert driver_url(config) == "redis://from-option"


def test_an_unknown_scheme_errors_the_test_before_it_runs(pytester: pytest.Pytester) -> None:
    quiet_ini(pytester)
    pytester.makepyfile(test_one="def test_it(ujobs):\n    raise AssertionError('ran')\n")
    result = pytester.runpytest_inprocess(
        *plugin_args(), "-p", "no:cacheprovider", "--ujobs-driver", "nosuch://host"
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*X_DRIVER_URL_INVALID*nosuch*"])


def test_the_entry_point_is_declared_and_pytest_loads_it_by_name(
    pytester: pytest.Pytester,
) -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert declared["project"]["entry-points"]["pytest11"] == {"ujobs": PLUGIN}
    quiet_ini(pytester)
    # Installed, pytest registers the plugin under the entry point's name; before the editable
    # install knows it, `-p` loads the entry point's value under that module's name.
    name = "ujobs" if installed_plugin() else PLUGIN
    pytester.makepyfile(
        test_loaded=(
            "def test_loaded(request, ujobs):\n"
            f"    plugin = request.config.pluginmanager.get_plugin({name!r})\n"
            f"    assert plugin is not None and plugin.__name__ == {PLUGIN!r}\n"
        )
    )
    result = pytester.runpytest_inprocess(*plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    if installed_plugin():
        off = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:ujobs")
        off.assert_outcomes(errors=1)  # no plugin, no fixture
        off.stdout.fnmatch_lines(["*fixture 'ujobs' not found*"])


# -- the harness, called directly ---------------------------------------------------------------


@job(name="plugin_test_forever", tenant="none", idempotency_key=lambda i: str(i["n"]))
def forever(inp: Any, ctx: JobContext) -> None:
    forever.enqueue_sync({"n": inp["n"] + 1})


@job(name="plugin_test_unstorable", tenant="none", idempotency_key=lambda i: "k")
def unstorable(inp: Any, ctx: JobContext) -> object:
    return object()


@job(
    name="plugin_test_napper",
    tenant="none",
    idempotency_key=lambda i: "k",
    retry=Retry(attempts=2),
)
async def napper(inp: Any, ctx: JobContext) -> str:
    await ctx.step.sleep("nap", 60)
    return "rested"


@job(name="plugin_test_echo", tenant="none", idempotency_key=lambda i: str(i))
async def echo(inp: Any, ctx: JobContext) -> Any:
    return inp


@pytest.fixture
def harness() -> Iterator[UJobs]:
    with ujobs_for("memory") as u:
        yield u


def test_a_job_that_never_stops_enqueuing_fails_the_drain_at_its_limit(harness: UJobs) -> None:
    forever.enqueue_sync({"n": 0})
    with pytest.raises(DrainLimitError, match="max_runs=5") as caught:
        harness.drain_sync([forever], max_runs=5)
    assert [o.input for o in caught.value.outcomes] == [{"n": n} for n in range(5)]
    assert all(
        isinstance(o, RunOutcome) and o.outcome == "completed" for o in caught.value.outcomes
    )


def test_a_drain_of_some_jobs_gives_another_name_back_for_a_minute(harness: UJobs) -> None:
    napper.enqueue_sync({})  # another name in the same queue, first in claim order
    echo.enqueue_sync({"n": 1})
    assert [(o.name, o.result) for o in harness.drain_sync([echo])] == [(echo.name, {"n": 1})]
    (left,) = harness.jobs_sync(napper.name)
    assert (left.state, left.attempt) == ("ready", 0)
    assert left.run_at_ms == harness.clock.now_ms() + 60_000


def test_bad_arguments_are_refused_before_anything_runs(harness: UJobs) -> None:
    forever.enqueue_sync({"n": 0})
    for bad in ({"advance": -1}, {"advance": float("nan")}, {"max_runs": 0}):
        with pytest.raises(OptionInvalidError) as caught:
            harness.drain_sync([forever], **bad)
        assert caught.value.detail == next(iter(bad))
    with pytest.raises(OptionInvalidError, match="state"):
        harness.jobs_sync(state="sleeping")
    with pytest.raises(OptionInvalidError, match="attempt"):
        harness.run_sync(napper, {}, attempt=3)
    with pytest.raises(DeclarationInvalidError, match="nothing to run"):
        harness.drain_sync([])
    assert harness.jobs_sync(state="ready")[0].attempt == 0  # nothing ran


def test_run_refuses_a_result_a_worker_could_not_store(harness: UJobs) -> None:
    with pytest.raises(ResultInvalidError) as caught:
        harness.run_sync(unstorable, {})
    assert caught.value.code == "X_JOB_RESULT_INVALID"


def test_a_body_that_parks_raises_its_suspension_from_run(harness: UJobs) -> None:
    with pytest.raises(StepSuspension) as caught:
        harness.run_sync(napper, {})
    assert caught.value.run_at_ms == harness.clock.now_ms() + 60_000


def test_the_bound_client_is_the_harness_own_and_goes_with_it() -> None:
    with ujobs_for("memory") as u:
        assert default_client() is u.client
    assert bound_now() is not u.client


def bound_now() -> object:
    """The default client now, or None (another test may have configured one: not ours)."""
    try:
        return default_client()
    except DeclarationInvalidError:
        return None


def test_for_test_needs_a_loop_for_its_steps_outside_one() -> None:
    async def claim() -> tuple[ClaimedJob, JobDriver]:
        driver = driver_from_url("memory")
        await Jobs(driver).enqueue(napper, {})
        params = ClaimParams(("default",), "me", 1, 60_000, SystemClock().now_ms())
        return (await driver.job_claim(params)).jobs[0], driver

    job_, driver = asyncio.run(claim())
    with pytest.raises(DeclarationInvalidError, match="event loop") as caught:
        JobContext.for_test(job_, driver)
    assert caught.value.detail == "loop"
    loop = asyncio.new_event_loop()
    try:
        ctx = JobContext.for_test(job_, driver, loop=loop, tenant="acme")
    finally:
        loop.close()
    assert (ctx.job_id, ctx.name, ctx.attempt, ctx.tenant) == (job_.id, napper.name, 1, "acme")
    assert not ctx.signal.cancelled


# -- scratch stores -----------------------------------------------------------------------------


def test_a_scratch_url_names_a_place_of_its_own_and_keeps_the_rest() -> None:
    pg = stores.scratch_store(f"{PG_URL}?schema=mine&pool_size=3&sslmode=disable")
    _, schema = pop_param(pg.url, "schema", "")
    _, wake = pop_param(pg.url, "wake", "")
    assert schema.startswith("ujobs_test_") and wake == "0"
    assert "pool_size=3" in pg.url and "sslmode=disable" in pg.url
    assert pop_param(stores.scratch_store(f"{PG_URL}?wake=1").url, "wake", "")[1] == "1"
    _, prefix = pop_param(stores.scratch_store(f"{REDIS_URL}?prefix=mine").url, "prefix", "")
    assert prefix.startswith("ujobs-test-")
    assert stores.scratch_store(PG_URL).url != stores.scratch_store(PG_URL).url
    assert stores.scratch_store("memory").url == "memory"


def test_an_unreachable_server_is_a_typed_error_and_the_first_failure_is_the_one_raised() -> None:
    # The migration fails first; the drop that follows fails too, and is only logged.
    with (
        pytest.raises(DriverUnavailableError),
        ujobs_for("postgresql+psycopg://postgres@127.0.0.1:1/test"),
    ):
        raise AssertionError("the block never runs")
    with pytest.raises(DriverUnavailableError):
        asyncio.run(stores.scratch_store("redis://127.0.0.1:1").drop())


def test_a_driver_module_without_a_scratch_store_is_unsupported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = EntryPoint("plain", "jobs_core.urls:driver_from_url", "ujobs.drivers")
    monkeypatch.setattr(urls, "entry_points", lambda group: [plain])
    with pytest.raises(DriverUnsupportedError, match="scratch_store"):
        stores.scratch_store("plain://host")
