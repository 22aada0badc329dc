"""The key layout: every key of one prefix shares the hash tag `{prefix}`, so one Redis Cluster
slot holds them all and every script's keys are declared in KEYS and co-located.
"""

from __future__ import annotations

from jobs_core.errors import RecordInvalidError


class Keys:
    """The names of one prefix's keys and wake channels."""

    __slots__ = (
        "attempts",
        "balance",
        "claimed",
        "consumer",
        "consumer_names",
        "counter_hours",
        "counter_minutes",
        "counters",
        "created",
        "data",
        "error",
        "event",
        "event_expiry",
        "event_name",
        "finish",
        "hold_clock",
        "hold_expiry",
        "hold_token",
        "join_pending",
        "join_waiters",
        "live",
        "pause_name",
        "pause_queue",
        "pause_task",
        "posting",
        "prefix",
        "progress",
        "queue_count",
        "result",
        "schema",
        "state",
        "step_index",
        "step_out",
        "sweep",
        "sweep_done",
        "sweep_name",
        "sweep_started",
        "tag",
        "task",
        "wait",
        "wait_index",
        "wake",
        "webhook_attempt",
        "webhook_attempt_age",
        "webhook_attempts",
        "webhook_endpoint",
        "webhook_endpoints",
        "worker",
    )

    def __init__(self, prefix: str) -> None:
        if not prefix or any(c in prefix for c in "{}\x00"):
            raise RecordInvalidError("a non-empty prefix without braces or NUL", detail="prefix")
        self.prefix = prefix
        self.tag = t = "{" + prefix + "}"
        self.state = f"{t}:job:state"
        self.data = f"{t}:job:data"
        self.live = f"{t}:job:live"
        self.error = f"{t}:job:error"
        self.progress = f"{t}:job:progress"
        self.result = f"{t}:job:result"
        # -- attempts -- (lua/includes/attempts.lua finds these by exact name)
        #: hash id -> the latest claim's time; hash id -> its attempt history (JSON lines).
        self.claimed = f"{t}:job:claimed"
        self.attempts = f"{t}:job:attempts"
        self.pause_queue = f"{t}:pause:queue"
        self.pause_name = f"{t}:pause:name"
        #: set of paused scheduled tasks: the scheduler reads it, no claim does.
        self.pause_task = f"{t}:pause:task"
        self.worker = f"{t}:worker"
        self.wake = f"{t}:wake"
        # The operator family (listing, queue stats, counters); see docs/redis.md.
        #: zset, every score 0, member `%013d created_at_ms` .. id: lex order IS listing order.
        self.created = f"{t}:job:created"
        #: hash `queue NUL total|completed|failed|dead|cancelled` -> rows of that queue (so).
        self.queue_count = f"{t}:queue:count"
        #: "2" once every stored row is in `created` and `queue_count` (`migrate`, or a first
        #: enqueue into an empty store).
        self.schema = f"{t}:schema"
        #: hash `m|h %013d bucket NUL name NUL queue NUL outcome#` -> settles counted there.
        self.counters = f"{t}:counter"
        #: zsets of the minute / hour buckets, scored by bucket start, member as above sans tag.
        self.counter_minutes = f"{t}:counter:minute"
        self.counter_hours = f"{t}:counter:hour"
        # The step and event families (lua/includes/durable.lua finds these by exact name).
        self.wait = f"{t}:wait"
        self.wait_index = f"{t}:wait:index"
        self.step_out = f"{t}:step:out"
        #: zset, every score 0, member `run_id NUL step name`: a run's steps are one lex range.
        self.step_index = f"{t}:step:index"
        self.event = f"{t}:event"
        self.event_name = f"{t}:event:name"
        self.event_expiry = f"{t}:event:expiry"
        # The lease family (lua/includes/lease.lua). Not under `lease:`, which is the queues'.
        #: string, the last lease token granted store-wide (INCR).
        self.hold_token = f"{t}:hold-token"
        #: zset, every holding by expires_at_ms, member lease key NUL token (19 digits): what
        #: `lease_purge` reads. `hold-` like `hold-token`: apart from every `hold:<key>`.
        self.hold_expiry = f"{t}:hold-expiry"
        #: zset, every lease key by its clock (the latest time a call on it used): a call works
        #: on a key at the later of its now_ms and that clock (`includes/lease.lua`).
        self.hold_clock = f"{t}:hold-clock"
        # The task family (lua/task_*.lua).
        #: hash task name -> its mark: watermark NUL fired NUL fired_job_id NUL fired_at
        #: (an empty field is None).
        self.task = f"{t}:task"
        # The flow family (lua/includes/flows.lua finds these by exact name).
        #: zset, every score 0, member dep NUL waiter: each dependency's parked waiters.
        self.join_waiters = f"{t}:join:waiters"
        #: zset, every score 0, member waiter NUL dep: what a waiter's join still counts.
        self.join_pending = f"{t}:join:pending"
        #: the pub/sub channel a finishing script publishes a WATCHED row's id on.
        self.finish = f"{t}:finish"
        # The sweep ledger (lua/includes/sweep.lua describes each).
        #: hash run_id -> the entry, 16 NUL-joined fields.
        self.sweep = f"{t}:sweep"
        #: zsets, every score 0: every entry by (started_at_ms, run_id); one name's entries by
        #: the same; the completed entries of each sweep by (finished_at_ms, run_id).
        self.sweep_started = f"{t}:sweep:started"
        self.sweep_name = f"{t}:sweep:name"
        self.sweep_done = f"{t}:sweep:done"
        # -- postings -- (lua/includes/posting.lua describes each)
        #: hash `tenant NUL key` -> the posting; hash `tenant NUL account` -> its sums.
        self.posting = f"{t}:posting"
        self.balance = f"{t}:balance"
        # -- consumers -- (lua/includes/consumer.lua describes each)
        #: hash `name NUL tenant` -> the entry, 8 NUL-joined fields.
        self.consumer = f"{t}:consumer"
        #: zset, every score 0, the same members: the listing's order.
        self.consumer_names = f"{t}:consumer:names"
        # -- webhooks -- (lua/includes/webhook.lua describes each)
        #: hash `tenant NUL endpoint` -> the endpoint; zset of those fields, the listing's order.
        self.webhook_endpoint = f"{t}:webhook:endpoint"
        self.webhook_endpoints = f"{t}:webhook:endpoints"
        #: hash `job_id NUL claims` -> the attempt; zset of each endpoint's attempts by time.
        self.webhook_attempt = f"{t}:webhook:attempt"
        self.webhook_attempts = f"{t}:webhook:attempts"
        #: zset of every attempt by at_ms, members its field: what `webhook_attempt_purge` reads.
        self.webhook_attempt_age = f"{t}:webhook:attempt-age"

    def due(self, queue: str) -> str:
        """Ready rows and parked rows with a time, of one queue, by priority * 2**42 + run_at."""
        return f"{self.tag}:due:{queue}"

    def parked(self, queue: str) -> str:
        """The parked rows with a time of one queue (also in `due`), same scores."""
        return f"{self.tag}:parked:{queue}"

    def lease(self, queue: str) -> str:
        """The running rows of one queue, by lease end."""
        return f"{self.tag}:lease:{queue}"

    def hold(self, key: str) -> str:
        """A lease key's holdings, live or not: zset token by expires_at_ms."""
        return f"{self.tag}:hold:{key}"

    def holder(self, key: str) -> str:
        """A lease key's holding rows: hash token -> holder NUL stamp, NUL holder -> token."""
        return f"{self.tag}:holder:{key}"

    def finished(self, state: str) -> str:
        """The finished rows of one final state, by finished_at_ms (what `job_purge` reads)."""
        return f"{self.tag}:finished:{state}"

    def account(self) -> tuple[str, str, str, str, str, str]:
        """The keys every settling script takes last, in `includes/account.lua`'s order."""
        return (
            self.counters,
            self.counter_minutes,
            self.queue_count,
            self.schema,
            self.created,
            self.data,
        )

    def channel(self, queue: str) -> str:
        """The pub/sub channel an enqueue into `queue` publishes its wake on."""
        return f"{self.tag}:wake:{queue}"

    def probe_channel(self, token: str) -> str:
        """A private channel a wake subscription proves itself on."""
        return f"{self.tag}:probe:{token}"

    def pattern(self, under: str = "") -> str:
        """A SCAN MATCH pattern for every key of this prefix (whose name goes on with `under`,
        a literal without wildcards: `hold:` finds every lease key's holdings)."""
        escaped = "".join("\\" + c if c in "*?[]^\\" else c for c in self.prefix)
        return "{" + escaped + "}:" + under + "*"
