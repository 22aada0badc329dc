"""The posting family's rules: `ledger()`'s postings (`posting_put`, `posting_get`,
`posting_balances`), interleaved with the job writes that move the fences a posting is written
under (claims, reclaims of lapsed leases, acks, retries, cancels). Every posting named so far
and every tenant's balances are compared after each step. Only runs when the driver declares
`postings` in `capabilities()`.

The edges are aimed at, each rule making the rows it needs (a row in a queue of its own, so it
claims exactly that row): a run posting its key once, then the same lines again (in another
order too), other lines (a conflict), after its lease lapsed with nobody claiming (it still
holds), after another worker reclaimed it (the old fence posts nothing, the new holder finds it
posted), after its ack, cancel or retry; a key posted by one job found by another job holding
the same key; the same key in other tenants' ledgers and in the cross-tenant one; a held fence
of a row whose key is another (posts nothing); amounts at the bound and past 2**53, sums past
2**63; accounts and currencies at their length limits; every refusal of the ABC (nothing
written).
"""

from __future__ import annotations

import functools
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import MAX_POSTING_AMOUNT, MAX_POSTING_LINES
from jobs_core.errors import JobsError
from jobs_core.records import (
    Ack,
    ClaimedJob,
    Fence,
    Nack,
    NackKind,
    PostingLine,
    PostingPut,
    PostingPutAnswer,
)
from jobs_core.testing.compare import Check, exactly_bytes
from jobs_core.testing.machine import WORKERS, ParityMachine, recent

#: Ledgers: the cross-tenant one (None), two orgs, one at the name's byte limit.
TENANTS: tuple[str | None, ...] = (None, "t1", "☃ org", exactly_bytes("t", "é☃😀", 200))
#: Accounts, one at the 200-character limit and one holding every punctuation allowed.
LONG_ACCOUNT = "a" * 200
ACCOUNTS = ("bank", "cash", "fees", "revenue", LONG_ACCOUNT, "x:y/z-1.2_3")
LONG_CURRENCY = "ABCDEFGHIJKL"
ODD = 2**53 + 1
#: Keys: short, with quotes and non-ASCII text, at the idempotency key's 1,024-byte limit.
KEYS = ("charge:1", "charge:2", "q'uo%te\n☃", exactly_bytes("k", "é☃😀", 1024))


def _pair(debit: str, credit: str, currency: str, amount: int) -> tuple[PostingLine, ...]:
    return (PostingLine(debit, currency, amount), PostingLine(credit, currency, -amount))


#: Balanced line sets (as a caller hands them, unsorted): the first two conflict on one key.
LINE_SETS: tuple[tuple[PostingLine, ...], ...] = (
    _pair("cash", "revenue", "EUR", 1250),
    _pair("cash", "revenue", "EUR", 1251),
    (*_pair("revenue", "cash", "EUR", 5), *_pair("bank", "fees", "USD", 7)),
    (
        PostingLine("revenue", "EUR", -15),
        PostingLine("cash", "EUR", 10),
        PostingLine("bank", "EUR", 5),
    ),
    _pair("cash", "revenue", "EUR", MAX_POSTING_AMOUNT),
    _pair("bank", "fees", "EUR", ODD),
    _pair(LONG_ACCOUNT, "x:y/z-1.2_3", LONG_CURRENCY, 3),
    # The same lines as the first, in another order: the same posting.
    _pair("cash", "revenue", "EUR", 1250)[::-1],
)
#: How an aimed run goes on after its first posting (`posting_run`).
ENDS = (
    "repeat",
    "conflict",
    "reclaimed",
    "lapsed",
    "acked",
    "cancelled",
    "retried",
    "other tenants",
    "repeat",
    "reclaimed",
)
#: Calls the ABC refuses before any read or write.
REFUSALS = (
    "unbalanced",
    "mixed currencies",
    "one line",
    "too many lines",
    "a line twice",
    "a float amount",
    "a bool amount",
    "a zero amount",
    "past the bound",
    "a NUL in an account",
    "a lone surrogate in an account",
    "markup in an account",
    "a lower-case currency",
    "an empty key",
    "a key with a NUL",
    "an empty tenant",
    "fence count 0",
    "balances of no account",
    "balances of an account twice",
    "balances of a markup account",
)


class PostingRules(ParityMachine):
    """The posting family, over the job family's rows and fences."""

    FAMILY = "postings"

    # -- random calls -------------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.postings)
    @rule(
        op=st.sampled_from(("put", "put", "put", "get", "balances", "refused")),
        pick=recent,
        fence=st.sampled_from(("own", "own", "own", "other key", "skewed", "past")),
        tenant=st.sampled_from(TENANTS),
        lines=st.sampled_from(LINE_SETS),
        key=st.sampled_from(KEYS),
        refusal=st.sampled_from(REFUSALS),
    )
    def posting(
        self,
        op: str,
        pick: int,
        fence: str,
        tenant: str | None,
        lines: tuple[PostingLine, ...],
        key: str,
        refusal: str,
    ) -> None:
        """One posting call: a put under a running row's fence for its own key, under a held
        fence for another row's key, under a skewed or a past fence; a read of a key; the
        balances of a tenant; a refused call."""
        if op == "put":
            got = self._put_fence(fence, pick)
            if got is None:
                return
            f, k = got
            self._post(f, tenant, k, lines)
        elif op == "get":
            self._get(tenant, key)
        elif op == "balances":
            self._balances(tenant, list(ACCOUNTS[: 1 + pick % len(ACCOUNTS)]))
        else:
            self._posting_refused(refusal, pick)

    def _put_fence(self, how: str, pick: int) -> tuple[Fence, str] | None:
        rows = [r for r in self._held_rows() if r.claimed_by is not None]
        if not rows:
            return None
        r = rows[-1 - pick % len(rows)]
        assert r.claimed_by is not None
        f = Fence(r.id, r.claims, r.claimed_by)
        if how == "other key":
            others = [o.idempotency_key for o in self.model.rows.values() if o.id != r.id]
            others = [k for k in others if k != r.idempotency_key]
            if others:
                return f, others[-1 - pick % len(others)]
        if how == "skewed":
            f = [
                replace(f, worker_id=WORKERS[1] if f.worker_id == WORKERS[0] else WORKERS[0]),
                replace(f, claims=f.claims + 1),
            ][pick % 2]
        if how == "past":
            past = [x for x in self.fences if x.job_id == r.id and x != f]
            if past:
                f = past[-1]
        return f, r.idempotency_key

    # -- the edges, aimed at --------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.postings)
    @rule(
        key=st.sampled_from(KEYS),
        tenant=st.sampled_from(TENANTS),
        first=st.sampled_from(LINE_SETS),
        other=st.sampled_from(LINE_SETS),
        end=st.sampled_from(ENDS),
        delta=st.sampled_from((0, 0, 1)),
    )
    def posting_run(
        self,
        key: str,
        tenant: str | None,
        first: tuple[PostingLine, ...],
        other: tuple[PostingLine, ...],
        end: str,
        delta: int,
    ) -> None:
        """One run of a ledger job: its row (key `key`) claimed, its lines posted, then `end`:
        the same lines again and reordered; other lines (a conflict, unless they are the same);
        its lease lapsed `delta` ms ago with nobody claiming (it still holds) or reclaimed by
        another worker (the old fence posts nothing, the new holder finds it posted); its row
        acked, cancelled or retried first; the same key in every other ledger."""
        job = self._posting_row(key)
        if job is None:
            return
        f = job.fence
        self._post(f, tenant, key, first)
        if end == "repeat":
            self._post(f, tenant, key, first[::-1])
        elif end == "conflict":
            self._post(f, tenant, key, other)
        elif end in ("reclaimed", "lapsed"):
            self.now = max(self.now, job.lease_until_ms + delta)
            if end == "reclaimed":
                again = self._claim_alone(job.queue, WORKERS[1])
                if again is not None:
                    self._post(again.fence, tenant, key, first)
            self._post(f, tenant, key, first)
        elif end == "acked":
            self._ack([Ack(f, self.now, None)])
            self._post(f, tenant, key, first)
        elif end == "cancelled":
            if self.capabilities.operator:
                self._both(
                    "job_cancel",
                    functools.partial(self.model.job_cancel, f.job_id, self.now),
                    functools.partial(self.driver.job_cancel, f.job_id, self.now),
                )
            else:
                self._nack([Nack(f, NackKind.FAIL, self.now, error="boom")])
            self._post(f, tenant, key, other)
        elif end == "retried":
            self._nack([Nack(f, NackKind.RETRY, self.now, self.now, "boom")])
            again = self._claim_alone(job.queue, WORKERS[1])
            self._post(f, tenant, key, first)
            if again is not None:
                self._post(again.fence, tenant, key, first)
        else:
            for t in TENANTS:
                if t != tenant:
                    self._post(f, t, key, other)
        self._balances(tenant, list(ACCOUNTS))

    @precondition(lambda self: self.capabilities.postings)
    @rule(
        key=st.sampled_from(KEYS), tenant=st.sampled_from(TENANTS), lines=st.sampled_from(LINE_SETS)
    )
    def posting_by_another_job(
        self, key: str, tenant: str | None, lines: tuple[PostingLine, ...]
    ) -> None:
        """Two jobs holding one key (apart in time, or at once under other names): the second
        finds the first's posting (same lines: already applied, its job the first's)."""
        one = self._posting_row(key)
        two = self._posting_row(key)
        if one is None or two is None:
            return
        self._post(one.fence, tenant, key, lines)
        self._post(two.fence, tenant, key, lines[::-1])

    # -- calls on both, and what they reached -----------------------------------------------------

    def _post(
        self, f: Fence, tenant: str | None, key: str, lines: tuple[PostingLine, ...]
    ) -> PostingPutAnswer | JobsError:
        put = PostingPut(f, tenant, key, lines, self.now)
        self.posting_keys.add((tenant, key))
        held = self.model._held(f)
        before = self.model.postings.get((tenant, key))
        got = self._both(
            "posting_put",
            functools.partial(self.model.posting_put, put),
            functools.partial(self.driver.posting_put, put),
        )
        if isinstance(got, PostingPutAnswer):
            self._note(f"posting put {got.status}")
            if got.status == "fence_lost" and held is not None:
                self._note("posting put under a held fence of a row with another key")
            lapsed = held is not None and (held.lease_until_ms or self.now + 1) <= self.now
            if lapsed and got.status != "fence_lost":
                self._note("posting put under a lapsed lease nobody claimed")
            if before is not None and got.status == "already_applied":
                if before.job_id != f.job_id:
                    self._note("posting already applied by another job")
                if before.lines != tuple(lines):
                    self._note("posting already applied, lines in another order")
            if got.status == "applied" and any(
                (t, key) in self.model.postings for t in TENANTS if t != tenant
            ):
                self._note("posting applied beside the same key in another ledger")
        return got

    def _get(self, tenant: str | None, key: str) -> object:
        self.posting_keys.add((tenant, key))
        return self._both(
            "posting_get",
            functools.partial(self.model.posting_get, tenant, key),
            functools.partial(self.driver.posting_get, tenant, key),
        )

    def _balances(self, tenant: str | None, accounts: list[str]) -> object:
        got = self._both(
            "posting_balances",
            functools.partial(self.model.posting_balances, tenant, accounts),
            functools.partial(self.driver.posting_balances, tenant, accounts),
        )
        if isinstance(got, list) and any(abs(r.balance) > 2**63 for r in got):
            self._note("posting balance past 2**63")
        return got

    def _posting_refused(self, kind: str, pick: int) -> None:
        """A call the ABC refuses: nothing is written (the state check sees)."""
        rows = [r for r in self._held_rows() if r.claimed_by is not None]
        f = (
            Fence(rows[0].id, rows[0].claims, rows[0].claimed_by or WORKERS[0])
            if rows
            else Fence("x", 1, "w")
        )
        key = self.model.rows[f.job_id].idempotency_key if f.job_id in self.model.rows else "k"
        good = LINE_SETS[0]
        lines: dict[str, tuple[PostingLine, ...]] = {
            "unbalanced": (good[0], replace(good[1], amount=-1249)),
            "mixed currencies": (good[0], replace(good[1], currency="USD")),
            "one line": good[:1],
            "too many lines": tuple(
                PostingLine(f"a{i}", "EUR", 1 if i % 2 else -1)
                for i in range(MAX_POSTING_LINES + 2)
            ),
            "a line twice": good + good,
            "a float amount": (replace(good[0], amount=1250.0), good[1]),  # type: ignore[arg-type]
            "a bool amount": _pair("cash", "revenue", "EUR", True),
            "a zero amount": _pair("cash", "revenue", "EUR", 0),
            "past the bound": _pair("cash", "revenue", "EUR", MAX_POSTING_AMOUNT + 1),
            "a NUL in an account": _pair("ca\x00sh", "revenue", "EUR", 1),
            "a lone surrogate in an account": _pair("ca\ud83dsh", "revenue", "EUR", 1),
            "markup in an account": _pair("<b>x</b>", "revenue", "EUR", 1),
            "a lower-case currency": _pair("cash", "revenue", "eur", 1),
        }
        puts: dict[str, PostingPut] = {
            "an empty key": PostingPut(f, None, "", good, self.now),
            "a key with a NUL": PostingPut(f, None, "k\x00", good, self.now),
            "an empty tenant": PostingPut(f, "", key, good, self.now),
            "fence count 0": PostingPut(replace(f, claims=0), None, key, good, self.now),
        }
        reads: dict[str, list[str]] = {
            "balances of no account": [],
            "balances of an account twice": ["cash", "cash"],
            "balances of a markup account": ["<i>"],
        }
        got: object
        if kind in reads:
            got = self._balances(TENANTS[pick % len(TENANTS)], reads[kind])
        else:
            put = puts.get(kind) or PostingPut(f, None, key, lines[kind], self.now)
            got = self._both(
                "posting_put(refused)",
                functools.partial(self.model.posting_put, put),
                functools.partial(self.driver.posting_put, put),
            )
        assert isinstance(got, JobsError), f"the machine built a call nobody refuses: {kind}"
        self._note(f"posting refused: {got.code}")

    # -- helpers --------------------------------------------------------------------------------

    @property
    def posting_keys(self) -> set[tuple[str | None, str]]:
        """Every (tenant, key) a call named: each compared after every step."""
        keys: set[tuple[str | None, str]] | None = getattr(self, "_posting_keys", None)
        if keys is None:
            keys = set()
            self._posting_keys = keys
        return keys

    def _posting_row(self, key: str) -> ClaimedJob | None:
        """A fresh row holding `key` (a name of its own, so it never dedupes against another
        row of the key), in a queue of its own, claimed now by the first worker."""
        job_id = self._fresh_id("p")
        job = self._plain_job(job_id, f"posting-{job_id}", name=f"ledger-{job_id}", key=key)
        return self._own_row(job, "a ledger's row")

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self.capabilities.postings and self._walks("postings"):
            for tenant, key in sorted(self.posting_keys, key=lambda tk: (tk[0] or "", tk[1])):
                checks.append(
                    (
                        "posting_get",
                        functools.partial(self.model.posting_get, tenant, key),
                        functools.partial(self.driver.posting_get, tenant, key),
                    )
                )
            for tenant in TENANTS:
                checks.append(
                    (
                        "posting_balances",
                        functools.partial(self.model.posting_balances, tenant, list(ACCOUNTS)),
                        functools.partial(self.driver.posting_balances, tenant, list(ACCOUNTS)),
                    )
                )
        return checks
