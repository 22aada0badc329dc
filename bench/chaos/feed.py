"""The feed of a family's chaos run: a process of its own that enqueues (or sends, or stages) the
family's work over the run, so it meets the outages, and writes what it was answered to the
answers file, one JSON line per fact.

Every call names its own ids (`ids=`, an event's `id=`), so a call that failed with
`X_DRIVER_UNAVAILABLE` (after whatever retry the library does itself) is sent again with the
same ids, as an application would, and cannot insert twice.

    python -m bench.chaos.feed --family steps --url URL --jobs N --seconds S --seed X --out FILE
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

from jobs_core import JobHandle, Jobs, JobsError
from jobs_core.ids import new_id
from jobs_core.urls import driver_from_url

T = TypeVar("T")

#: How long, and how many times, one call is retried before it is given up.
RETRY_SECONDS: Final = 30.0
RETRY_TRIES: Final = 120
#: One call may not take longer than this (a hung call is recorded and retried). Longer than
#: any retry the library may do inside one call.
CALL_SECONDS: Final = 60.0


async def persist(fn: Callable[[], Awaitable[T]]) -> tuple[T | None, int, list[str], str | None]:
    """`fn()`'s answer (None if given up), its tries, the errors met, and the code of a refusal
    (an error other than `X_DRIVER_UNAVAILABLE`, not retried)."""
    errors: list[str] = []
    deadline = time.monotonic() + RETRY_SECONDS
    for tries in range(1, RETRY_TRIES + 1):
        try:
            return await asyncio.wait_for(fn(), CALL_SECONDS), tries, errors, None
        except JobsError as exc:
            if exc.code != "X_DRIVER_UNAVAILABLE":
                return None, tries, [*errors, exc.code], exc.code
            errors.append(exc.code)
        except TimeoutError:
            errors.append("hung call")
        except Exception as exc:  # an untyped error is a finding: record it, retry
            errors.append(f"untyped {type(exc).__name__}")
        if time.monotonic() > deadline:
            return None, tries, errors, None
        await asyncio.sleep(0.25)
    return None, RETRY_TRIES, errors, None


class Feeder:
    """What a family's `feed` works with: the client, the seeded randomness, the pace."""

    def __init__(self, url: str, total: int, seconds: float, seed: int, out: str) -> None:
        self.url = url
        self._jobs: Jobs | None = None
        self.total = total
        self.seconds = seconds
        self.rng = random.Random(seed)
        self._out = open(out, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.made = 0
        self._started = time.monotonic()

    @property
    def client(self) -> Jobs:
        """A client of the store at `url` (it connects on its first call)."""
        if self._jobs is None:
            self._jobs = Jobs(driver_from_url(self.url))
        return self._jobs

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def record(self, doc: dict[str, Any]) -> None:
        self._out.write(json.dumps({**doc, "t": time.time() * 1000}) + "\n")
        self._out.flush()

    def intent(self, **fields: Any) -> dict[str, Any]:
        """A fresh input: its intent `i` (unique) and key `k`, plus `fields`."""
        self.made += 1
        i = new_id()
        return {"i": i, "k": f"k{self.made}-{i[-8:]}", **fields}

    async def enqueue(
        self, handle: JobHandle, inputs: Sequence[dict[str, Any]], **fields: Any
    ) -> list[str | None]:
        """Enqueue `inputs` under ids of their own, retried under the same ids; each input's
        answer is one line with its fields (`id` None when given up). Answers the ids."""
        ids = [new_id() for _ in inputs]
        got, tries, errors, refused = await persist(
            lambda: self.client.enqueue_many(handle, list(inputs), ids=ids)
        )
        for n, inp in enumerate(inputs):
            self.record(
                {
                    "ev": "enqueued",
                    "id": ids[n] if got is not None else None,
                    **inp,
                    "name": handle.name,
                    "deduped": got[n].deduped if got is not None else None,
                    "tries": tries,
                    "errors": errors,
                    "refused": refused,
                    **fields,
                }
            )
        return [ids[n] if got is not None else None for n in range(len(inputs))]

    async def send_event(self, name: str, data: dict[str, Any], **fields: Any) -> bool:
        """Send one event under an id of its own, retried under it; one line (`from`: when the
        first try began, so no run can have seen it before). True when sent."""
        event_id = new_id()
        began = time.time() * 1000
        got, tries, errors, refused = await persist(
            lambda: self.client.send_event(name, data, id=event_id)
        )
        self.record(
            {
                "ev": "sent",
                "event_id": event_id,
                "name": name,
                "data": data,
                "sent": got is not None,
                "from": began,
                "woken": got.woken if got is not None else None,
                "tries": tries,
                "errors": errors,
                "refused": refused,
                **fields,
            }
        )
        return got is not None

    async def pace(self) -> None:
        """Sleep while the feed is ahead of an even spread of `total` over `seconds`."""
        ahead = self.made - self.total * self.elapsed() / self.seconds
        if ahead > 0:
            await asyncio.sleep(min(0.5, ahead * self.seconds / self.total))

    async def close(self) -> None:
        self._out.close()
        if self._jobs is not None:
            await self._jobs.driver.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--family", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    module = importlib.import_module(f"bench.chaos.families.{a.family}")

    async def run() -> None:
        feeder = Feeder(a.url, a.jobs, a.seconds, a.seed, a.out)
        try:
            await module.feed(feeder)
        finally:
            await feeder.close()

    asyncio.run(run())


if __name__ == "__main__":
    main()
