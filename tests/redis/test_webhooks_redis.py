"""The webhook attempts' purge on Redis: an attempt leaves its hash field and both indexes,
the endpoint stays as it was, and `ujobs db upgrade` indexes attempts recorded before the age
index existed."""

from __future__ import annotations

from typing import Any

from jobs_core.records import WebhookAttemptListParams
from tests.core.support import T0
from tests.core.webhook_support import record_attempts
from tests.redis.conftest import Factory


async def test_a_purge_leaves_nothing_of_an_attempt(make_driver: Factory) -> None:
    """Purged attempts are gone from `webhook:attempt`, `webhook:attempts` and the age index;
    the one left is in all three; the endpoint's row is byte for byte what it was."""
    async with make_driver() as d:
        client: Any = d.client
        k = d.keys
        await record_attempts(d, 3, T0 + 1, "a")
        await record_attempts(d, 1, T0 + 2, "b")
        endpoint = await client.hget(k.webhook_endpoint, "t1\x00orders")
        assert await d.webhook_attempt_purge(T0 + 2, 1000) == 3
        assert list(await client.hkeys(k.webhook_attempt)) == ["b00000\x00" + "0" * 18 + "1"]
        assert await client.zrange(k.webhook_attempt_age, 0, -1) == ["b00000\x00" + "0" * 18 + "1"]
        (member,) = await client.zrange(k.webhook_attempts, 0, -1)
        assert member.endswith("b00000\x00" + "0" * 18 + "1"), member
        assert await client.hget(k.webhook_endpoint, "t1\x00orders") == endpoint
        assert await d.webhook_attempt_purge(T0 + 3, 1000) == 1
        for key in (k.webhook_attempt, k.webhook_attempts, k.webhook_attempt_age):
            assert not await client.exists(key), key


async def test_upgrade_indexes_attempts_recorded_before_the_index(make_driver: Factory) -> None:
    """A store written before `webhook:attempt-age` existed (here: the index deleted): the
    purge finds nothing until `migrate()` (`ujobs db upgrade`) indexes every attempt at its
    time; then it takes the old ones only. Running it again adds none."""
    async with make_driver() as d:
        client: Any = d.client
        await record_attempts(d, 4, T0 + 1, "a")
        await record_attempts(d, 2, T0 + 9, "b")
        await client.delete(d.keys.webhook_attempt_age)
        assert await d.webhook_attempt_purge(T0 + 5, 1000) == 0
        said = await d.migrate()
        assert "6 index entries added" in said, said
        assert "0 index entries added" in await d.migrate()
        assert await d.webhook_attempt_purge(T0 + 5, 1000) == 4
        left = await d.webhook_attempt_list(WebhookAttemptListParams("t1", "orders", 10))
        assert [a.job_id for a in left] == ["b00001", "b00000"]
