"""The consumer family's rules: each consumer's cursor per tenant (`consumer_cursor_get`,
`consumer_cursor_put`, `consumer_list`), interleaved with the job writes that move the fences a
put is written under (claims, reclaims of lapsed leases, acks, cancels). Every entry is compared
after each step. Only runs when the driver declares `consumers` in `capabilities()`.

The edges are aimed at: a consumer's turns from its first (nothing stored) on, each from the
cursor the last one stored; a stale turn (a put from a cursor already moved past, or from none
once one is stored) that must not move it back; two turns racing from one cursor (one lands);
a put after the turn's claim was lost (reclaimed, acked, cancelled) or only lapsed (it still
holds); the same name for two tenants and the cross-tenant one, and two names, apart; an idle
turn (the cursor kept, the lag and the counts moved); a lag given, changed and dropped to
None. Names, tenants, sources and cursors hold quotes, newlines and non-ASCII text, some at
their byte limits; cursors whose JSON types differ (`10` against `10.0`) are different cursors.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import (
    MAX_CONSUMER_BATCH,
    MAX_CONSUMER_CURSOR_BYTES,
    MAX_CONSUMER_LIST,
    MAX_SWEEP_ROWS,
)
from jobs_core.errors import JobsError
from jobs_core.records import (
    ClaimedJob,
    ConsumerCursor,
    ConsumerPut,
    Fence,
)
from jobs_core.testing.compare import Check, exactly_bytes
from jobs_core.testing.machine import (
    ID_PREFIXES,
    LONG_NAME,
    WORKERS,
    ParityMachine,
    aimed_fences,
    recent,
)

#: Consumers' names: one with quotes, a newline and non-ASCII text, one at the byte limit.
#: Two names where one begins the other (a listing of one must not take the other's entries).
CONSUMER_NAMES = ("orders", "q'uo%te\n☃", "orders-eu", LONG_NAME)
#: The tenants a consumer acts for: None is the cross-tenant one (stored apart from any tenant).
CONSUMER_TENANTS: tuple[str | None, ...] = (None, "t1", "☃ org")
SOURCES = ("table:orders", "stream:events", "function:fetch", "<b>markup</b>")
#: A cursor exactly at the byte limit (a JSON string of 2-, 3- and 4-byte characters).
LONG_CURSOR = '"' + exactly_bytes("", "é☃😀", MAX_CONSUMER_CURSOR_BYTES - 2) + '"'
#: Cursors whose text matters: `10` is not `10.0`, and neither is `{"id":10}` `{"id": 10}`.
CURSORS = (
    '{"id":10}',
    '{"id":10.0}',
    '{"id": 10}',
    "11",
    '"1700000000000-3"',
    '["é☃",null,true]',
    '{"after":"q\'uo%te\\n"}',
    LONG_CURSOR,
)
RECORDS = (0, 1, 7, MAX_CONSUMER_BATCH)
LAGS = (None, 0, 3, 2**40 + 1, MAX_SWEEP_ROWS)
#: How an aimed consumer's turns end (`consumer_turns`).
ENDS = (
    "stale turn",
    "race",
    "reclaimed",
    "lapsed",
    "acked",
    "cancelled",
    "idle turn",
    "first again",
    "stays",
)
#: Calls the ABC refuses before any write.
CONSUMER_REFUSALS = (
    "empty name",
    "name with a NUL",
    "name with a lone surrogate",
    "tenant empty",
    "source too long",
    "cursor too long",
    "cursor not JSON",
    "cursor with a NUL",
    "cursor nesting too deep",
    "expect with a lone surrogate",
    "records below 0",
    "records past the batch",
    "lag below 0",
    "fence count 0",
    "get of an empty name",
    "list limit 0",
    "list limit past the cap",
)


class ConsumerRules(ParityMachine):
    """The consumer family, over the job family's rows and fences."""

    FAMILY = "consumers"

    # -- random calls -------------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.consumers)
    @rule(
        op=st.sampled_from(("put", "put", "put", "get", "list", "refused")),
        pick=recent,
        who=aimed_fences,
        name=st.sampled_from((*CONSUMER_NAMES[:2], *CONSUMER_NAMES)),
        tenant=st.sampled_from(CONSUMER_TENANTS),
        source=st.sampled_from(SOURCES),
        expect=st.sampled_from(("stored", "stored", "stored", "none", "stale", "another's")),
        cursor=st.sampled_from(CURSORS),
        records=st.sampled_from(RECORDS),
        lag=st.sampled_from(LAGS),
        limit=st.sampled_from((1, 2, 3, MAX_CONSUMER_LIST)),
        by_name=st.booleans(),
        refusal=st.sampled_from(CONSUMER_REFUSALS),
    )
    def consumer(
        self,
        op: str,
        pick: int,
        who: str,
        name: str,
        tenant: str | None,
        source: str,
        expect: str,
        cursor: str,
        records: int,
        lag: int | None,
        limit: int,
        by_name: bool,
        refusal: str,
    ) -> None:
        """One cursor call: a put under a running row's fence or a near miss of it, from the
        stored cursor, none, an older one of the same consumer or another consumer's; a get
        of any name and tenant; a listing (of one name or all); a refused call."""
        if op == "put":
            fences = self._aimed_fence(pick, who)
            if not fences:
                return
            start = self._expect(name, tenant, expect, pick)
            self._cursor_put(fences[0], name, tenant, source, start, cursor, records, lag)
        elif op == "get":
            self._cursor_get(name, tenant)
        elif op == "list":
            self._consumer_list(name if by_name else None, limit)
        else:
            self._consumer_refused(refusal, pick)

    def _expect(self, name: str, tenant: str | None, how: str, pick: int) -> str | None:
        """The cursor a put names as its start."""
        held = self.model.consumers.get((name, tenant))
        if how == "none":
            return None
        if how == "stale":
            past = [
                c
                for c in self._history.get((name, tenant), [])
                if held is None or c != held.cursor_json
            ]
            if past:
                return past[-1 - pick % len(past)]
        if how == "another's":
            others = [e.cursor_json for k, e in self.model.consumers.items() if k != (name, tenant)]
            if others:
                return others[-1 - pick % len(others)]
        return None if held is None else held.cursor_json

    # -- the edges, aimed at --------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.consumers)
    @rule(
        prefix=st.sampled_from(ID_PREFIXES),
        name=st.sampled_from(CONSUMER_NAMES),
        tenant=st.sampled_from(CONSUMER_TENANTS),
        source=st.sampled_from(SOURCES),
        turns=st.integers(0, 3),
        end=st.sampled_from(ENDS),
        delta=st.sampled_from((0, 0, 1)),
        cursors=st.lists(st.sampled_from(CURSORS), min_size=4, max_size=4),
        records=st.sampled_from(RECORDS),
        lag=st.sampled_from(LAGS),
    )
    def consumer_turns(
        self,
        prefix: str,
        name: str,
        tenant: str | None,
        source: str,
        turns: int,
        end: str,
        delta: int,
        cursors: list[str],
        records: int,
        lag: int | None,
    ) -> None:
        """One run of a consumer, as `consumer()` writes it: `turns` turns each from the cursor
        the last one stored, then `end`: a stale turn from an older cursor (or from none); two
        turns racing from one cursor; its lease lapsed (`delta` ms past its end) and reclaimed
        by the other worker (the old fence lands nothing, the new holder goes on); lapsed with
        nobody claiming (it still holds); its row acked or cancelled first; an idle turn (the
        same cursor again); the first turn's put (from none) again."""
        job = self._consumer_row(prefix)
        if job is None:
            return
        f = job.fence
        for t in range(turns):
            self._turn(f, name, tenant, source, cursors[t % 4], records, lag)
        held = self.model.consumers.get((name, tenant))
        stored = None if held is None else held.cursor_json
        if end == "stale turn":
            past = [c for c in self._history.get((name, tenant), []) if c != stored]
            start = past[0] if past else None
            if stored is not None:
                self._cursor_put(f, name, tenant, source, start, cursors[3], records, lag)
        elif end == "race":
            self._cursor_put(f, name, tenant, source, stored, cursors[2], records, lag)
            self._cursor_put(f, name, tenant, source, stored, cursors[3], records, lag)
        elif end in ("reclaimed", "lapsed"):
            r = self.model.rows.get(f.job_id)
            if r is not None and r.lease_until_ms is not None:
                self.now = max(self.now, r.lease_until_ms + delta)
            if end == "reclaimed":
                other = self._claim_alone(job.queue, WORKERS[1])
                self._turn(f, name, tenant, source, cursors[3], records, lag)
                if other is not None:
                    self._turn(other.fence, name, tenant, source, cursors[3], records, lag)
            else:
                self._turn(f, name, tenant, source, cursors[3], records, lag)
        elif end in ("acked", "cancelled"):
            self._end_row(f, end)
            self._turn(f, name, tenant, source, cursors[3], records, lag)
        elif end == "idle turn":
            if stored is not None:
                self._cursor_put(f, name, tenant, source, stored, stored, 0, lag)
        elif end == "first again":
            self._cursor_put(f, name, tenant, source, None, cursors[0], records, lag)

    def _turn(
        self,
        f: Fence,
        name: str,
        tenant: str | None,
        source: str,
        cursor: str,
        records: int,
        lag: int | None,
    ) -> object:
        """A turn from the stored cursor to `cursor`, as the factory makes it."""
        held = self.model.consumers.get((name, tenant))
        start = None if held is None else held.cursor_json
        return self._cursor_put(f, name, tenant, source, start, cursor, records, lag)

    def _end_row(self, f: Fence, how: str) -> None:
        from jobs_core.records import Ack

        if how == "acked":
            ack = Ack(f, self.now)
            self._both(
                "job_ack",
                functools.partial(self.model.job_ack, [ack]),
                functools.partial(self.driver.job_ack, [ack]),
            )
        else:
            self._both(
                "job_cancel_many",
                functools.partial(self.model.job_cancel_many, [f.job_id], self.now),
                functools.partial(self.driver.job_cancel_many, [f.job_id], self.now),
            )

    # -- calls on both, and what they reached -----------------------------------------------------

    def _cursor_put(
        self,
        f: Fence,
        name: str,
        tenant: str | None,
        source: str,
        expect: str | None,
        cursor: str,
        records: int,
        lag: int | None,
    ) -> object:
        put = ConsumerPut(f, name, tenant, source, expect, cursor, records, lag, self.now)
        before = self.model.consumers.get((name, tenant))
        got = self._both(
            "consumer_cursor_put",
            functools.partial(self.model.consumer_cursor_put, put),
            functools.partial(self.driver.consumer_cursor_put, put),
        )
        if not isinstance(got, bool):
            return got
        stored = None if before is None else before.cursor_json
        held = self.model._held(f)
        if held is None:
            self._note("consumer put off the fence")
            if expect == stored:
                self._note("consumer put from the stored cursor off the fence", edge=True)
        elif expect != stored:
            if expect is None:
                self._note("consumer put from none while one is stored", edge=True)
            elif expect in self._history.get((name, tenant), []):
                self._note("consumer put from an older cursor (moved back refused)", edge=True)
            else:
                self._note("consumer put from another's cursor")
        elif got:
            self._note("consumer put landed" + (" (first)" if before is None else ""))
            self._history.setdefault((name, tenant), []).append(cursor)
            if held.lease_until_ms is not None and held.lease_until_ms <= self.now:
                self._note("consumer put under a lapsed lease nobody claimed", edge=True)
            if before is not None and cursor == stored:
                self._note("consumer idle turn (same cursor)")
            if len(cursor.encode()) == MAX_CONSUMER_CURSOR_BYTES:
                self._note("consumer cursor at the byte limit")
            if lag is None and before is not None and before.lag is not None:
                self._note("consumer lag dropped to unknown")
            same_name = [k for k in self.model.consumers if k[0] == name and k[1] != tenant]
            if same_name:
                self._note("consumer put beside the same name for another tenant", edge=True)
        return got

    def _cursor_get(self, name: str, tenant: str | None) -> object:
        got = self._both(
            "consumer_cursor_get",
            functools.partial(self.model.consumer_cursor_get, name, tenant),
            functools.partial(self.driver.consumer_cursor_get, name, tenant),
        )
        if got is None and any(k[0] == name for k in self.model.consumers):
            self._note("consumer get of a name stored for another tenant only")
        return got

    def _consumer_list(self, name: str | None, limit: int) -> object:
        got = self._both(
            "consumer_list",
            functools.partial(self.model.consumer_list, name, limit),
            functools.partial(self.driver.consumer_list, name, limit),
        )
        if isinstance(got, list) and len(self.model.consumers) > limit:
            self._note("consumer list cut by its limit")
        return got

    def _consumer_refused(self, kind: str, pick: int) -> None:
        """A call the ABC refuses: nothing is written (the state check sees)."""
        f = self._refusal_fence()
        put = ConsumerPut(f, "orders", None, "table:orders", None, "1", 1, None, self.now)
        calls: dict[str, ConsumerPut | tuple[str, str | None] | tuple[None, int]] = {
            "empty name": replace(put, name=""),
            "name with a NUL": replace(put, name="a\x00b"),
            "name with a lone surrogate": replace(put, name="a\ud800"),
            "tenant empty": replace(put, tenant_id=""),
            "source too long": replace(put, source="s" * 201),
            "cursor too long": replace(put, cursor_json=LONG_CURSOR[:-1] + 'x"'),
            "cursor not JSON": replace(put, cursor_json="NaN"),
            "cursor with a NUL": replace(put, cursor_json='"a\\u0000b"'),
            "cursor nesting too deep": replace(put, cursor_json="[" * 600 + "]" * 600),
            "expect with a lone surrogate": replace(put, expect_json='"\\ud83d"'),
            "records below 0": replace(put, records=-1),
            "records past the batch": replace(put, records=MAX_CONSUMER_BATCH + 1),
            "lag below 0": replace(put, lag=-1),
            "fence count 0": replace(put, fence=replace(f, claims=0)),
            "get of an empty name": ("", None),
            "list limit 0": (None, 0),
            "list limit past the cap": (None, MAX_CONSUMER_LIST + 1),
        }
        call = calls[kind]
        got: object
        if isinstance(call, ConsumerPut):
            got = self._both(
                "consumer_cursor_put(refused)",
                functools.partial(self.model.consumer_cursor_put, call),
                functools.partial(self.driver.consumer_cursor_put, call),
            )
        elif call[0] is None:
            assert isinstance(call[1], int)
            got = self._both(
                "consumer_list(refused)",
                functools.partial(self.model.consumer_list, None, call[1]),
                functools.partial(self.driver.consumer_list, None, call[1]),
            )
        else:
            got = self._both(
                "consumer_cursor_get(refused)",
                functools.partial(self.model.consumer_cursor_get, call[0], None),
                functools.partial(self.driver.consumer_cursor_get, call[0], None),
            )
        assert isinstance(got, JobsError), f"the machine built a call nobody refuses: {kind}"

    # -- helpers --------------------------------------------------------------------------------

    @property
    def _history(self) -> dict[tuple[str, str | None], list[str]]:
        """Every cursor each consumer stored, oldest first (what a stale turn starts from)."""
        found: dict[tuple[str, str | None], list[str]] | None = getattr(
            self, "_consumer_history", None
        )
        if found is None:
            found = {}
            self._consumer_history = found
        return found

    def _consumer_row(self, prefix: str) -> ClaimedJob | None:
        """A fresh row in a queue of its own (only these rules claim it), claimed now by the
        first worker: the run a consumer's turns are written under."""
        job_id = self._fresh_id(prefix)
        job = self._plain_job(job_id, f"consumer-{self._serial}", run_id=f"run-{self._serial}")
        return self._own_row(job, "a consumer's row")

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self.capabilities.consumers and self._walks("consumers"):
            checks.append(
                (
                    "consumer_list",
                    functools.partial(self.model.consumer_list, None, MAX_CONSUMER_LIST),
                    functools.partial(self.driver.consumer_list, None, MAX_CONSUMER_LIST),
                )
            )
        return checks


def entry_key(e: ConsumerCursor) -> tuple[str, str | None]:
    return (e.name, e.tenant_id)
