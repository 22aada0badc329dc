"""The posting family's scenarios: `ledger()`'s postings. A posting lands once per (tenant,
key): a repeat with the same lines (in any order) is a no-op, other lines a conflict, nothing
written either way; every put fenced on the claim of the job holding the key (a lapsed lease
nobody reclaimed still holds; a reclaimed, acked or retried claim posts nothing; a held fence of
a row whose key is another posts nothing); a second job of the same key finds the first's
posting; the ledgers of tenants and the cross-tenant one apart; balances exact past 2**53 and
2**63, per currency; refused calls writing nothing.

Each posting's job is a row of its own queue, claimed by `w1` unless said. A driver that does
not declare `postings` refuses the calls with `X_DRIVER_CAPABILITY_MISSING`, which ends these
scenarios there.
"""

from __future__ import annotations

from dataclasses import replace

from jobs_core.driver import MAX_POSTING_AMOUNT, JobDriver
from jobs_core.records import (
    Ack,
    BalanceRow,
    ClaimedJob,
    Fence,
    Nack,
    NackKind,
    PostingLine,
    PostingPut,
    PostingPutAnswer,
    PostingRecord,
)
from jobs_core.testing.compare import exactly_bytes
from jobs_core.testing.scenarios.support import T0, Scenario, claim_one, new_job, refused

ACCOUNTS = ["bank", "cash", "fees", "revenue"]
LONG_KEY = exactly_bytes("k", "é☃😀", 1024)


def _pair(
    amount: int, debit: str = "cash", credit: str = "revenue", cur: str = "EUR"
) -> tuple[PostingLine, PostingLine]:
    return (PostingLine(debit, cur, amount), PostingLine(credit, cur, -amount))


async def _row(driver: JobDriver, job_id: str, key: str, worker: str = "w1") -> ClaimedJob:
    """A job holding `key` in a queue of its own, claimed by `worker` for 1 s."""
    await driver.job_enqueue(
        new_job(job_id, queue=f"q-{job_id}", name=f"ledger-{job_id}", idempotency_key=key)
    )
    return await claim_one(driver, T0, f"q-{job_id}", worker=worker)


async def _put(
    driver: JobDriver,
    f: Fence,
    tenant: str | None,
    key: str,
    lines: tuple[PostingLine, ...],
    now: int = T0,
) -> PostingPutAnswer:
    return await driver.posting_put(PostingPut(f, tenant, key, lines, now))


async def _sums(driver: JobDriver, tenant: str | None) -> dict[tuple[str, str], tuple[int, int]]:
    rows = await driver.posting_balances(tenant, ACCOUNTS)
    return {(r.account, r.currency): (r.debits, r.credits) for r in rows}


async def scenario_postings_a_posting_lands_once(driver: JobDriver) -> None:
    job = await _row(driver, "p1", "charge:1")
    lines = (*_pair(1250), PostingLine("fees", "USD", -7), PostingLine("bank", "USD", 7))
    first = await _put(driver, job.fence, "t1", "charge:1", lines, T0 + 5)
    want = PostingRecord(
        "t1",
        "charge:1",
        "p1",
        tuple(sorted(lines, key=lambda x: (x.account, x.currency))),
        T0 + 5,
    )
    assert first == PostingPutAnswer("applied", want), first
    assert await _put(driver, job.fence, "t1", "charge:1", lines[::-1], T0 + 6) == (
        PostingPutAnswer("already_applied", want)
    )
    # Other lines: other accounts, or the same accounts and currencies with other amounts.
    same_accounts = (*_pair(1251), PostingLine("fees", "USD", -7), PostingLine("bank", "USD", 7))
    for other in (_pair(1250), same_accounts):
        assert await _put(driver, job.fence, "t1", "charge:1", other, T0 + 7) == (
            PostingPutAnswer("conflict", want)
        )
    assert await driver.posting_get("t1", "charge:1") == want
    assert await driver.posting_balances("t1", ACCOUNTS) == [
        BalanceRow("bank", "USD", 7, 0),
        BalanceRow("cash", "EUR", 1250, 0),
        BalanceRow("fees", "USD", 0, 7),
        BalanceRow("revenue", "EUR", 0, 1250),
    ]


async def scenario_postings_fenced_on_the_claim(driver: JobDriver) -> None:
    # Lapsed, nobody reclaimed it: the fence still holds.
    lapsed = await _row(driver, "p1", "k1")
    got = await _put(driver, lapsed.fence, None, "k1", _pair(1), T0 + 5_000)
    assert got.status == "applied", got
    # Reclaimed: the old fence posts nothing; the new holder finds the key posted.
    old = await _row(driver, "p2", "k2")
    new = await claim_one(driver, T0 + 1_000, "q-p2", worker="w2")
    assert (await _put(driver, old.fence, None, "k2", _pair(2), T0 + 1_000)).status == (
        "fence_lost"
    )
    assert await driver.posting_get(None, "k2") is None
    assert (await _put(driver, new.fence, None, "k2", _pair(2), T0 + 1_001)).status == "applied"
    assert (await _put(driver, old.fence, None, "k2", _pair(2), T0 + 1_002)).status == (
        "fence_lost"
    )
    # Acked, or retried: the claim is gone.
    acked = await _row(driver, "p3", "k3")
    assert await driver.job_ack([Ack(acked.fence, T0)]) == [True]
    assert (await _put(driver, acked.fence, None, "k3", _pair(3))).status == "fence_lost"
    retried = await _row(driver, "p4", "k4")
    assert await driver.job_nack([Nack(retried.fence, NackKind.RETRY, T0, T0, "boom")]) == [True]
    assert (await _put(driver, retried.fence, None, "k4", _pair(4))).status == "fence_lost"
    # A fence near the held one: another worker, another count.
    held = await _row(driver, "p5", "k5")
    for f in (replace(held.fence, worker_id="w2"), replace(held.fence, claims=2)):
        assert (await _put(driver, f, None, "k5", _pair(5))).status == "fence_lost"
    assert await driver.posting_get(None, "k3") is None
    assert await driver.posting_get(None, "k4") is None
    assert await driver.posting_get(None, "k5") is None
    assert await _sums(driver, None) == {("cash", "EUR"): (3, 0), ("revenue", "EUR"): (0, 3)}


async def scenario_postings_a_run_posts_only_its_own_key(driver: JobDriver) -> None:
    mine = await _row(driver, "p1", "mine")
    await _row(driver, "p2", "theirs")
    got = await _put(driver, mine.fence, "t1", "theirs", _pair(9))
    assert got == PostingPutAnswer("fence_lost", None), got
    assert await driver.posting_get("t1", "theirs") is None
    assert await _sums(driver, "t1") == {}


async def scenario_postings_a_second_job_of_a_key_finds_the_first(driver: JobDriver) -> None:
    one = await _row(driver, "p1", LONG_KEY)
    two = await _row(driver, "p2", LONG_KEY)
    first = await _put(driver, one.fence, "t1", LONG_KEY, _pair(40))
    assert first.status == "applied" and first.posting is not None
    again = await _put(driver, two.fence, "t1", LONG_KEY, _pair(40)[::-1], T0 + 9)
    assert again == PostingPutAnswer("already_applied", first.posting), again
    other = await _put(driver, two.fence, "t1", LONG_KEY, _pair(41), T0 + 9)
    assert other == PostingPutAnswer("conflict", first.posting), other
    assert await _sums(driver, "t1") == {("cash", "EUR"): (40, 0), ("revenue", "EUR"): (0, 40)}


async def scenario_postings_ledgers_are_apart(driver: JobDriver) -> None:
    rows = [await _row(driver, f"p{i}", "same") for i in range(4)]
    tenants: list[str | None] = ["t1", "t2", "☃ org", None]
    for i, (job, tenant) in enumerate(zip(rows, tenants, strict=True)):
        got = await _put(driver, job.fence, tenant, "same", _pair(i + 1))
        assert got.status == "applied", (tenant, got)
    for i, tenant in enumerate(tenants):
        n = i + 1
        assert await _sums(driver, tenant) == {("cash", "EUR"): (n, 0), ("revenue", "EUR"): (0, n)}
        stored = await driver.posting_get(tenant, "same")
        assert stored is not None and stored.job_id == f"p{i}" and stored.tenant_id == tenant
    assert await driver.posting_get("t3", "same") is None
    assert await _sums(driver, "t3") == {}


async def scenario_postings_balances_are_exact(driver: JobDriver) -> None:
    odd = 2**53 + 1
    total = 0
    for i in range(10):
        job = await _row(driver, f"p{i}", f"k{i}")
        assert (await _put(driver, job.fence, None, f"k{i}", _pair(MAX_POSTING_AMOUNT))).status == (
            "applied"
        )
        total += MAX_POSTING_AMOUNT
    job = await _row(driver, "odd", "odd")
    lines = (*_pair(odd, "bank", "fees"), *_pair(odd, "fees", "bank", "USD"))
    assert (await _put(driver, job.fence, None, "odd", lines)).status == "applied"
    assert total > 2**63
    assert await driver.posting_balances(None, ACCOUNTS) == [
        BalanceRow("bank", "EUR", odd, 0),
        BalanceRow("bank", "USD", 0, odd),
        BalanceRow("cash", "EUR", total, 0),
        BalanceRow("fees", "EUR", 0, odd),
        BalanceRow("fees", "USD", odd, 0),
        BalanceRow("revenue", "EUR", 0, total),
    ]
    stored = await driver.posting_get(None, "odd")
    assert stored is not None and sorted(x.amount for x in stored.lines) == [-odd, -odd, odd, odd]


async def scenario_postings_refusals_write_nothing(driver: JobDriver) -> None:
    job = await _row(driver, "p1", "k")
    f = job.fence
    good = _pair(5)
    for code, lines in (
        ("X_LEDGER_UNBALANCED", (good[0], replace(good[1], amount=-4))),
        ("X_LEDGER_UNBALANCED", (good[0], replace(good[1], currency="USD"))),
        ("X_LEDGER_LINES_INVALID", good[:1]),
        ("X_LEDGER_LINES_INVALID", good + good),
        ("X_LEDGER_AMOUNT_INVALID", _pair(MAX_POSTING_AMOUNT + 1)),
        ("X_LEDGER_AMOUNT_INVALID", (replace(good[0], amount=5.0), good[1])),  # type: ignore[arg-type]
        ("X_LEDGER_AMOUNT_INVALID", _pair(0)),
        ("X_LEDGER_ACCOUNT_INVALID", _pair(5, "<script>")),
        ("X_LEDGER_ACCOUNT_INVALID", _pair(5, "a\x00b")),
        ("X_LEDGER_ACCOUNT_INVALID", _pair(5, "a\udc00b")),
        ("X_LEDGER_ACCOUNT_INVALID", _pair(5, "a" * 201)),
        ("X_LEDGER_CURRENCY_INVALID", _pair(5, cur="EURO\x00")),
    ):
        await refused(code, _put(driver, f, None, "k", lines))
    await refused("X_JOB_RECORD_INVALID", _put(driver, f, None, "", good))
    await refused("X_JOB_RECORD_INVALID", _put(driver, f, "", "k", good))
    await refused("X_JOB_RECORD_INVALID", _put(driver, f, None, "k" * 1025, good))
    await refused("X_JOB_RECORD_INVALID", driver.posting_balances(None, []))
    await refused("X_LEDGER_ACCOUNT_INVALID", driver.posting_balances(None, ["<b>"]))
    assert await driver.posting_get(None, "k") is None
    assert await _sums(driver, None) == {}
    assert (await _put(driver, f, None, "k", good)).status == "applied"


POSTING_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_postings_a_posting_lands_once,
        scenario_postings_a_run_posts_only_its_own_key,
        scenario_postings_a_second_job_of_a_key_finds_the_first,
        scenario_postings_balances_are_exact,
        scenario_postings_fenced_on_the_claim,
        scenario_postings_ledgers_are_apart,
        scenario_postings_refusals_write_nothing,
    )
}
