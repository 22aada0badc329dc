"""The dashboard says who a job acts for and what it waits for (issue 30, items 2 and 3), on the
memory driver in process: the org column and its filter, apart from the enqueuer's tenant;
the org redacted as its input is (a name nobody declares, an org that is a sensitive value);
a hidden value that says how to see it; waits and recorded sleeps and waits in words, each
instant a `<time>` the page's script shows in the viewer's zone; cron fires to the second.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from jobs_core import acting_for
from jobs_core.clock import FakeClock
from jobs_core.dashboard import Access, dashboard_app
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle
from jobs_core.operator.times import iso_utc
from jobs_core.records import ClaimParams, EventWait, JobListParams, Nack, NackKind, StepPut
from jobs_core.scheduler import task
from jobs_core.scheduler.task import TaskRegistry
from jobs_core.steps.api import WAIT
from jobs_memory import MemoryDriver
from tests.core.support import declare
from tests.dashboard.test_pages import BEARER, TOKEN, client

CARD = "4111-2222-3333-4444"


async def _bill(input: Any, ctx: Any) -> None:
    return None


def _handles() -> tuple[JobHandle, JobHandle]:
    """`bill` acts for its input's org; `vault` for its card, a sensitive field (fail closed)."""
    bill = declare(_bill, name="bill", tenant=lambda i: i["org"], sensitive=("card",))
    vault = declare(_bill, name="vault", tenant=lambda i: i["card"], sensitive=("card",))
    return bill, vault


def _rows(page: str) -> list[list[str]]:
    """The listing's cells, row by row, tags stripped."""
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    return [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]


async def test_the_jobs_list_shows_and_filters_who_a_job_acts_for_and_hides_it_fail_closed() -> (
    None
):
    driver, clock = MemoryDriver(), FakeClock()
    bill, vault = _handles()
    jobs = Jobs(driver, clock=clock)
    with acting_for("ops"):  # the enqueuer's tenant: the limiter's bucket, not the org
        one = await jobs.enqueue(bill, {"n": 1, "org": "org_1", "card": CARD})
        two = await jobs.enqueue(bill, {"n": 2, "org": "org_2", "card": CARD})
    secret = await jobs.enqueue(vault, {"n": 3, "card": CARD})
    app = dashboard_app(driver, access=Access(token=TOKEN), handles=[bill, vault], clock=clock)
    async with client(app) as c:
        page = (await c.get("/jobs?acts_for=org_1", headers=BEARER)).text
        rows = _rows(page)
        assert [r[0] for r in rows] == [one.id]
        assert rows[0][3:5] == ["org_1", "ops"]  # acts for, then the enqueuer's tenant
        assert 'name="acts_for" value="org_1"' in page  # the filter is kept
        assert "No jobs" in (await c.get("/jobs?tenant=org_1", headers=BEARER)).text
        everything = _rows((await c.get("/jobs", headers=BEARER)).text)
        assert {r[0]: r[3] for r in everything} == {
            one.id: "org_1",
            two.id: "org_2",
            secret.id: "[redacted]",  # its org IS its card: shown nowhere
        }
        assert CARD not in (await c.get(f"/jobs/{secret.id}", headers=BEARER)).text
    # Nobody declares these names: the org came from an input nothing says is safe.
    bare = dashboard_app(driver, access=Access(token=TOKEN), clock=clock)
    async with client(bare) as c:
        page = (await c.get("/jobs", headers=BEARER)).text
        assert "org_1" not in page and "org_2" not in page and CARD not in page
        assert "pass --app MODULE" in page  # the cell's tooltip says how to see it
        shown = (await c.get(f"/jobs/{one.id}", headers=BEARER)).text
        assert "org_1" not in shown
        assert "no live worker declares this job; pass --app MODULE" in shown


async def test_a_job_page_says_what_it_waits_for_in_words_in_the_viewers_zone() -> None:
    driver, clock = MemoryDriver(), FakeClock()
    bill, _ = _handles()
    jobs = Jobs(driver, clock=clock)
    now = clock.now_ms()
    later = await jobs.enqueue(bill, {"n": 1, "org": "o", "card": CARD}, delay_ms=90_000)
    parked = await jobs.enqueue(bill, {"n": 2, "org": "o", "card": CARD})
    sleeper = await jobs.enqueue(bill, {"n": 3, "org": "o", "card": CARD})
    held = {
        j.id: j
        for j in (await driver.job_claim(ClaimParams(("default",), "w", 9, 30_000, now))).jobs
    }
    until = now + 3_600_000
    wait = EventWait("card.verified", json.dumps({"card": CARD, "order": 7}), now, "o", until)
    steps = [
        StepPut(
            held[parked.id].fence,
            f"{WAIT}paid",
            json.dumps(
                {"event": "card.verified", "match": {"order": 7}, "since": now, "deadline": until}
            ),
            now,
        ),
        StepPut(held[sleeper.id].fence, "nap", json.dumps({"until": now + 60_000}), now),
    ]
    assert await driver.step_put(steps) == [True, True]
    assert await driver.job_nack(
        [
            Nack(held[parked.id].fence, NackKind.PARK, now, until, wait=wait),
            Nack(held[sleeper.id].fence, NackKind.PARK, now, now + 60_000),
        ]
    ) == [True, True]
    app = dashboard_app(driver, access=Access(token=TOKEN), handles=[bill], clock=clock)
    async with client(app) as c:
        page = (await c.get(f"/jobs/{parked.id}", headers=BEARER)).text
        told = re.sub(r"<[^>]+>", "", page.split('class="waits">', 1)[1].split("</td>", 1)[0])
        assert told.startswith("event &#39;card.verified&#39; matching {")
        assert '"order":7' in told.replace("&#34;", '"') and CARD not in page
        assert "until" in told and "(in 1 h)" in told
        assert f'<time datetime="{iso_utc(until)}" data-local>' in page
        assert "began waiting for event &#39;card.verified&#39;" in page
        assert ">runs at<" not in page  # a parked row's run_at is no promise to run
        page = (await c.get(f"/jobs/{sleeper.id}", headers=BEARER)).text
        assert "sleeping until" in page and "slept until" in page  # the wait, the step record
        page = (await c.get(f"/jobs/{later.id}", headers=BEARER)).text
        assert "its time: scheduled for" in page and "(in 1 min)" in page


async def test_the_schedule_shows_a_seconds_cron_to_the_second() -> None:
    driver, clock = MemoryDriver(), FakeClock()
    bill, _ = _handles()
    often = task(
        "often",
        cron="*/10 * * * * *",
        tz="UTC",
        job=bill,
        input={"n": 0, "org": "o", "card": CARD},
        registry=TaskRegistry(),
    )
    app = dashboard_app(
        driver, access=Access(token=TOKEN), handles=[bill], clock=clock, tasks=[often]
    )
    async with client(app) as c:
        page = (await c.get("/schedule", headers=BEARER)).text
    assert re.search(r"\d\d:\d\d:[0-5]0 UTC", page), page


async def test_a_hostile_org_is_refused_before_any_write_or_shown_as_text() -> None:
    driver, clock = MemoryDriver(), FakeClock()
    bill, _ = _handles()
    jobs = Jobs(driver, clock=clock)
    for org, code in (("o" * 201, "X_JOB_RECORD_INVALID"), ("", "X_JOB_TENANT_REQUIRED")):
        with pytest.raises(JobsError) as refused:
            await jobs.enqueue(bill, {"n": 1, "org": org, "card": CARD})
        assert refused.value.code == code
    assert (await driver.job_list(JobListParams())).jobs == ()
    odd = await jobs.enqueue(bill, {"n": 2, "org": "<i>[bold]</i>", "card": CARD})
    app = dashboard_app(driver, access=Access(token=TOKEN), handles=[bill], clock=clock)
    async with client(app) as c:
        page = (await c.get("/jobs?acts_for=%3Ci%3E%5Bbold%5D%3C%2Fi%3E", headers=BEARER)).text
    assert [r[0] for r in _rows(page)] == [odd.id]
    assert "<i>" not in page and "&lt;i&gt;[bold]&lt;/i&gt;" in page
