"""Every durable table of the Postgres driver, declared once on one `MetaData`.

The tables carry no schema here: the driver renders its configured schema into each compiled
statement, the migrations create them in the schema they are run for, and `metadata_in(schema)`
gives the same tables placed in one schema (the migration test compares against it). Later
issues add tables (steps, leases, outbox…) here and in a new migration, never by
editing a shipped one.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from jobs_core.records import COUNTED_OUTCOMES, SWEEP_KINDS, SWEEP_STATUSES
from jobs_core.states import FINISHED_STATES, LIVE_STATES, JobState

#: Every identifier-like column compares and sorts by code point (UTF-8 byte order): the claim
#: breaks ties by id exactly as the memory driver does, and index comparisons skip the locale.
C: Final = "C"

metadata: Final = sa.MetaData(
    naming_convention={
        "pk": "%(table_name)s_pkey",
        "ck": "%(table_name)s_%(constraint_name)s_check",
    }
)


def lit(value: str) -> sa.ColumnElement[str]:
    """A SQL string literal for one of OUR constants (a state, a pause kind), never a value.

    States are literals, not bind parameters, so the planner can prove a query's state test
    implies a partial index's predicate even under a generic prepared plan.
    """
    if "'" in value or "\\" in value:
        raise ValueError(f"not a plain constant: {value!r}")
    return sa.literal_column(f"'{value}'", sa.Text)


def _in_clause(states: frozenset[JobState] | tuple[JobState, ...]) -> str:
    return ", ".join(f"'{s.value}'" for s in sorted(states))


LIVE_SQL: Final = _in_clause(LIVE_STATES)
FINISHED_SQL: Final = _in_clause(FINISHED_STATES)
ALL_STATES_SQL: Final = _in_clause(tuple(JobState))
SWEEP_STATUSES_SQL: Final = ", ".join(f"'{s}'" for s in SWEEP_STATUSES)
SWEEP_KINDS_SQL: Final = ", ".join(f"'{k}'" for k in SWEEP_KINDS)

jobs: Final = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.Text(collation=C), primary_key=True),
    sa.Column("run_id", sa.Text(collation=C), nullable=False),
    sa.Column("name", sa.Text(collation=C), nullable=False),
    sa.Column("queue", sa.Text(collation=C), nullable=False),
    sa.Column("tenant_id", sa.Text(collation=C), nullable=True),
    sa.Column("idempotency_key", sa.Text(collation=C), nullable=False),
    # JSON stays text: the exact form the caller stored comes back (jsonb would rewrite numbers,
    # e.g. 1e100 reads back as an integer), and the insert path skips a parse.
    sa.Column("input_json", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("claims", sa.BigInteger, nullable=False),
    sa.Column("claimed_by", sa.Text(collation=C), nullable=True),
    sa.Column("lease_until_ms", sa.BigInteger, nullable=True),
    sa.Column("run_at_ms", sa.BigInteger, nullable=True),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("finished_at_ms", sa.BigInteger, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("progress_json", sa.Text, nullable=True),
    sa.Column("result_json", sa.Text, nullable=True),
    sa.Column("enqueued_by", sa.Text(collation=C), nullable=True),
    # The enqueuer's W3C trace context (migration 0003): read back by the claim, never searched.
    sa.Column("traceparent", sa.Text, nullable=True),
    # The event a parked row waits for (migration 0005): set only while the row is `parked`
    # (a PARK nack with a wait), cleared by every write that moves it out (claim, wake, cancel;
    # a removed or purged row takes it along). On the row, not in a table of its own, so no
    # statement that ends a wait has a second table to keep in step.
    sa.Column("wait_event", sa.Text(collation=C), nullable=True),
    sa.Column("wait_match_json", sa.Text, nullable=True),
    sa.Column("wait_since_ms", sa.BigInteger, nullable=True),
    # The tenant the waiting run acts for (NULL: none) and the end of its wait's window (NULL:
    # no end), migration 0009; set and cleared with the three above.
    sa.Column("wait_tenant_id", sa.Text(collation=C), nullable=True),
    sa.Column("wait_until_ms", sa.BigInteger, nullable=True),
    # Flows (migration 0010). The parent and batch links, as enqueued, never changed after.
    sa.Column("parent_id", sa.Text(collation=C), nullable=True),
    sa.Column("batch_id", sa.Text(collation=C), nullable=True),
    # The row's latest join (`JoinState`): NULL for a row that never joined. `join_claims` is the
    # row's `claims` when it parked on that join: the finish trigger moves only a row still
    # `parked` with the same `claims`, so a waiter that left `parked` (claimed at its timeout,
    # cancelled, requeued) is never moved by its old join's edges, which no write has to chase.
    sa.Column("join_total", sa.Integer, nullable=True),
    sa.Column("join_pending", sa.Integer, nullable=True),
    sa.Column("join_failed", sa.Integer, nullable=True),
    sa.Column("join_policy", sa.Text, nullable=True),
    sa.Column("join_claims", sa.BigInteger, nullable=True),
    # Markers read by the finish trigger's WHEN: `waiters`, some join named this row (an edge in
    # `joins` was written; kept after, a later finish then finds no edge); `watched`, its finish
    # is announced. The common row holds neither, so its finish runs no trigger body at all.
    sa.Column("waiters", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("watched", sa.Boolean, nullable=False, server_default=sa.false()),
    # -- acts-for (migration 0017) --
    # The org the row's runs act for (`NewJob.acts_for`), as enqueued; never changed after, and
    # never authority (the worker derives it again from the input). No index: a listing filters
    # on it during its bounded walk, as on the enqueuer's tenant.
    sa.Column("acts_for", sa.Text(collation=C), nullable=True),
    # -- attempts (migration 0016) -- the latest claim's time, and how the last claims ended
    # (`jobs_core.attempts`): a JSON array of at most ATTEMPT_HISTORY entries, oldest first,
    # appended by the write that ends each claim; NULL is none yet. An ack appends none: a
    # `completed` row's own columns spell its last entry (`statements.attempts.attempts_read`).
    sa.Column("claimed_at_ms", sa.BigInteger, nullable=True),
    sa.Column("attempts", JSONB, nullable=True),
    sa.CheckConstraint(f"state IN ({ALL_STATES_SQL})", name="state"),
)

# The listing by parent and by batch (flows, migration 0010): partial, so the rows without a
# link (nearly all) never write to them.
sa.Index(
    "jobs_parent",
    jobs.c.parent_id,
    jobs.c.created_at_ms,
    jobs.c.id,
    postgresql_where=sa.text("parent_id IS NOT NULL"),
)
sa.Index(
    "jobs_batch",
    jobs.c.batch_id,
    jobs.c.created_at_ms,
    jobs.c.id,
    postgresql_where=sa.text("batch_id IS NOT NULL"),
)

# The edges of the joins (flows, migration 0010): `waiter_id` is parked until `dep_id` finishes.
# Keyed dependency first: a finish deletes its row's edges by one range of the primary key; a
# waiter parking on a fresh join drops its old edges through `joins_waiter`. One row per pair,
# so 10,000 children cost 10,000 small inserts and deletes, never a list rewritten per child.
joins: Final = sa.Table(
    "joins",
    metadata,
    sa.Column("dep_id", sa.Text(collation=C), primary_key=True),
    sa.Column("waiter_id", sa.Text(collation=C), primary_key=True),
)
sa.Index("joins_waiter", joins.c.waiter_id)

# The claim's main scan: one queue's due rows in exactly the claim order, so `LIMIT n` reads n
# index entries (run_at is filtered inside the index, never on the heap).
sa.Index(
    "jobs_due",
    jobs.c.queue,
    jobs.c.priority,
    jobs.c.run_at_ms,
    jobs.c.id,
    postgresql_where=sa.text("state IN ('parked', 'ready')"),
)

# Lapsed leases: the bury and the re-claim of a lapsed running row look only at running rows
# (few: bounded by what workers hold), by queue and lease end.
sa.Index(
    "jobs_lease",
    jobs.c.queue,
    jobs.c.lease_until_ms,
    postgresql_where=sa.text("state = 'running'"),
)

# The idempotency namespace (SPEC §5): (name, tenant or '', key) over live rows. The enqueue's
# ON CONFLICT target and the holder lookups spell this very expression and predicate.
sa.Index(
    "jobs_live_key",
    jobs.c.name,
    sa.func.coalesce(jobs.c.tenant_id, sa.literal_column("''")),
    jobs.c.idempotency_key,
    unique=True,
    postgresql_where=sa.text(f"state IN ({LIVE_SQL})"),
)

# Retention (`job_purge`): each final state's rows by finish time, so a purge reads exactly the
# rows it deletes, oldest first, and never a live row (live rows are not in the index at all).
sa.Index(
    "jobs_finished",
    jobs.c.state,
    jobs.c.finished_at_ms,
    jobs.c.id,
    postgresql_where=sa.text(f"state IN ({FINISHED_SQL})"),
)

# The operator's listing (`job_list`, migration 0003): every row but the running ones in listing
# order, so the newest page reads its rows' entries and nothing else, at any table size. Running
# rows are left out on purpose: a claim moves a row INTO `running` and every heartbeat rewrites it
# there, both non-HOT updates that would each add an entry here; the listing reads the running
# rows (few: what workers hold) through `jobs_lease` and merges them in. `queue` and `state`
# ride along (INCLUDE) so the counts by queue and state (`queue_stats`) are an index-only scan
# of this index, not of the table. Entries are keyed by (created_at, id): the settles that add
# them land all over the index, never on one hot right-hand page as a (queue, state) key would.
sa.Index(
    "jobs_listing",
    jobs.c.created_at_ms,
    jobs.c.id,
    postgresql_include=["queue", "state"],
    postgresql_where=sa.text("state <> 'running'"),
)

# The waits of parked rows by event name and tenant (migration 0005, keyed by tenant since
# 0009): a publish reads exactly the rows waiting for its event of its tenant (an event for every
# tenant: the name's range), spelled as `coalesce(wait_tenant_id, '')` like `jobs_live_key` (a
# tenant is never ''). Partial: only the few rows that wait have an entry, so the claims and
# settles that churn every other row never write to it.
sa.Index(
    "jobs_waits",
    jobs.c.wait_event,
    sa.func.coalesce(jobs.c.wait_tenant_id, sa.literal_column("''")),
    jobs.c.id,
    postgresql_where=sa.text("wait_event IS NOT NULL"),
)

pauses: Final = sa.Table(
    "pauses",
    metadata,
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("value", sa.Text(collation=C), primary_key=True),
    # 'task' (migration 0007): a paused scheduled task. The claim reads only 'name' and 'queue'.
    sa.CheckConstraint("kind IN ('name', 'queue', 'task')", name="kind"),
)

workers: Final = sa.Table(
    "workers",
    metadata,
    sa.Column("worker_id", sa.Text(collation=C), primary_key=True),
    sa.Column("info_json", sa.Text, nullable=False),
    sa.Column("last_beat_ms", sa.BigInteger, nullable=False),
    sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
)

# One row per queue: the wake slot (caller's clock / slot length) of its latest NOTIFY. Enqueues
# read it without a lock and write it at most once per slot, so a busy queue notifies once per
# slot however many jobs arrive (plus, from an enqueuing process, one at the slot's end for its
# due jobs that went in without one: `jobs_core.wake.Trails`).
wakes: Final = sa.Table(
    "wakes",
    metadata,
    sa.Column("queue", sa.Text(collation=C), primary_key=True),
    sa.Column("slot", sa.BigInteger, nullable=False),
)


#: How many rows one counter bucket is spread over (see `counters`).
COUNTER_SHARDS: Final = 16

#: The counted outcomes' columns, in `COUNTED_OUTCOMES` order (a `CounterRow`'s fields).
COUNTER_COLUMNS: Final = tuple(o.name.lower() for o in COUNTED_OUTCOMES)

# Per-minute (and, once folded, per-hour) settle counts per job name and queue (migrations 0003,
# 0004), moved by the settling statements themselves. A contract bucket (name, queue, bucket_ms,
# width_ms) is spread
# over up to `COUNTER_SHARDS` rows (`shard`, from the settling worker's id): workers acking the
# same name in the same minute then update different rows instead of queueing on one row lock
# until each other's commit. Reads sum the shards; the fold merges them into one hour row
# (shard 0). The key leads with (width, bucket) so the fold and the drop read the oldest buckets
# in order, and every writer locks counter rows in key order (no deadlock between them).
counters: Final = sa.Table(
    "counters",
    metadata,
    sa.Column("width_ms", sa.Integer, primary_key=True),
    sa.Column("bucket_ms", sa.BigInteger, primary_key=True),
    sa.Column("name", sa.Text(collation=C), primary_key=True),
    sa.Column("queue", sa.Text(collation=C), primary_key=True),
    sa.Column("shard", sa.SmallInteger, primary_key=True),
    *(sa.Column(c, sa.BigInteger, nullable=False) for c in COUNTER_COLUMNS),
)


# Durable steps (migration 0005): one row per recorded step of a run, its output JSON stored as
# the text the caller gave (`1`, `1.0` and `true` stay apart, as `result_json` does). A run's
# steps are one range of the key, read at each attempt by `step_list`.
steps: Final = sa.Table(
    "steps",
    metadata,
    sa.Column("run_id", sa.Text(collation=C), primary_key=True),
    sa.Column("name", sa.Text(collation=C), primary_key=True),
    sa.Column("output_json", sa.Text, nullable=False),
    sa.Column("recorded_at_ms", sa.BigInteger, nullable=False),
)

# Published events (migration 0005), data as the caller's text. Found by name in publish order
# (`events_by_name`: `event_find` and a park's check read one name's events oldest first), and
# purged by expiry (`events_expiry`: the oldest expired first, `LIMIT n` reads n entries).
events: Final = sa.Table(
    "events",
    metadata,
    sa.Column("id", sa.Text(collation=C), primary_key=True),
    sa.Column("name", sa.Text(collation=C), nullable=False),
    sa.Column("data_json", sa.Text, nullable=False),
    sa.Column("published_at_ms", sa.BigInteger, nullable=False),
    sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    # Whom it is for (migration 0009): waits of this tenant only (NULL: of no tenant), or of
    # every tenant when `all_tenants`. Events stored before 0009 are for no tenant.
    sa.Column("tenant_id", sa.Text(collation=C), nullable=True),
    sa.Column("all_tenants", sa.Boolean, nullable=False, server_default=sa.false()),
)
sa.Index("events_by_name", events.c.name, events.c.published_at_ms, events.c.id)
sa.Index("events_expiry", events.c.expires_at_ms, events.c.id)

# Lease holdings (migration 0006): one row per holding, named by `(key, token)` in every call
# after its take. The key leads the primary key, so a key's holdings (what a take counts and
# `lease_holders` reads) are one range of it, and a renew or release is one lookup in it.
# Expired rows stay until a take of their key, a release or abandon of them, or `lease_purge`
# deletes them; the purge reads them by expiry (`leases_expiry`, migration 0012: a renewal
# moves the expiry, so it updates this index too).
leases: Final = sa.Table(
    "leases",
    metadata,
    sa.Column("key", sa.Text(collation=C), primary_key=True),
    sa.Column("token", sa.BigInteger, primary_key=True),
    sa.Column("holder", sa.Text(collation=C), nullable=False),
    sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    sa.Column("stamp", sa.Boolean, nullable=False),
)

sa.Index("leases_expiry", leases.c.expires_at_ms, leases.c.key, leases.c.token)

# Each lease key's clock (migration 0018): the latest time any take, renewal, release or abandon
# of the key used (a purge moves it to the latest end it deleted). A call works on a key at the
# later of its `now_ms` and this, so a key's time never runs back. The row is also the key's
# lock: every lease write upserts it first (sorted by key), and the purge skips a key whose row
# is locked. Kept while the key holds anything, then until a purge finds it an hour behind
# (`semantics.LEASE_CLOCK_KEEP_MS`); `lease_clocks_idle` is what that purge reads.
lease_clocks: Final = sa.Table(
    "lease_clocks",
    metadata,
    sa.Column("key", sa.Text(collation=C), primary_key=True),
    sa.Column("now_ms", sa.BigInteger, nullable=False),
)

sa.Index("lease_clocks_idle", lease_clocks.c.now_ms, lease_clocks.c.key)

#: Lease tokens: one store-wide counter, so every later grant of a key carries a greater token
#: (takes of one key run one after another; gaps are fine).
lease_tokens: Final = sa.Sequence("lease_tokens", metadata=metadata)


# Scheduled tasks' marks (migration 0007): one row per task, by name. `watermark_ms` is where the
# scheduler's fires are fenced (`task_fire` moves it only from the value its caller read); the
# `fired_*` columns record the last fire that landed and the job it enqueued or found.
task_marks: Final = sa.Table(
    "task_marks",
    metadata,
    sa.Column("name", sa.Text(collation=C), primary_key=True),
    sa.Column("watermark_ms", sa.BigInteger, nullable=False),
    sa.Column("fired_ms", sa.BigInteger, nullable=True),
    sa.Column("fired_job_id", sa.Text(collation=C), nullable=True),
    sa.Column("fired_at_ms", sa.BigInteger, nullable=True),
)


# The sweep ledger (migration 0011): one row per run of a sweep (`backfill()`, `import_rows()`,
# `export_rows()`), keyed by the run, written fenced on the run's claim (`statements/sweep.py`).
# Counts are bigint: a sweep records up to 2**53 - 1 rows per batch, and sums stay exact.
sweeps: Final = sa.Table(
    "sweeps",
    metadata,
    sa.Column("run_id", sa.Text(collation=C), primary_key=True),
    sa.Column("job_id", sa.Text(collation=C), nullable=False),
    sa.Column("name", sa.Text(collation=C), nullable=False),
    sa.Column("scope", sa.Text(collation=C), nullable=False),
    sa.Column("environment", sa.Text(collation=C), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("checksum", sa.Text(collation=C), nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("batches", sa.BigInteger, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("errors", sa.BigInteger, nullable=False),
    sa.Column("expected", sa.BigInteger, nullable=True),
    # Text, as every JSON column here: the cursor comes back exactly as the sweep recorded it.
    sa.Column("cursor_json", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("started_at_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    sa.Column("finished_at_ms", sa.BigInteger, nullable=True),
    sa.CheckConstraint(f"status IN ({SWEEP_STATUSES_SQL})", name="status"),
    sa.CheckConstraint(f"kind IN ({SWEEP_KINDS_SQL})", name="kind"),
)

# A sweep's entries, every run of one (name, scope, environment, checksum), in run_id order:
# `sweep_start` locks them in that order (see `statements/sweep.py`) and finds among them the
# completed entry that blocks a re-run. Not partial on `completed`: the start must also lock the
# running entries a concurrent `sweep_finish` may be completing.
sa.Index(
    "sweeps_key",
    sweeps.c.name,
    sweeps.c.scope,
    sweeps.c.environment,
    sweeps.c.checksum,
    sweeps.c.run_id,
)
# `sweep_list` newest first, read backwards: of every sweep, and of one declaration's name.
sa.Index("sweeps_started", sweeps.c.started_at_ms, sweeps.c.run_id)
sa.Index("sweeps_name_started", sweeps.c.name, sweeps.c.started_at_ms, sweeps.c.run_id)

# The transactional outbox (migration 0008): jobs staged in the app's own transaction, waiting
# for the relay to publish them to the job driver (which may be another database). A row is its
# `NewJob` field for field (its id IS the job's id, so a republish dedupes) plus the relay's
# bookkeeping; a published row is deleted. Time columns hold the callers' clocks, never now().
outbox: Final = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", sa.Text(collation=C), primary_key=True),
    sa.Column("run_id", sa.Text(collation=C), nullable=False),
    sa.Column("name", sa.Text(collation=C), nullable=False),
    sa.Column("queue", sa.Text(collation=C), nullable=False),
    sa.Column("tenant_id", sa.Text(collation=C), nullable=True),
    sa.Column("idempotency_key", sa.Text(collation=C), nullable=False),
    # Text, as `jobs.input_json`: the relay publishes exactly the form the stage stored.
    sa.Column("input_json", sa.Text, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("run_at_ms", sa.BigInteger, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("enqueued_by", sa.Text(collation=C), nullable=True),
    sa.Column("traceparent", sa.Text, nullable=True),
    # Failed publishes so far, and not claimable before `available_at_ms` (the stage time, then
    # a release's retry time).
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("available_at_ms", sa.BigInteger, nullable=False),
    # The relay claim holding the row (NULL: free); a lapsed lease keeps its token until the
    # next claim, so a publish or release under a token is fenced on exactly that claim.
    sa.Column("claimed_by", sa.Text(collation=C), nullable=True),
    sa.Column("lease_until_ms", sa.BigInteger, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    # -- acts-for (migration 0017): the staged job's `acts_for`, published with it --
    sa.Column("acts_for", sa.Text(collation=C), nullable=True),
)

# Stage order: the claim and `outbox_pending` walk it (`ORDER BY created_at_ms, id LIMIT n`), so
# they read entries in the order they answer them, whatever the table's size.
sa.Index("outbox_order", outbox.c.created_at_ms, outbox.c.id)

# -- webhooks --
# The webhook ledger (migration 0014): the endpoints `webhook()` sends to, one row per (tenant,
# endpoint) — no tenant spelled '' (a tenant is never empty) — and every attempt, one row per
# claim that made it (`statements/webhook.py`). An attempt's write moves its endpoint's streak in
# the same statement.
webhook_endpoints: Final = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("tenant_id", sa.Text(collation=C), primary_key=True),
    sa.Column("endpoint", sa.Text(collation=C), primary_key=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("failures", sa.Integer, nullable=False),
    sa.Column("disabled_at_ms", sa.BigInteger, nullable=True),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
)
webhook_attempts: Final = sa.Table(
    "webhook_attempts",
    metadata,
    sa.Column("job_id", sa.Text(collation=C), primary_key=True),
    sa.Column("claims", sa.BigInteger, primary_key=True),
    sa.Column("tenant_id", sa.Text(collation=C), nullable=False),
    sa.Column("endpoint", sa.Text(collation=C), nullable=False),
    sa.Column("event_id", sa.Text(collation=C), nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("latency_ms", sa.BigInteger, nullable=False),
    sa.Column("excerpt", sa.Text, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("at_ms", sa.BigInteger, nullable=False),
    sa.CheckConstraint("outcome IN ('delivered', 'failed')", name="outcome"),
)
# `webhook_attempt_list`: one endpoint's attempts newest first, read backwards along it.
sa.Index(
    "webhook_attempts_endpoint",
    webhook_attempts.c.tenant_id,
    webhook_attempts.c.endpoint,
    webhook_attempts.c.at_ms,
    webhook_attempts.c.job_id,
    webhook_attempts.c.claims,
)
# `webhook_attempt_purge` (migration 0019): the oldest attempts first, one range, `LIMIT n`
# reads n entries.
sa.Index(
    "webhook_attempts_age",
    webhook_attempts.c.at_ms,
    webhook_attempts.c.job_id,
    webhook_attempts.c.claims,
)


# -- postings --
# The posting ledger (migration 0013): `ledger()`'s postings, one per (tenant, key) — tenant ''
# is the cross-tenant ledger (an org id is never empty) — and per (tenant, account, currency)
# the sums of its debits and of its credits. `lines_json` is the posting's lines as the driver
# spells them (`[[account, currency, amount], …]` by account and currency, compact): a repeat is
# told from a conflict by comparing that text. Sums are numeric: exact past any bigint.
postings: Final = sa.Table(
    "postings",
    metadata,
    sa.Column("tenant_id", sa.Text(collation=C), primary_key=True),
    sa.Column("key", sa.Text(collation=C), primary_key=True),
    sa.Column("job_id", sa.Text(collation=C), nullable=False),
    sa.Column("lines_json", sa.Text, nullable=False),
    sa.Column("posted_at_ms", sa.BigInteger, nullable=False),
)
posting_balances: Final = sa.Table(
    "posting_balances",
    metadata,
    sa.Column("tenant_id", sa.Text(collation=C), primary_key=True),
    sa.Column("account", sa.Text(collation=C), primary_key=True),
    sa.Column("currency", sa.Text(collation=C), primary_key=True),
    sa.Column("debits", sa.Numeric, nullable=False),
    sa.Column("credits", sa.Numeric, nullable=False),
)


# -- consumers --
# Consumer cursors (migration 0015): one row per (consumer name, tenant; '' for a
# `tenant="none"` consumer, as the live key spells no tenant), moved by a put fenced on the
# turn's claim and compared-and-set on the cursor it started from (`statements/consumer.py`).
# The primary key is the listing's order, and every put's one lookup.
consumers: Final = sa.Table(
    "consumers",
    metadata,
    sa.Column("name", sa.Text(collation=C), primary_key=True),
    sa.Column("tenant", sa.Text(collation=C), primary_key=True),
    sa.Column("source", sa.Text, nullable=False),
    # Text, compared byte for byte: the cursor is set only from the one its turn read.
    sa.Column("cursor_json", sa.Text, nullable=False),
    sa.Column("turns", sa.BigInteger, nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("lag", sa.BigInteger, nullable=True),
    sa.Column("holder", sa.Text(collation=C), nullable=False),
    sa.Column("job_id", sa.Text(collation=C), nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
)


def metadata_in(schema: str) -> sa.MetaData:
    """The declared tables, indexes and sequence, placed in `schema` (what the migrations must
    create)."""
    out = sa.MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(out, schema=schema)
    sa.Sequence(lease_tokens.name, schema=schema, metadata=out)
    return out
