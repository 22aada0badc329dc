"""The operator's view of flows, on memory, Postgres and Redis: a job's parent, children (by
state, bounded), join and batch (`Operator.family`, `ujobs jobs show`, the dashboard's job
page); listings by parent and batch (`ujobs jobs list --parent/--batch`, the dashboard's
filters); a batch's progress (`Operator.batch`, `ujobs batches show`, its page); the cancel
cascade over live descendants, and `--keep-children` / the checkbox; and every one of them
refused (`X_DRIVER_CAPABILITY_MISSING`) on a driver without flows.

The flow is written through the driver (parent and batch links, a join), as the runtime writes
it, so these views are pinned whatever API enqueues it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import httpx2 as httpx
import pytest
from click.testing import CliRunner

from jobs_core.cli import main
from jobs_core.cli.show import print_batch, print_family
from jobs_core.dashboard import Access, dashboard_app
from jobs_core.dashboard.app import batch_path, job_path
from jobs_core.driver import MAX_LIST_LIMIT, Capabilities, JobDriver
from jobs_core.errors import CapabilityMissingError, JobNotFoundError
from jobs_core.ids import derived_id
from jobs_core.operator import Action, Operator, batch_callback_ids
from jobs_core.records import (
    Ack,
    CancelAnswer,
    ClaimParams,
    JobFilter,
    JoinEnqueue,
    JoinPolicy,
    NewJob,
)
from jobs_core.states import JobState
from jobs_memory import MemoryDriver
from tests.core.support import T0, fresh_store, new_job
from tests.test_hostile_input import _url_of

TOKEN = "flows-operator-token"
BEARER = {"authorization": f"Bearer {TOKEN}"}


@dataclass
class Flow:
    """A parent `P` with children `C1` (ready), `C2` (completed), `C3` (parked on a join over
    `C1`); grandchildren `G1` (ready, under the completed `C2`) and `G2` (ready, under `C1`);
    a batch `B` of `M1`, `M2` (ready) with its `on_complete` callback parked on both (under
    the id the runtime derives); and `U`, which is no one's."""

    driver: JobDriver
    kind: str
    batch: str = "B"


def linked(job_id: str, *, parent: str | None = None, batch: str | None = None) -> NewJob:
    return replace(new_job(job_id, f"k-{job_id}"), parent_id=parent, batch_id=batch)


async def build_flow(driver: JobDriver) -> None:
    done = replace(linked("C2", parent="P"), queue="done")
    for record in (
        new_job("P", "k-P"),
        linked("C1", parent="P"),
        done,
        linked("G1", parent="C2"),
        linked("G2", parent="C1"),
        linked("M1", batch="B"),
        linked("M2", batch="B"),
        new_job("U", "k-U"),
    ):
        assert not (await driver.job_enqueue(record)).deduped
    [claimed] = (await driver.job_claim(ClaimParams(("done",), "w", 1, 60_000, T0))).jobs
    assert await driver.job_ack([Ack(claimed.fence, T0 + 1, "{}")]) == [True]
    on_complete = batch_callback_ids("B")[0]
    answers = await driver.join_enqueue(
        [
            JoinEnqueue(linked("C3", parent="P"), ("C1",), JoinPolicy.SUCCESS),
            # As the runtime writes it (`jobs_core.batch`): the callback carries no batch id.
            JoinEnqueue(linked(on_complete), ("M1", "M2"), JoinPolicy.ALWAYS),
        ]
    )
    assert all(a.enqueued is not None and not a.enqueued.deduped for a in answers)


@pytest.fixture(params=["memory", "pg", "redis"])
async def flow(request: pytest.FixtureRequest) -> AsyncIterator[Flow]:
    async with fresh_store(request.param) as driver:
        await build_flow(driver)
        yield Flow(driver, request.param)


async def states(driver: JobDriver, *ids: str) -> dict[str, JobState]:
    rows = await driver.job_get_many(list(ids))
    return {i: rows[i].state for i in ids}


class NoFlows(MemoryDriver):
    """The memory store with the flow family withheld: a driver that never declared it."""

    def capabilities(self) -> Capabilities:
        return replace(super().capabilities(), flows=False)


# -- the service ---------------------------------------------------------------------------------


async def test_a_job_shows_its_parent_children_join_and_batch(flow: Flow) -> None:
    op = Operator(flow.driver)
    parent = await op.family((await op.job("P")).record)
    assert parent.parent_id is None and parent.batch is None
    assert parent.children.complete and parent.children.total == 3
    assert {s: n for s, n in parent.children.counts.items() if n} == {
        "ready": 1,
        "completed": 1,
        "parked": 1,
    }
    assert parent.children.live == 2

    c3 = await op.job("C3")
    assert c3.record.parent_id == "P"
    assert c3.to_json()["join"] == {"total": 1, "pending": 1, "failed": 0, "policy": "success"}
    assert (await op.family(c3.record)).children.total == 0

    member = await op.family((await op.job("M1")).record)
    assert member.batch_id == "B" and member.batch is not None
    assert member.batch.total == 2 and member.batch.counts["ready"] == 2


async def test_a_batch_view_counts_members_and_finds_its_callback(flow: Flow) -> None:
    op = Operator(flow.driver)
    view = await op.batch("B")
    assert view.members.total == 2 and view.members.live == 2 and not view.finished
    on_complete = batch_callback_ids("B")[0]
    assert list(view.callbacks) == ["on_complete"]
    assert view.callbacks["on_complete"].id == on_complete
    assert view.callbacks["on_complete"].state is JobState.PARKED
    assert view.to_json()["members"]["counts"]["ready"] == 2
    # Both members finish: the batch is finished and its callback released.
    await op.act(Action.CANCEL, ["M1", "M2"])
    view = await op.batch("B")
    assert view.finished and view.callbacks["on_complete"].state is JobState.READY
    with pytest.raises(JobNotFoundError):
        await op.batch("no-such-batch")


@pytest.mark.parametrize("kind", ["memory", "pg", "redis"])
async def test_counting_children_stops_at_its_bound_and_says_so(kind: str) -> None:
    many = MAX_LIST_LIMIT + 1  # one listing call answers at most MAX_LIST_LIMIT matches
    async with fresh_store(kind) as driver:
        await driver.job_enqueue(new_job("P", "k-P"))
        await driver.job_enqueue_many([linked(f"c{i:04}", parent="P") for i in range(many)])
        op = Operator(driver)
        cut = await op.census(JobFilter(parent_id="P"), max_calls=1)
        assert not cut.complete and cut.total == MAX_LIST_LIMIT and cut.cursor is not None
        whole = await op.census(JobFilter(parent_id="P"), max_calls=2)
        assert whole.complete and whole.total == many and whole.counts["ready"] == many
        assert (await op.family((await op.job("P")).record)).children.total == many
        # The cascade walks every page of them.
        report = await op.cancel(["P"])
        assert report.cascaded == report.examined == many


async def test_cancel_cascades_to_live_descendants_unless_kept(flow: Flow) -> None:
    op = Operator(flow.driver)
    report = await op.cancel(["P"])
    assert report.answers == [CancelAnswer.CANCELLED]
    # C1, C3 (children), G2 (under C1) and G1 (under the completed C2): four live descendants.
    assert report.cascaded == 4 and report.examined == 5
    got = await states(flow.driver, "P", "C1", "C2", "C3", "G1", "G2", "M1", "U")
    assert got == {
        "P": JobState.CANCELLED,
        "C1": JobState.CANCELLED,
        "C2": JobState.COMPLETED,
        "C3": JobState.CANCELLED,
        "G1": JobState.CANCELLED,
        "G2": JobState.CANCELLED,
        "M1": JobState.READY,
        "U": JobState.READY,
    }
    # Cancelled again: the parent is finished, refused, and nothing cascades.
    again = await op.cancel(["P"])
    assert again.answers == [CancelAnswer.FINISHED] and again.examined == 0


async def test_cancel_keeps_children_when_asked(flow: Flow) -> None:
    op = Operator(flow.driver)
    report = await op.cancel(["P", "nope"], keep_children=True)
    assert report.answers == [CancelAnswer.CANCELLED, CancelAnswer.NOT_FOUND]
    assert report.cascaded == report.examined == 0
    got = await states(flow.driver, "P", "C1", "C3", "G1")
    assert got == {
        "P": JobState.CANCELLED,
        "C1": JobState.READY,
        "C3": JobState.PARKED,
        "G1": JobState.READY,
    }


async def test_a_driver_without_flows_refuses_the_family_views() -> None:
    driver = NoFlows()
    await driver.job_enqueue(new_job("P", "k"))
    op = Operator(driver)
    record = (await op.job("P")).record
    for call in (
        lambda: op.family(record),
        lambda: op.batch("B"),
        lambda: op.jobs(JobFilter(parent_id="P")),
        lambda: op.jobs(JobFilter(batch_id="B")),
    ):
        with pytest.raises(CapabilityMissingError) as refused:
            await call()
        assert refused.value.capability == "flows"
    # A cancel has no children to cascade to there: it cancels as before.
    assert (await op.cancel(["P"])).answers == [CancelAnswer.CANCELLED]


async def test_the_printed_flow_quotes_its_commands_and_shows_ids_as_they_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    driver = MemoryDriver()
    odd = "p [bold]x[/bold] $(rm)"
    await driver.job_enqueue(replace(new_job(odd, "k"), batch_id="b\x1b[2J"))
    await driver.job_enqueue(linked("kid", parent=odd))
    op = Operator(driver)
    view = await op.job(odd)
    print_family(view, await op.family(view.record))
    print_batch(await op.batch("b\x1b[2J"), T0)
    out = capsys.readouterr().out
    assert "ujobs jobs list --parent 'p [bold]x[/bold] $(rm)'" in out
    assert "ujobs batches show 'b\\x1b[2J'" in out and "\x1b" not in out
    assert "1 ready" in out and "in progress" in out


def test_batch_callback_ids_are_the_runtimes() -> None:
    """The batch view finds the callbacks under the ids the runtime gives them."""
    assert batch_callback_ids("B") == (
        derived_id("B", "on_complete"),
        derived_id("B", "on_success"),
    )
    assert batch_callback_ids("B") != batch_callback_ids("C")


# -- the CLI ------------------------------------------------------------------------------------

REFUSAL = re.compile(r"^X_[A-Z_]+: ", re.M)


async def cli(*args: str) -> Any:
    """`ujobs ARGS` in process, on a thread of its own (the CLI runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), catch_exceptions=False)


@pytest.fixture(params=["pg", "redis"])
async def shared_flow(request: pytest.FixtureRequest) -> AsyncIterator[Flow]:
    """A flow on a store every `ujobs` call reaches by URL (the memory store is per process)."""
    async with fresh_store(request.param) as driver:
        await build_flow(driver)
        yield Flow(driver, request.param)


async def test_cli_shows_the_flow_lists_by_parent_and_batch_and_cascades(
    shared_flow: Flow,
) -> None:
    url = _url_of(shared_flow.driver)
    d = ["--driver", url]
    shown = await cli("jobs", "show", "C3", "--json", *d)
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.output)
    assert doc["parent_id"] == "P" and doc["join"]["pending"] == 1
    assert doc["family"]["children"]["total"] == 0
    table = await cli("jobs", "show", "P", *d)
    assert table.exit_code == 0, table.output
    assert "1 ready, 1 parked, 1 completed" in table.output
    assert "ujobs jobs list --parent P" in table.output
    listed = json.loads((await cli("jobs", "list", "--parent", "P", "--json", *d)).output)
    assert sorted(j["id"] for j in listed["jobs"]) == ["C1", "C2", "C3"]
    members = json.loads((await cli("jobs", "list", "--batch", "B", "--json", *d)).output)
    assert sorted(j["id"] for j in members["jobs"]) == ["M1", "M2"]
    batch = await cli("batches", "show", "B", "--json", *d)
    assert json.loads(batch.output)["members"]["total"] == 2
    assert "on_complete" in (await cli("batches", "show", "B", *d)).output
    kept = await cli("jobs", "cancel", "C1", "--keep-children", *d)
    assert kept.exit_code == 0 and "children:" not in kept.output
    cascaded = await cli("jobs", "cancel", "P", *d)
    assert cascaded.exit_code == 0, cascaded.output
    assert "children: 3 live descendants cancelled" in cascaded.output
    got = await states(shared_flow.driver, "C3", "G1", "G2", "M1")
    assert got == {
        "C3": JobState.CANCELLED,
        "G1": JobState.CANCELLED,
        "G2": JobState.CANCELLED,
        "M1": JobState.READY,
    }


def test_cli_refuses_flow_options_on_a_driver_without_flows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jobs_core.cli.operate as operate

    monkeypatch.setattr(operate, "driver_from_url", lambda url: NoFlows())
    for args in (
        ["jobs", "list", "--parent", "P"],
        ["jobs", "list", "--batch", "B"],
        ["batches", "show", "B"],
        ["jobs", "cancel", "--all", "--parent", "P"],
    ):
        done = CliRunner().invoke(main, [*args, "--driver", "memory"])
        assert done.exit_code == 2, done.output
        assert REFUSAL.findall(done.output) == ["X_DRIVER_CAPABILITY_MISSING: "], done.output
        assert "flows" in done.output


@pytest.mark.parametrize(
    "value", ["\x00", "\udcff", "x" * 5_000, "[bold]x[/bold]", "<script>x</script>", "é" * 300]
)
def test_cli_flow_options_refuse_hostile_values_in_one_line(value: str) -> None:
    for args in (
        ["jobs", "list", "--parent", value],
        ["jobs", "list", "--batch", value, "--json"],
        ["batches", "show", value],
        ["jobs", "cancel", value, "--keep-children"],
    ):
        done = CliRunner().invoke(main, [*args, "--driver", "memory"])
        assert done.exit_code in (0, 2), (args, done.output, done.exception)
        assert "Traceback" not in done.output
        if done.exit_code == 2:
            assert len(REFUSAL.findall(done.output)) == 1, (args, done.output)


# -- the dashboard ------------------------------------------------------------------------------


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def csrf_of(page: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert found
    return found.group(1)


async def test_dashboard_job_page_list_filters_batch_page_and_cascade(flow: Flow) -> None:
    app = dashboard_app(flow.driver, access=Access(token=TOKEN))
    async with client(app) as c:
        page = await c.get(job_path("P"), headers=BEARER)
        assert page.status_code == 200
        assert "Flow" in page.text and "/jobs?parent=P" in page.text
        assert 'name="keep_children"' in page.text
        child = await c.get(job_path("C3"), headers=BEARER)
        assert f'href="{job_path("P")}"' in child.text
        assert "waiting on 1 of 1, failed 0, policy success" in child.text
        member = await c.get(job_path("M1"), headers=BEARER)
        assert batch_path("B") in member.text
        listed = await c.get("/jobs?parent=P", headers=BEARER)
        assert listed.status_code == 200
        ids = set(re.findall(r'<td class="id"><a href="/jobs/([^"]+)">', listed.text))
        assert ids == {"C1", "C2", "C3"}
        by_batch = await c.get("/jobs?batch=B", headers=BEARER)
        assert set(re.findall(r'<td class="id"><a href="/jobs/([^"]+)">', by_batch.text)) == {
            "M1",
            "M2",
        }
        batch = await c.get(batch_path("B"), headers=BEARER)
        assert batch.status_code == 200 and "on_complete" in batch.text
        assert (await c.get(batch_path("none"), headers=BEARER)).status_code == 404
        # Cancel C1 keeping its children, then P with the cascade.
        token = csrf_of(page.text)
        kept = await c.post(
            job_path("C1", "cancel"),
            data={"csrf": token, "keep_children": "on"},
            headers=BEARER,
        )
        assert kept.status_code == 303
        assert (await states(flow.driver, "G2"))["G2"] is JobState.READY
        done = await c.post(job_path("P", "cancel"), data={"csrf": token}, headers=BEARER)
        assert done.status_code == 303
    got = await states(flow.driver, "P", "C3", "G1", "G2", "U")
    assert got == {
        "P": JobState.CANCELLED,
        "C3": JobState.CANCELLED,
        "G1": JobState.CANCELLED,
        "G2": JobState.CANCELLED,
        "U": JobState.READY,
    }


async def test_dashboard_refuses_flow_pages_on_a_driver_without_flows() -> None:
    driver = NoFlows()
    await driver.job_enqueue(new_job("P", "k"))
    app = dashboard_app(driver, access=Access(token=TOKEN))
    async with client(app) as c:
        page = await c.get(job_path("P"), headers=BEARER)
        assert page.status_code == 200 and "Flow" not in page.text
        for path in ("/jobs?parent=P", "/jobs?batch=B", batch_path("B")):
            refused = await c.get(path, headers=BEARER)
            assert refused.status_code == 501, path
            assert "X_DRIVER_CAPABILITY_MISSING" in refused.text
