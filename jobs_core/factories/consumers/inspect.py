"""What an operator reads of the consumers: each stored cursor with its lag, last turn and
holder, and whether a run holds its lease now — the one projection `ujobs consumers` and the
`ujobs_consumer_lag` gauge read."""

from __future__ import annotations

from dataclasses import dataclass

from jobs_core.driver import MAX_CONSUMER_LIST, JobDriver
from jobs_core.factories.consumers.run import lease_key
from jobs_core.jsonform import JsonValue, loads


@dataclass(frozen=True, slots=True)
class ConsumerView:
    """One consumer for one tenant, as stored."""

    name: str
    tenant: str | None
    source: str
    cursor: JsonValue
    lag: int | None
    turns: int
    records: int
    #: The worker whose turn landed last, and when.
    holder: str
    last_turn_ms: int
    #: The lease's live holder (a run turning now), None between runs.
    running: str | None

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "name": self.name,
            "tenant": self.tenant,
            "source": self.source,
            "cursor": self.cursor,
            "lag": self.lag,
            "turns": self.turns,
            "records": self.records,
            "holder": self.holder,
            "last_turn_ms": self.last_turn_ms,
            "running": self.running,
        }


async def inspect_consumers(
    driver: JobDriver, *, name: str | None = None, limit: int = MAX_CONSUMER_LIST, now_ms: int
) -> list[ConsumerView]:
    """The stored consumers (of `name`), by name then tenant; each lease read when the driver
    has the lease family."""
    driver.require("consumers", what="the consumers' view")
    entries = await driver.consumer_list(name, limit)
    leases = driver.capabilities().leases
    out = []
    for e in entries:
        running = None
        if leases:
            held = await driver.lease_holders(lease_key(e.name, e.tenant_id), now_ms)
            running = held[0].holder if held else None
        out.append(
            ConsumerView(
                name=e.name,
                tenant=e.tenant_id,
                source=e.source,
                cursor=loads(e.cursor_json),
                lag=e.lag,
                turns=e.turns,
                records=e.records,
                holder=e.holder,
                last_turn_ms=e.updated_at_ms,
                running=running,
            )
        )
    return out
