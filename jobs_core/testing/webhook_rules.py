"""The webhook family's rules: the endpoint ledger (`webhook_endpoint_*`) and the attempts
recorded into it (`webhook_attempt_*`), interleaved with the job writes that move the fences an
attempt is written under (claims, reclaims of lapsed leases, acks, cancels). Every endpoint and
every endpoint's attempts are compared after each step. Only runs when the driver declares
`webhooks` in `capabilities()`.

The edges are aimed at, each rule making the rows it needs (a row in a queue of its own, so it
claims exactly that row): a streak run to exactly its `disable_after`, one short of it and one
past it, cleared by a delivery mid-way, disabled endpoints failing and delivering on, the
operator's enable; an attempt under a held claim, a near miss of it (another worker, a count
off by one), a lapsed lease nobody claimed (it holds) or one claimed again (it does not), an
acked row; the same claim's attempt again (a retried write: nothing moves twice); one endpoint
id under no tenant and two tenants; attempts in one millisecond listed by job id and claims;
the purge of attempts made before a bound at a stored attempt's time (it stays) or one past it
(it goes), cut by its limit inside one millisecond, and a claim written again after its
record went.
Tenants, endpoints and excerpts hold quotes, newlines, markup and non-ASCII text, some at their
byte limits.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import (
    MAX_PURGE_LIMIT,
    MAX_TIME_MS,
    MAX_WEBHOOK_EXCERPT_BYTES,
    MAX_WEBHOOK_LIST,
    MAX_WEBHOOK_URL_BYTES,
)
from jobs_core.errors import JobsError
from jobs_core.records import (
    Ack,
    ClaimedJob,
    ClaimParams,
    ClaimResult,
    Fence,
    WebhookAttempt,
    WebhookAttemptAnswer,
    WebhookAttemptListParams,
    WebhookAttemptPut,
    WebhookEndpoint,
    WebhookEndpointEnable,
    WebhookEndpointPut,
    WebhookOutcome,
)
from jobs_core.testing.compare import Check, exactly_bytes
from jobs_core.testing.machine import LONG_NAME, WORKERS, ParityMachine, aimed_fences, recent

#: No tenant is a key of its own; one with markup and non-ASCII text; one at the byte limit.
TENANTS = (None, "t1", "t'<b>\n☃", LONG_NAME)
ENDPOINTS = ("orders", "Orders", "q'uo%te\n☃", LONG_NAME)
URLS = (
    "https://hooks.example.com/in",
    "http://h/x?a='1'&b=<i>",
    "https://h.example/" + exactly_bytes("", "é☃😀", MAX_WEBHOOK_URL_BYTES - 18),
)
LONG_EXCERPT = exactly_bytes("<html>\n", "é☃😀'\"", MAX_WEBHOOK_EXCERPT_BYTES)
EXCERPTS = ("", "ok", "<h1>502 Bad Gateway</h1>\r\n", LONG_EXCERPT)
STATUSES = (None, 500, 429, 404, 503)
#: How many failures an aimed streak makes around its limit, and where a delivery falls in it.
AROUND = (-1, 0, 0, 1, 2)
#: Calls the ABC refuses before any write.
REFUSALS = (
    "excerpt too long",
    "excerpt with a NUL",
    "status 600",
    "delivered with an error",
    "failed without an error",
    "disable_after 0",
    "empty tenant",
    "url too long",
    "list limit 0",
)


class WebhookRules(ParityMachine):
    """The webhook family, over the job family's rows and fences."""

    FAMILY = "webhooks"

    # -- random calls -------------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.webhooks)
    @rule(
        op=st.sampled_from(("put", "attempt", "attempt", "attempt", "enable", "get", "list")),
        pick=recent,
        who=aimed_fences,
        tenant=st.sampled_from(TENANTS),
        endpoint=st.sampled_from(ENDPOINTS),
        url=st.sampled_from(URLS),
        delivered=st.booleans(),
        status=st.sampled_from(STATUSES),
        excerpt=st.sampled_from(EXCERPTS),
        disable_after=st.sampled_from((1, 2, 3, 3)),
        limit=st.sampled_from((1, 2, MAX_WEBHOOK_LIST)),
        refusal=st.sampled_from((None, None, None, *REFUSALS)),
    )
    def webhook(
        self,
        op: str,
        pick: int,
        who: str,
        tenant: str | None,
        endpoint: str,
        url: str,
        delivered: bool,
        status: int | None,
        excerpt: str,
        disable_after: int,
        limit: int,
        refusal: str | None,
    ) -> None:
        """One ledger call: a put, an attempt under a held fence or a near miss of it (of a
        known endpoint mostly), an enable, a read, a listing; or a refused call."""
        if refusal is not None:
            self._webhook_refused(refusal, pick)
        elif op == "put":
            self._endpoint_put(tenant, endpoint, url)
        elif op == "attempt":
            fences = self._aimed_fence(pick, who)
            if not fences:
                return
            known = self.model.endpoints
            if known and pick % 4:
                e = known[-1 - pick % len(known)]
                tenant, endpoint = e.tenant_id, e.endpoint
            outcome: WebhookOutcome = "delivered" if delivered else "failed"
            self._attempt(fences[0], tenant, endpoint, outcome, disable_after, status, excerpt)
        elif op == "enable":
            self._enable(tenant, endpoint)
        elif op == "get":
            self._both(
                "webhook_endpoint_get",
                functools.partial(self.model.webhook_endpoint_get, tenant, endpoint),
                functools.partial(self.driver.webhook_endpoint_get, tenant, endpoint),
            )
        else:
            self._both(
                "webhook_endpoint_list",
                functools.partial(self.model.webhook_endpoint_list, limit),
                functools.partial(self.driver.webhook_endpoint_list, limit),
            )

    # -- the edges, aimed at --------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.webhooks)
    @rule(
        tenant=st.sampled_from(TENANTS),
        endpoint=st.sampled_from(ENDPOINTS),
        disable_after=st.sampled_from((1, 2, 3)),
        around=st.sampled_from(AROUND),
        delivery_at=st.sampled_from((None, None, 0, 1, 2, 5)),
        after=st.sampled_from((None, "fail", "deliver", "enable", "enable then fail")),
        excerpt=st.sampled_from(EXCERPTS),
    )
    def webhook_streak(
        self,
        tenant: str | None,
        endpoint: str,
        disable_after: int,
        around: int,
        delivery_at: int | None,
        after: str | None,
        excerpt: str,
    ) -> None:
        """An endpoint's streak run to `disable_after + around` failures (a delivery at
        `delivery_at` clears it mid-way), each under a fresh claim, then `after` it: another
        failure or a delivery (on a disabled endpoint, mostly), or the operator's enable."""
        self._endpoint_put(tenant, endpoint, URLS[0])
        for i in range(max(0, disable_after + around)):
            outcome: WebhookOutcome = "delivered" if i == delivery_at else "failed"
            self._fresh_attempt(tenant, endpoint, outcome, disable_after, excerpt)
        if after in ("fail", "deliver"):
            self._fresh_attempt(
                tenant, endpoint, "failed" if after == "fail" else "delivered", disable_after
            )
        elif after is not None:
            self._enable(tenant, endpoint)
            if after == "enable then fail":
                self._fresh_attempt(tenant, endpoint, "failed", disable_after)

    @precondition(lambda self: self.capabilities.webhooks)
    @rule(
        tenant=st.sampled_from(TENANTS),
        case=st.sampled_from(
            ("lapsed", "lapsed", "reclaimed", "acked", "again", "again", "skewed", "no endpoint")
        ),
        delta=st.sampled_from((0, 0, 1)),
        delivered=st.booleans(),
    )
    def webhook_fence(self, tenant: str | None, case: str, delta: int, delivered: bool) -> None:
        """An attempt whose claim is tested: its lease lapsed `delta` ms past its end and
        nobody claimed it (it holds), claimed again by the other worker (the old claim writes
        nothing; the new one does), its row acked; the same claim's attempt made again (a
        retried write, maybe of the other outcome); a near miss of the claim; no endpoint."""
        endpoint = ENDPOINTS[0]
        self._endpoint_put(tenant, endpoint, URLS[0])
        job = self._webhook_row()
        if job is None:
            return
        f = job.fence
        outcome: WebhookOutcome = "delivered" if delivered else "failed"
        if case in ("lapsed", "reclaimed"):
            r = self.model.rows[f.job_id]
            assert r.lease_until_ms is not None
            self.now = max(self.now, r.lease_until_ms + delta)
            if case == "reclaimed":
                got = self._claim(ClaimParams((r.queue,), WORKERS[1], 1, 1000, self.now))
                if isinstance(got, ClaimResult) and got.jobs:
                    self._note("webhook attempt under a claim taken again")
                    self._attempt(f, tenant, endpoint, outcome, 2)
                    f = got.jobs[0].fence
        elif case == "acked":
            self._both(
                "job_ack",
                functools.partial(self.model.job_ack, [Ack(f, self.now)]),
                functools.partial(self.driver.job_ack, [Ack(f, self.now)]),
            )
        elif case == "skewed":
            f = replace(f, claims=f.claims + 1)
        elif case == "no endpoint":
            endpoint = ENDPOINTS[1] if tenant is None else ENDPOINTS[2]
        self._attempt(f, tenant, endpoint, outcome, 2)
        if case == "again":
            flip: WebhookOutcome = "failed" if delivered else "delivered"
            self._attempt(f, tenant, endpoint, flip, 1)

    @precondition(lambda self: self.capabilities.webhooks)
    @rule(
        tenants=st.permutations(TENANTS[:3]),
        delivered=st.booleans(),
        enable=st.booleans(),
    )
    def webhook_tenants(self, tenants: list[str | None], delivered: bool, enable: bool) -> None:
        """One endpoint id under no tenant and two tenants: attempts (in one millisecond) and
        an enable name one of them alone."""
        endpoint = ENDPOINTS[0]
        for t in tenants:
            self._endpoint_put(t, endpoint, URLS[1])
        self._fresh_attempt(tenants[0], endpoint, "failed", 1)
        self._fresh_attempt(tenants[0], endpoint, "delivered" if delivered else "failed", 1)
        if enable:
            self._enable(tenants[1], endpoint)
        self._note("webhook attempt beside another tenant's endpoint of the same id")

    @precondition(lambda self: self.capabilities.webhooks)
    @rule(
        pick=recent,
        delta=st.sampled_from((0, 0, 1, 1, -1)),
        limit=st.sampled_from((1, 2, 3, MAX_PURGE_LIMIT)),
        make=st.sampled_from((0, 2, 3)),
        again=st.sampled_from((False, False, True)),
        twice=st.booleans(),
    )
    def webhook_purge(
        self, pick: int, delta: int, limit: int, make: int, again: bool, twice: bool
    ) -> None:
        """Purge the attempts made before a bound aimed at a stored attempt's time (at it: it
        stays; one past: it goes; one short), `limit` cutting them oldest first. `make`
        attempts in one millisecond come first, each under a fresh claim it still holds, so
        the cut can fall inside a tie; with `again` the bound is one past the newest of them
        and it is written again after the purge (its claim still holds: once its record went,
        it records once more); with `twice` one row's lapsed claim and its reclaim record an
        attempt each, in one millisecond, and the cut falls between them (or, `delta` not above
        0, the bound at their time spares both)."""
        endpoint = ENDPOINTS[0]
        made: list[Fence] = []
        pair: str | None = None
        if make:
            self._endpoint_put(None, endpoint, URLS[0])
        for _ in range(make):
            job = self._webhook_row()
            if job is not None:
                self._attempt(job.fence, None, endpoint, "failed", 3)
                made.append(job.fence)
        if twice:
            self._endpoint_put(None, endpoint, URLS[0])
            job = self._webhook_row()
            r = None if job is None else self.model.rows[job.fence.job_id]
            if job is not None and r is not None and r.lease_until_ms is not None:
                self.now = max(self.now, r.lease_until_ms)
                self._attempt(job.fence, None, endpoint, "failed", 3)
                reclaim = self._claim(ClaimParams((r.queue,), WORKERS[1], 1, 1000, self.now))
                if isinstance(reclaim, ClaimResult) and reclaim.jobs:
                    self._attempt(reclaim.jobs[0].fence, None, endpoint, "failed", 3)
                    pair = job.fence.job_id
        stored = sorted(self.model.attempts, key=_age)
        aim = stored[-1 - pick % len(stored)].at_ms if stored else self.now
        bound = min(max(0, aim + delta), MAX_TIME_MS)
        if again and made:
            bound, limit = self.now + 1, MAX_PURGE_LIMIT
        elif pair is not None:
            # The cut falls right after the pair's first claim, or the bound spares the pair.
            bound = self.now + 1 if delta > 0 else self.now
            at = [(a.job_id, a.claims) for a in stored].index((pair, 1))
            limit = min(at + 1, MAX_PURGE_LIMIT)
        old = [a for a in stored if a.at_ms < bound]
        purged = self._both(
            "webhook_attempt_purge",
            functools.partial(self.model.webhook_attempt_purge, bound, limit),
            functools.partial(self.driver.webhook_attempt_purge, bound, limit),
        )
        if not isinstance(purged, int):
            return
        if any(a.at_ms == bound for a in stored):
            self._note("webhook purge sparing an attempt made at its bound")
        if len(old) > limit:
            self._note("webhook purge cut by its limit")
            cut, kept = old[limit - 1], old[limit]
            if cut.at_ms == kept.at_ms:
                self._note("webhook purge cut inside one millisecond")
                if cut.job_id == kept.job_id:
                    self._note("webhook purge cut between two claims of one row")
        if again and made:
            f = made[-1]
            if not any(a.job_id == f.job_id and a.claims == f.claims for a in self.model.attempts):
                self._note("webhook attempt again after its record was purged")
            self._attempt(f, None, endpoint, "delivered", 3)

    # -- calls on both, and what they reached -----------------------------------------------------

    def _endpoint_put(self, tenant: str | None, endpoint: str, url: str) -> object:
        put = WebhookEndpointPut(tenant, endpoint, url, self.now)
        known = self.model.webhook_endpoint_get(tenant, endpoint) is not None
        got = self._both(
            "webhook_endpoint_put",
            functools.partial(self.model.webhook_endpoint_put, put),
            functools.partial(self.driver.webhook_endpoint_put, put),
        )
        if known:
            self._note("webhook endpoint moved")
        return got

    def _enable(self, tenant: str | None, endpoint: str) -> object:
        enable = WebhookEndpointEnable(tenant, endpoint, self.now)
        before = self._known(tenant, endpoint)
        got = self._both(
            "webhook_endpoint_enable",
            functools.partial(self.model.webhook_endpoint_enable, enable),
            functools.partial(self.driver.webhook_endpoint_enable, enable),
        )
        if before is not None and not before.enabled:
            self._note("webhook enable of a disabled endpoint")
        return got

    def _attempt(
        self,
        f: Fence,
        tenant: str | None,
        endpoint: str,
        outcome: WebhookOutcome,
        disable_after: int,
        status: int | None = 500,
        excerpt: str = "ok",
    ) -> object:
        put = WebhookAttemptPut(
            fence=f,
            tenant_id=tenant,
            endpoint=endpoint,
            event_id=f"msg-{len(self.model.attempts)}",
            outcome=outcome,
            status_code=200 if outcome == "delivered" else status,
            latency_ms=7,
            excerpt=excerpt,
            error=None if outcome == "delivered" else "X_WEBHOOK_DELIVERY_FAILED",
            disable_after=disable_after,
            now_ms=self.now,
        )
        before = self._known(tenant, endpoint)
        held = self.model._held(f)
        again = any(a.job_id == f.job_id and a.claims == f.claims for a in self.model.attempts)
        got = self._both(
            "webhook_attempt_put",
            functools.partial(self.model.webhook_attempt_put, put),
            functools.partial(self.driver.webhook_attempt_put, put),
        )
        if not isinstance(got, WebhookAttemptAnswer):
            return got
        if held is None:
            self._note("webhook attempt off the fence")
        elif before is None:
            self._note("webhook attempt of no endpoint")
        elif again:
            self._note("webhook attempt of a claim recorded before")
        else:
            if held.lease_until_ms is not None and held.lease_until_ms <= self.now:
                self._note("webhook attempt under a lapsed lease nobody claimed")
            after = got.endpoint
            if outcome == "delivered":
                self._note(
                    "webhook delivery on a disabled endpoint"
                    if not before.enabled
                    else "webhook delivery clearing a streak"
                    if before.failures
                    else "webhook delivery"
                )
            elif not before.enabled:
                self._note("webhook failure on a disabled endpoint")
            elif after is not None and not after.enabled:
                self._note("webhook endpoint disabled at its limit")
            elif before.failures + 2 == disable_after:
                self._note("webhook failure one short of the limit")
            if len(excerpt.encode()) == MAX_WEBHOOK_EXCERPT_BYTES:
                self._note("webhook attempt with an excerpt at the byte limit")
        return got

    def _fresh_attempt(
        self,
        tenant: str | None,
        endpoint: str,
        outcome: WebhookOutcome,
        disable_after: int,
        excerpt: str = "ok",
    ) -> None:
        job = self._webhook_row()
        if job is not None:
            self._attempt(job.fence, tenant, endpoint, outcome, disable_after, excerpt=excerpt)

    def _webhook_refused(self, kind: str, pick: int) -> None:
        """A call the ABC refuses: nothing is written (the state check sees)."""
        f = self._refusal_fence()
        good = WebhookAttemptPut(
            f,
            "t1",
            "orders",
            "msg",
            "failed",
            500,
            1,
            "x",
            "X_WEBHOOK_DELIVERY_FAILED",
            3,
            self.now,
        )
        calls: dict[str, object] = {
            "excerpt too long": replace(good, excerpt=LONG_EXCERPT + "x"),
            "excerpt with a NUL": replace(good, excerpt="a\x00b"),
            "status 600": replace(good, status_code=600),
            "delivered with an error": replace(good, outcome="delivered"),
            "failed without an error": replace(good, error=None),
            "disable_after 0": replace(good, disable_after=0),
            "empty tenant": replace(good, tenant_id=""),
            "url too long": WebhookEndpointPut("t1", "orders", URLS[2] + "x", self.now),
            "list limit 0": 0,
        }
        call = calls[kind]
        got: object
        if isinstance(call, WebhookAttemptPut):
            got = self._both(
                "webhook_attempt_put(refused)",
                functools.partial(self.model.webhook_attempt_put, call),
                functools.partial(self.driver.webhook_attempt_put, call),
            )
        elif isinstance(call, WebhookEndpointPut):
            got = self._both(
                "webhook_endpoint_put(refused)",
                functools.partial(self.model.webhook_endpoint_put, call),
                functools.partial(self.driver.webhook_endpoint_put, call),
            )
        else:
            assert isinstance(call, int)
            got = self._both(
                "webhook_endpoint_list(refused)",
                functools.partial(self.model.webhook_endpoint_list, call),
                functools.partial(self.driver.webhook_endpoint_list, call),
            )
        assert isinstance(got, JobsError), f"the machine built a call nobody refuses: {kind}"

    # -- helpers --------------------------------------------------------------------------------

    def _known(self, tenant: str | None, endpoint: str) -> WebhookEndpoint | None:
        for e in self.model.endpoints:
            if e.tenant_id == tenant and e.endpoint == endpoint:
                return e
        return None

    def _webhook_row(self) -> ClaimedJob | None:
        """A fresh row in a queue of its own, claimed now by the first worker."""
        job_id = self._fresh_id("wh-")
        return self._own_row(self._plain_job(job_id, f"webhook-{self._serial}"), "a webhook's row")

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self.capabilities.webhooks and self._walks("webhooks"):
            checks.append(
                (
                    "webhook_endpoint_list",
                    functools.partial(self.model.webhook_endpoint_list, MAX_WEBHOOK_LIST),
                    functools.partial(self.driver.webhook_endpoint_list, MAX_WEBHOOK_LIST),
                )
            )
            for e in self.model.endpoints:
                params = WebhookAttemptListParams(e.tenant_id, e.endpoint, MAX_WEBHOOK_LIST)
                checks.append(
                    (
                        "webhook_attempt_list",
                        functools.partial(self.model.webhook_attempt_list, params),
                        functools.partial(self.driver.webhook_attempt_list, params),
                    )
                )
        return checks


def _age(a: WebhookAttempt) -> tuple[int, str, int]:
    """The purge's order: oldest first, ties by job id, then claims (code points)."""
    return (a.at_ms, a.job_id, a.claims)
