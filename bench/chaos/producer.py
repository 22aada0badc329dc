"""The chaos run's producer: enqueues N jobs over the run, so enqueues meet the outages.

Mixes `enqueue_many` batches (5–30 inputs, 3 rounds in 10), single enqueues (half of them with
an `id=` of their own) and keys reused from intents enqueued seconds before. A call that fails
with `X_DRIVER_UNAVAILABLE` (after whatever retry the library does itself) is retried by the
producer with the SAME inputs, as an application would; each intent's final answer (id,
deduped, tries, the errors met) is one line of the answers file.

    python -m bench.chaos.producer --url URL --jobs N --seconds S --seed X --out FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from bench.chaos.feed import persist
from bench.chaos.jobs import chaos, chaos_once
from jobs_core import JobHandle, Jobs
from jobs_core.ids import new_id
from jobs_core.records import EnqueueResult
from jobs_core.urls import driver_from_url

T = TypeVar("T")

#: A key is reused only from an intent at least this old (its job has likely finished).
REUSE_AFTER_S: Final = 4.0


class Producer:
    def __init__(self, url: str, total: int, seconds: float, seed: int, out: str) -> None:
        self.jobs = Jobs(driver_from_url(url))
        self.total = total
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.out = open(out, "a", encoding="utf-8")  # noqa: SIM115 - closed in run()
        self.made = 0
        self.calls = 0
        # (monotonic time, key, single-attempt) of fresh intents, for reuse
        self.history: list[tuple[float, str, bool]] = []

    def intent(self, once: bool, key: str | None = None) -> tuple[JobHandle, dict[str, Any]]:
        self.made += 1
        long = self.rng.random() < 0.2
        fresh = key is None
        inp: dict[str, Any] = {
            "i": uuid.uuid4().hex,
            "k": key if key is not None else f"k{self.made}-{uuid.uuid4().hex[:8]}",
            "ms": self.rng.randint(500, 2500) if long else self.rng.randint(10, 200),
            "fail": 0 if once or self.rng.random() >= 0.15 else 1,
        }
        if fresh:
            self.history.append((time.monotonic(), inp["k"], once))
        return (chaos_once if once else chaos), inp

    def record(self, inp: dict[str, Any], handle: JobHandle, how: str, **answer: Any) -> None:
        doc = {"i": inp["i"], "k": inp["k"], "job": handle.name, "how": how, "call": self.calls}
        doc.update(answer)
        doc["t"] = time.time() * 1000
        self.out.write(json.dumps(doc) + "\n")
        self.out.flush()

    async def call(
        self, fn: Callable[[], Awaitable[T]]
    ) -> tuple[T | None, int, list[str], str | None]:
        """The call's answer (None if given up), its tries, the errors met, a refusal code."""
        self.calls += 1
        return await persist(fn)

    async def batch(self) -> None:
        once = self.rng.random() < 0.2
        handle, first = self.intent(once)
        more = min(self.rng.randint(4, 29), self.total - self.made)
        inputs = [first] + [self.intent(once)[1] for _ in range(more)]
        answers, tries, errors, refused = await self.call(
            lambda: self.jobs.enqueue_many(handle, inputs)
        )
        for n, inp in enumerate(inputs):
            res = answers[n] if answers is not None else None
            self.answer(inp, handle, "many", res, tries, errors, refused, None)

    async def single(self, reuse: bool) -> None:
        key = None
        once = self.rng.random() < 0.2
        if reuse:
            old = [(k, o) for t, k, o in self.history if time.monotonic() - t >= REUSE_AFTER_S]
            if not old:
                return
            key, once = self.rng.choice(old)
        handle, inp = self.intent(once, key)
        given = new_id() if not reuse and self.rng.random() < 0.5 else None
        options = {"id": given} if given else {}
        res, tries, errors, refused = await self.call(
            lambda: self.jobs.enqueue(handle, inp, **options)
        )
        how = "reuse" if reuse else ("one-id" if given else "one")
        self.answer(inp, handle, how, res, tries, errors, refused, given)

    def answer(
        self,
        inp: dict[str, Any],
        handle: JobHandle,
        how: str,
        res: EnqueueResult | None,
        tries: int,
        errors: list[str],
        refused: str | None,
        given: str | None,
    ) -> None:
        self.record(
            inp,
            handle,
            how,
            id=res.id if res else None,
            deduped=res.deduped if res else None,
            tries=tries,
            errors=errors,
            refused=refused,
            given_id=given,
        )

    async def run(self) -> None:
        started = time.monotonic()
        try:
            async with self.jobs.driver:
                # A first burst gives the workers a backlog before the first fault.
                while self.made < min(self.total, max(50, self.total // 10)):
                    await self.batch()
                while self.made < self.total:
                    elapsed = time.monotonic() - started
                    if elapsed > self.seconds:
                        break
                    ahead = self.made - self.total * elapsed / self.seconds
                    if ahead > 0:
                        await asyncio.sleep(min(0.5, ahead * self.seconds / self.total))
                        continue
                    r = self.rng.random()
                    if r < 0.3:
                        await self.batch()
                    else:
                        for _ in range(self.rng.randint(1, 5)):
                            await self.single(reuse=r >= 0.85)
        finally:
            self.out.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    asyncio.run(Producer(a.url, a.jobs, a.seconds, a.seed, a.out).run())


if __name__ == "__main__":
    main()
