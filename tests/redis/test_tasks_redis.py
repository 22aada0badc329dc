"""Redis specifics of the task family, beyond the parity suite: a 'task' pause kept in its own
set, which no claim reads."""

from __future__ import annotations

from typing import Any

from jobs_core.records import Pause
from tests.redis.conftest import Factory
from tests.redis.test_durable_redis import claim, new_job


async def test_a_task_pause_round_trips_and_never_pauses_a_claim(make_driver: Factory) -> None:
    """A task paused under a job's name (and queue) leaves that job claimable: the claim reads
    the queue and name sets only. The three kinds of one value are three pauses."""
    async with make_driver() as d:
        job = new_job(1, queue="n")  # named "n", in queue "n"
        await d.job_enqueue(job)
        assert await d.pause_add(Pause("task", "n")) is True
        assert await d.pause_add(Pause("task", "n")) is False
        assert await d.pause_list() == [Pause("task", "n")]
        client: Any = d.client
        assert await client.smembers(d.keys.pause_task) == {"n"}
        assert await client.exists(d.keys.pause_name, d.keys.pause_queue) == 0
        got = await d.job_claim(claim(("n",)))
        assert [j.id for j in got.jobs] == [job.id]
        assert await d.pause_add(Pause("name", "n")) is True
        assert await d.pause_add(Pause("queue", "n")) is True
        assert await d.pause_list() == [Pause("name", "n"), Pause("queue", "n"), Pause("task", "n")]
        assert await d.pause_remove(Pause("task", "n")) is True
        assert await d.pause_remove(Pause("task", "n")) is False
        assert await d.pause_list() == [Pause("name", "n"), Pause("queue", "n")]
