"""The lease family's rules: takes racing for a key's room (own holdings replaced, stamps and
slots), renewals, releases and abandons under live, expired, superseded and forged tokens, the
clock moved to a holding's end, and calls from callers whose clocks are behind or ahead of the
walk's (a stale take landing after a fresher one, hosts whose clocks disagree: each key works at
the latest time any call on it used); every key's live holders compared after each step. Only
runs when the driver declares `leases` in `capabilities()`.

Tokens are the store's own: a driver may number them as it likes (one counter for the store,
one per key, leaps) so long as a later grant of a key carries a greater token. The rules
therefore pair each (key, driver token) with the model's token of the same grant, check that
the pairing keeps the key's order, and compare answers in the model's numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import MAX_PURGE_LIMIT
from jobs_core.errors import JobsError
from jobs_core.records import Lease, LeaseRef, LeaseRenew, LeaseTake
from jobs_core.testing.compare import Check, ParityError
from jobs_core.testing.machine import LEASE_KEYS, ParityMachine

HOLDERS = ("h1", "h2", "h3")
#: A token no store hands out in a walk: a forged or long-gone holding.
FORGED_TOKEN = 2**61

T = TypeVar("T")

#: One lease call's draws (the `lease` and `lease_off_the_clock` rules).
_OPS = st.sampled_from(("take", "take", "take", "renew", "release", "abandon"))
_LIMITS = st.tuples(st.sampled_from((1, 2)), st.sampled_from((1, 2, 3)))
_TTLS = st.sampled_from((1000, 3000, 1))
_PICKS = st.lists(st.integers(0, 9), min_size=1, max_size=3)


def _items(most: int) -> st.SearchStrategy[list[tuple[str, str, bool]]]:
    """A take's items: (key, holder, stamp), one to `most`."""
    return st.lists(
        st.tuples(st.sampled_from(LEASE_KEYS), st.sampled_from(HOLDERS), st.booleans()),
        min_size=1,
        max_size=most,
    )


class LeaseRules(ParityMachine):
    """The lease family, beside the job family's rows."""

    FAMILY = "leases"

    def __init__(self) -> None:
        super().__init__()
        #: (key, model token) -> driver token, and back, for every grant both made: a driver's
        #: tokens need only be unique and growing per key.
        self._driver_token: dict[tuple[str, int], int] = {}
        self._model_token: dict[tuple[str, int], int] = {}
        #: Every grant, oldest first: what renewals and releases pick from.
        self._granted: list[Lease] = []

    @precondition(lambda self: self.capabilities.leases)
    @rule(op=_OPS, items=_items(4), limits=_LIMITS, ttl=_TTLS, picks=_PICKS)
    def lease(
        self,
        op: str,
        items: list[tuple[str, str, bool]],
        limits: tuple[int, int],
        ttl: int,
        picks: list[int],
    ) -> None:
        """One lease call: a take (a holder's second take of a key replaces its holding), or a
        renewal, release or abandon of holdings granted earlier (live, expired, replaced,
        ended) or forged. A stamp released stays until it expires."""
        self._call(op, items, limits, ttl, picks)

    def _call(
        self,
        op: str,
        items: list[tuple[str, str, bool]],
        limits: tuple[int, int],
        ttl: int,
        picks: list[int],
        now: int | None = None,
    ) -> None:
        """A take of `items`, or `op` on the holdings `picks` names, at `now` (the walk's
        clock unless given)."""
        if op == "take":
            self._take(items, limits, ttl, now)
        else:
            self._end(op, self._refs(picks), ttl, now)

    def _end(self, op: str, refs: list[LeaseRef], ttl: int, now: int | None = None) -> None:
        """Renew, release or abandon `refs` (in the model's numbers) at `now` (the walk's
        clock unless given)."""
        at = self.now if now is None else now
        on_driver = [replace(r, token=self._to_driver(r.key, r.token)) for r in refs]
        got: object
        if op == "renew":
            renews = [LeaseRenew(r.key, r.token, ttl) for r in refs]
            driver_renews = [LeaseRenew(r.key, r.token, ttl) for r in on_driver]
            got = self._lease_both(
                "lease_renew",
                functools.partial(self.model.lease_renew, renews, at),
                functools.partial(self.driver.lease_renew, driver_renews, at),
            )
        elif op == "release":
            got = self._lease_both(
                "lease_release",
                functools.partial(self.model.lease_release, refs, at),
                functools.partial(self.driver.lease_release, on_driver, at),
            )
        else:
            got = self._lease_both(
                "lease_abandon",
                functools.partial(self.model.lease_abandon, refs, at),
                functools.partial(self.driver.lease_abandon, on_driver, at),
            )
        if isinstance(got, list):
            self._note(f"lease {op}: {'landed' if any(got) else 'refused'}")

    def _take(
        self,
        items: list[tuple[str, str, bool]],
        limits: tuple[int, int],
        ttl: int,
        now: int | None = None,
    ) -> None:
        at = self.now if now is None else now
        seen: set[tuple[str, str]] = set()
        takes = []
        for key, holder, stamp in items:
            if (key, holder) in seen:
                continue
            seen.add((key, holder))
            limit = limits[LEASE_KEYS.index(key) % 2]
            takes.append(LeaseTake(key, holder, limit, ttl, stamp))
        if any(
            h.key == t.key and h.holder == t.holder and h.expires_at_ms > at
            for t in takes
            for h in self.model.holdings
        ):
            self._note("lease taken again by its holder")
        behind = [t for t in takes if self.model.lease_clocks.get(t.key, at) > at]
        if any(
            h.key == t.key and at < h.expires_at_ms <= self.model.lease_clocks[t.key]
            for t in behind
            for h in self.model.holdings
        ):
            self._note("lease take behind its key's clock, past a holding's end")
        elif behind:
            self._note("lease take behind its key's clock")
        got = self._lease_both(
            "lease_take",
            functools.partial(self.model.lease_take, takes, at),
            functools.partial(self.driver.lease_take, takes, at),
        )
        if isinstance(got, list):
            granted = [g for g in got if g is not None]
            self._granted.extend(granted)
            if len(granted) < len(got):
                self._note("lease refused: no room")

    @precondition(lambda self: self.capabilities.leases and bool(self.model.lease_clocks))
    @rule(
        op=_OPS,
        items=_items(3),
        skew=st.sampled_from((-3000, -1000, -400, -1, 1, 400, 1000, 3000)),
        limits=_LIMITS,
        ttl=_TTLS,
        picks=_PICKS,
    )
    def lease_off_the_clock(
        self,
        op: str,
        items: list[tuple[str, str, bool]],
        skew: int,
        limits: tuple[int, int],
        ttl: int,
        picks: list[int],
    ) -> None:
        """One lease call from a caller whose clock is off the walk's by `skew` (the walk's
        clock does not move): behind, a call whose now was read before a fresher one landed,
        or a host behind the fleet; ahead, a host whose clock leads. Each key it names works at
        the later of that now and the key's clock, so the key's time never runs back."""
        self._begin("lease_off_the_clock", op=op, skew=skew)
        at = max(0, self.now + skew)
        self._note(f"lease {op} from a caller {'behind' if skew < 0 else 'ahead'}")
        self._call(op, items, limits, ttl, picks, at)

    @precondition(
        lambda self: (
            self.capabilities.leases
            and any(h.expires_at_ms >= self.now for h in self.model.holdings)
        )
    )
    @rule(
        pick=st.integers(0, 7),
        delta=st.sampled_from((-1, 0, 0, 1)),
        then=st.sampled_from(("renew", "release", "abandon", "take", None)),
        ttl=st.sampled_from((1000, 1)),
    )
    def advance_to_lease_expiry(self, pick: int, delta: int, then: str | None, ttl: int) -> None:
        """Jump to a holding's end (or one ms either side), then renew, release or abandon that
        very holding, or take its key as another holder: live until that millisecond, its room
        free from it on (a stamp's too)."""
        self._begin("advance_to_lease_expiry", pick=pick, delta=delta, then=then)
        ahead = sorted(
            (h for h in self.model.holdings if h.expires_at_ms >= self.now),
            key=lambda h: (h.expires_at_ms, h.key, h.token),
        )
        h = ahead[pick % len(ahead)]
        self.now = max(self.now, h.expires_at_ms + delta)
        self._note("clock at a lease's end")
        if then is None:
            return
        if h.expires_at_ms == self.now:
            self._note(f"lease {then} at a holding's exact end")
        if then == "take":
            limit = 1 if h.stamp else 2
            self._take([(h.key, "h-late", h.stamp)], (limit, limit), ttl)
        else:
            self._end(then, [LeaseRef(h.key, h.token)], ttl)

    @precondition(lambda self: self.capabilities.leases and bool(self.model.holdings))
    @rule(
        pick=st.integers(0, 7),
        delta=st.sampled_from((-1, 0, 0, 1)),
        limit=st.sampled_from((1, 1, 2, MAX_PURGE_LIMIT)),
        behind=st.sampled_from((None, None, 1, 300)),
    )
    def purge_leases(self, pick: int, delta: int, limit: int, behind: int | None) -> None:
        """Purge at a stored holding's end (or one ms either side; the clock moved there when it
        is ahead, a past end read as a caller behind): the expired holdings go, soonest expired
        first, at most `limit`; live ones stay. What is stored is what takes, releases and
        abandons left, so a later purge's count shows which ones an earlier one took. Then, now
        and then, a caller `behind` that holding's end takes its key: a purge that took it moved
        the key's clock to its end, so the take is judged there."""
        self._begin("purge_leases", pick=pick, delta=delta, limit=limit, behind=behind)
        stored = sorted(self.model.holdings, key=_purge_order)
        h = stored[pick % len(stored)]
        at = h.expires_at_ms + delta
        if at < self.now:
            self._note("lease purge by a caller behind")
        self.now = max(self.now, at)
        if at == h.expires_at_ms:
            self._note("lease purge at a holding's exact end")
        expired = [s for s in stored if s.expires_at_ms <= at]
        if len(expired) > limit:
            self._note("lease purge cut by its limit")
        if any(s.stamp for s in expired):
            self._note("lease purge of a rate stamp")
        self._both(
            "lease_purge",
            lambda: self.model.lease_purge(at, limit),
            lambda: self.driver.lease_purge(at, limit),
        )
        if behind is not None:
            if h not in self.model.holdings:
                self._note("lease take behind the end a purge deleted")
            taken = max(0, h.expires_at_ms - behind)
            self._take([(h.key, "h-behind", h.stamp)], (2, 2), 1000, taken)

    # -- helpers --------------------------------------------------------------------------------

    def _refs(self, picks: Sequence[int]) -> list[LeaseRef]:
        """Holdings granted earlier (live, expired, replaced or ended), or a forged token; in
        the model's numbers."""
        out = []
        for n in picks:
            if n == 9 or not self._granted:
                out.append(LeaseRef(LEASE_KEYS[n % len(LEASE_KEYS)], FORGED_TOKEN - n))
            else:
                g = self._granted[-1 - n % len(self._granted)]
                out.append(LeaseRef(g.key, g.token))
        return out

    def _to_driver(self, key: str, token: int) -> int:
        return self._driver_token.get((key, token), token)

    def _pair(self, model: Lease, driver: Lease, *, grant: bool) -> Lease:
        """`driver` in the model's numbers. Only a grant pairs a new token, and the pairing
        must keep its key's token order; elsewhere an unpaired token is shown negated (so it
        differs from every token of the model's)."""
        known = self._model_token.get((driver.key, driver.token))
        if known is None and not grant:
            return replace(driver, token=-driver.token)
        if known is None:
            for (key, m), d in self._driver_token.items():
                if key == model.key and (m < model.token) != (d < driver.token):
                    raise ParityError(
                        f"{self._context()}lease token {driver.token} of {model.key!r} does not"
                        f" follow the key's earlier token {d} in grant order"
                    )
            self._model_token[(driver.key, driver.token)] = model.token
            self._driver_token[(model.key, model.token)] = driver.token
            known = model.token
        return replace(driver, token=known)

    def _in_model_numbers(self, want: object, got: object, *, grant: bool = False) -> object:
        """`got` with each token in the model's numbers; anything unpaired stays as it is, so
        a grant the model refused (or a list of another length) still differs."""
        if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
            return [
                self._in_model_numbers(w, g, grant=grant) for w, g in zip(want, got, strict=True)
            ]
        if isinstance(want, Lease) and isinstance(got, Lease):
            return self._pair(want, got, grant=grant and want.key == got.key)
        return got

    def _lease_both(
        self,
        what: str,
        model_call: Callable[[], T],
        driver_call: Callable[[], Coroutine[Any, Any, object]],
    ) -> T | JobsError:
        """`_both`, comparing in the model's token numbers (`_both` asks the model first)."""
        answers: list[object] = []

        def model_first() -> T:
            answer = model_call()
            answers.append(answer)
            return answer

        async def translated() -> Any:
            got = await driver_call()
            want = answers[0] if answers else None
            return self._in_model_numbers(want, got, grant=what == "lease_take")

        return self._both(what, model_first, translated)

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self.capabilities.leases and self._walks("leases"):
            for key in LEASE_KEYS:
                model_call = functools.partial(self.model.lease_holders, key, self.now)

                async def holders(key: str = key) -> object:
                    got = await self.driver.lease_holders(key, self.now)
                    return self._in_model_numbers(self.model.lease_holders(key, self.now), got)

                checks.append((f"lease_holders({key!r})", model_call, holders))
        return checks


def _purge_order(h: Lease) -> tuple[int, str, int]:
    """The order a purge takes expired holdings in (the contract's)."""
    return (h.expires_at_ms, h.key, h.token)
