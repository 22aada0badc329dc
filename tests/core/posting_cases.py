"""The posting ledger on every driver: the memory driver (tests/core/test_postings.py), Postgres
(tests/pg/test_postings_pg.py) and Redis (tests/redis/test_postings_redis.py) run these cases.

Each case takes an open driver with an empty store (the concurrent one, several drivers on one
store) and pins what `jobs_core.driver`'s `_posting_*` docstrings promise: a posting lands once
per (tenant, key) under its own job's held fence, a repeat is a no-op and other lines a
conflict, the tenants' ledgers (and the cross-tenant one) apart, balances exact past 2**63, and
every hostile value refused with its `X_LEDGER_*` code before anything is written.
"""

from __future__ import annotations

import asyncio
import decimal
import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from jobs_core.driver import MAX_POSTING_AMOUNT, MAX_POSTING_LINES, JobDriver
from jobs_core.errors import JobsError
from jobs_core.records import (
    Ack,
    BalanceRow,
    ClaimParams,
    Fence,
    PostingLine,
    PostingPut,
)
from tests.core.support import T0, new_job

LEASE_MS = 600_000
ACCOUNTS = ["bank", "cash", "fees", "revenue"]


async def held(
    driver: JobDriver, key: str, *, worker: str = "w", tenant: str | None = None, now: int = T0
) -> Fence:
    """Enqueue and claim a job whose idempotency key is `key` (job and queue of their own);
    its fence."""
    job_id = "job-" + hashlib.sha1(f"{key}\x00{worker}\x00{tenant}".encode()).hexdigest()[:12]
    queue = f"q-{job_id}"
    await driver.job_enqueue(new_job(job_id, key, queue=queue, tenant=tenant))
    got = await driver.job_claim(ClaimParams((queue,), worker, 1, LEASE_MS, now))
    assert [j.id for j in got.jobs] == [job_id]
    return got.jobs[0].fence


def pair(
    amount: int, debit: str = "cash", credit: str = "revenue", cur: str = "EUR"
) -> tuple[PostingLine, PostingLine]:
    return (PostingLine(debit, cur, amount), PostingLine(credit, cur, -amount))


async def balances(driver: JobDriver, tenant: str | None) -> dict[tuple[str, str], int]:
    rows = await driver.posting_balances(tenant, ACCOUNTS)
    return {(r.account, r.currency): r.balance for r in rows}


async def a_posting_lands_once(driver: JobDriver) -> None:
    f = await held(driver, "charge:1", tenant="acme")
    lines = (*pair(1250), PostingLine("bank", "USD", 7), PostingLine("fees", "USD", -7))
    first = await driver.posting_put(PostingPut(f, "acme", "charge:1", lines, T0 + 1))
    assert first.status == "applied" and first.posting is not None
    assert first.posting.job_id == f.job_id and first.posting.posted_at_ms == T0 + 1
    # Stored sorted by (account, currency), whatever order they came in.
    assert [(x.account, x.currency) for x in first.posting.lines] == [
        ("bank", "USD"),
        ("cash", "EUR"),
        ("fees", "USD"),
        ("revenue", "EUR"),
    ]
    again = await driver.posting_put(PostingPut(f, "acme", "charge:1", lines[::-1], T0 + 2))
    assert again == replace(first, status="already_applied")
    other = await driver.posting_put(PostingPut(f, "acme", "charge:1", pair(1251), T0 + 3))
    assert other == replace(first, status="conflict")
    assert await driver.posting_get("acme", "charge:1") == first.posting
    assert await driver.posting_get("acme", "charge:2") is None
    assert await driver.posting_balances("acme", ACCOUNTS) == [
        BalanceRow("bank", "USD", 7, 0),
        BalanceRow("cash", "EUR", 1250, 0),
        BalanceRow("fees", "USD", 0, 7),
        BalanceRow("revenue", "EUR", 0, 1250),
    ]
    # An account never posted to answers no row; per currency never mixed.
    assert await driver.posting_balances("acme", ["nobody", "bank"]) == [
        BalanceRow("bank", "USD", 7, 0)
    ]


async def a_lost_fence_writes_nothing(driver: JobDriver) -> None:
    f = await held(driver, "k1", tenant="acme")
    other_row = await held(driver, "k2", tenant="acme")
    stale = [
        replace(f, claims=f.claims + 1),
        replace(f, worker_id="someone-else"),
        Fence("no-such-job", 1, "w"),
        # A held fence of a row whose key is another: a run posts only under its own key.
        other_row,
    ]
    for fence in stale:
        got = await driver.posting_put(PostingPut(fence, "acme", "k1", pair(5), T0))
        assert got.status == "fence_lost" and got.posting is None, fence
    assert await driver.posting_get("acme", "k1") is None
    assert await balances(driver, "acme") == {}
    # Acked: the claim is gone, even for a key posted before.
    assert (await driver.posting_put(PostingPut(f, "acme", "k1", pair(5), T0))).status == "applied"
    assert await driver.job_ack([Ack(f, T0 + 1)]) == [True]
    late = await driver.posting_put(PostingPut(f, "acme", "k1", pair(6), T0 + 2))
    assert late.status == "fence_lost" and late.posting is None
    assert await balances(driver, "acme") == {("cash", "EUR"): 5, ("revenue", "EUR"): -5}


async def ledgers_of_tenants_are_apart(driver: JobDriver) -> None:
    a = await held(driver, "same-key", tenant="org-a")
    b = await held(driver, "same-key", tenant="org-b", worker="w2")
    n = await held(driver, "same-key", worker="w3")
    assert (await driver.posting_put(PostingPut(a, "org-a", "same-key", pair(1), T0))).status == (
        "applied"
    )
    # The same key in another tenant's ledger, and in the cross-tenant one, is another posting.
    got_b = await driver.posting_put(PostingPut(b, "org-b", "same-key", pair(2), T0))
    got_n = await driver.posting_put(PostingPut(n, None, "same-key", pair(3), T0))
    assert got_b.status == got_n.status == "applied"
    assert got_n.posting is not None and got_n.posting.tenant_id is None
    assert await balances(driver, "org-a") == {("cash", "EUR"): 1, ("revenue", "EUR"): -1}
    assert await balances(driver, "org-b") == {("cash", "EUR"): 2, ("revenue", "EUR"): -2}
    assert await balances(driver, None) == {("cash", "EUR"): 3, ("revenue", "EUR"): -3}
    got = await driver.posting_get("org-b", "same-key")
    assert got is not None and got.job_id == b.job_id and got.lines[0].amount == 2
    assert await driver.posting_get("org-c", "same-key") is None


async def balances_are_exact_past_any_machine_number(driver: JobDriver) -> None:
    """Amounts at the bound, summed past 2**53 and 2**63: read back exactly, never rounded."""
    total = 0
    for i in range(12):
        key = f"big-{i}"
        f = await held(driver, key)
        got = await driver.posting_put(PostingPut(f, None, key, pair(MAX_POSTING_AMOUNT), T0))
        assert got.status == "applied"
        total += MAX_POSTING_AMOUNT
    rows = await driver.posting_balances(None, ["cash", "revenue"])
    assert rows == [BalanceRow("cash", "EUR", total, 0), BalanceRow("revenue", "EUR", 0, total)]
    assert total > 2**63 and rows[0].balance == total and rows[1].balance == -total
    f = await held(driver, "odd")
    odd = 2**53 + 1
    await driver.posting_put(PostingPut(f, None, "odd", pair(odd, "bank", "fees"), T0))
    stored = await driver.posting_get(None, "odd")
    assert stored is not None and {x.amount for x in stored.lines} == {odd, -odd}
    assert await balances(driver, None) == {
        ("bank", "EUR"): odd,
        ("fees", "EUR"): -odd,
        ("cash", "EUR"): total,
        ("revenue", "EUR"): -total,
    }


#: Line sets every driver refuses, each with the code it is refused with.
HOSTILE: list[tuple[str, Any, str]] = [
    ("unbalanced", (*pair(5)[:1], PostingLine("revenue", "EUR", -4)), "X_LEDGER_UNBALANCED"),
    (
        "balanced across currencies only",
        (PostingLine("cash", "EUR", 5), PostingLine("revenue", "USD", -5)),
        "X_LEDGER_UNBALANCED",
    ),
    ("one line", pair(5)[:1], "X_LEDGER_LINES_INVALID"),
    ("no line", (), "X_LEDGER_LINES_INVALID"),
    (
        "too many lines",
        tuple(
            PostingLine(f"a{i}", "EUR", 1 if i % 2 else -1) for i in range(MAX_POSTING_LINES + 2)
        ),
        "X_LEDGER_LINES_INVALID",
    ),
    ("a line twice", pair(5) + pair(5), "X_LEDGER_LINES_INVALID"),
    ("not a line", (("cash", "EUR", 5), ("revenue", "EUR", -5)), "X_LEDGER_LINES_INVALID"),
    ("a float amount", pair(5.0), "X_LEDGER_AMOUNT_INVALID"),  # type: ignore[arg-type]
    ("a bool amount", pair(True), "X_LEDGER_AMOUNT_INVALID"),
    ("a zero amount", pair(0), "X_LEDGER_AMOUNT_INVALID"),
    ("past the bound", pair(MAX_POSTING_AMOUNT + 1), "X_LEDGER_AMOUNT_INVALID"),
    ("a Decimal", pair(decimal.Decimal(5)), "X_LEDGER_AMOUNT_INVALID"),  # type: ignore[arg-type]
    (
        "a string amount",
        (PostingLine("cash", "EUR", "5"), PostingLine("revenue", "EUR", -5)),  # type: ignore[arg-type]
        "X_LEDGER_AMOUNT_INVALID",
    ),
    ("a NUL in an account", pair(5, "ca\x00sh"), "X_LEDGER_ACCOUNT_INVALID"),
    ("a lone surrogate", pair(5, "ca\ud83dsh"), "X_LEDGER_ACCOUNT_INVALID"),
    ("markup", pair(5, "<b>cash</b>"), "X_LEDGER_ACCOUNT_INVALID"),
    ("a space", pair(5, "petty cash"), "X_LEDGER_ACCOUNT_INVALID"),
    ("an empty account", pair(5, ""), "X_LEDGER_ACCOUNT_INVALID"),
    ("an over-long account", pair(5, "a" * 201), "X_LEDGER_ACCOUNT_INVALID"),
    ("non-ASCII", pair(5, "caisse-é"), "X_LEDGER_ACCOUNT_INVALID"),
    ("a lower-case currency", pair(5, cur="eur"), "X_LEDGER_CURRENCY_INVALID"),
    ("a NUL in a currency", pair(5, cur="EU\x00"), "X_LEDGER_CURRENCY_INVALID"),
    ("an over-long currency", pair(5, cur="E" * 13), "X_LEDGER_CURRENCY_INVALID"),
]


async def hostile_values_write_nothing(driver: JobDriver) -> None:
    f = await held(driver, "k", tenant="acme")
    for what, lines, code in HOSTILE:
        with pytest.raises(JobsError) as caught:
            await driver.posting_put(PostingPut(f, "acme", "k", lines, T0))
        assert caught.value.code == code, what
    for bad in (
        PostingPut(f, "acme", "", pair(1), T0),
        PostingPut(f, "acme", "k\x00", pair(1), T0),
        PostingPut(f, "ac\ud800me", "k", pair(1), T0),
        PostingPut(f, "", "k", pair(1), T0),
        PostingPut(replace(f, claims=0), "acme", "k", pair(1), T0),
        PostingPut(f, "acme", "k", pair(1), -1),
    ):
        with pytest.raises(JobsError) as caught:
            await driver.posting_put(bad)
        assert caught.value.code == "X_JOB_RECORD_INVALID", bad
    for accounts in ([], "cash", ["cash", "cash"], ["<i>"]):
        with pytest.raises(JobsError):
            await driver.posting_balances("acme", accounts)
    assert await driver.posting_get("acme", "k") is None
    assert await balances(driver, "acme") == {}
    # The fence still holds: a good posting lands after every refusal.
    assert (await driver.posting_put(PostingPut(f, "acme", "k", pair(1), T0))).status == "applied"


async def concurrent_puts_post_a_key_once(drivers: Sequence[JobDriver], per: int) -> None:
    """Puts of one key under one held fence at once, from several connections: one applies,
    every other answers already_applied (or conflict, for other lines), balances moved once."""
    f = await held(drivers[0], "race", tenant="acme")
    lines = (*pair(10), PostingLine("bank", "EUR", 3), PostingLine("fees", "EUR", -3))
    asked = [
        (d, tuple(sorted(lines if i % 3 else pair(11), key=lambda x: x.account)), i)
        for i in range(per)
        for d in drivers
    ]
    got = await asyncio.gather(
        *(d.posting_put(PostingPut(f, "acme", "race", ls, T0 + i)) for d, ls, i in asked)
    )
    applied = [g for g in got if g.status == "applied"]
    assert len(applied) == 1, [g.status for g in got]
    winner = applied[0].posting
    assert winner is not None
    for (_, ls, _), g in zip(asked, got, strict=True):
        assert g.posting == winner
        same = ls == winner.lines
        assert g.status in (("applied", "already_applied") if same else ("conflict",))
    sums = await balances(drivers[0], "acme")
    assert sum(abs(v) for v in sums.values()) in (26, 22)
    assert sum(sums.values()) == 0
