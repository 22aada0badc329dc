"""Every system under test: its interpreter, its worker command, where its store lives and how
the harness reads progress from that store (never from the worker's logs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import BEST
from bench.stores import Probe, Progress

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "bench" / ".venvs"
OURS_PYTHON = ROOT / ".venv" / "bin" / "python"


@dataclass(frozen=True)
class Variant:
    """One setting of a system's worker; the drain and the latency phases run once per variant
    (enqueueing does not depend on the worker, so it runs once per system)."""

    name: str  # short, unique within its system: the table's and `--variants`' name for it
    settings: str  # what the worker runs with, for the table: "concurrency 10"
    default: bool = False  # the system's own defaults: nothing is passed to its worker
    args: tuple[str, ...] = ()  # appended to the worker's argv
    env: tuple[tuple[str, str], ...] = ()  # added to the worker's environment (its peer reads it)
    passed: str = "nothing passed"  # how the setting reaches the worker, for the notes


@dataclass(frozen=True)
class System:
    name: str
    label: str  # the table's name for it
    python: Path  # its virtualenv's interpreter, which runs its client
    worker: tuple[str, ...]  # argv of its one worker process; "{url}" is its store's URL
    worker_note: str  # how its worker runs whatever the variant, for the notes under the table
    probe: Probe
    package: str  # the distribution whose version the table reports
    variants: tuple[Variant, ...]  # in the table's order; exactly one is `default`
    redis_db: int | None = None
    drain_cap: int | None = None  # fewer drain jobs where the full count would take minutes
    url_options: str = ""  # appended to its store's URL for its client and worker

    def key(self, variant: Variant) -> str:
        """The name of one variant's row in the results: "ours:c10"."""
        return f"{self.name}:{variant.name}"

    def variant(self, name: str) -> Variant:
        """The variant called `name`; KeyError if there is none."""
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise KeyError(f"{self.name} has no variant {name!r}")

    @property
    def default(self) -> Variant:
        """The variant that passes nothing: the system's own defaults."""
        return next(v for v in self.variants if v.default)


@dataclass(frozen=True)
class Pair:
    """One paired comparison: every figure of row `num` over row `den`, computed within each
    run. A row is a variant's key ("ours:c10"), a system's name ("ours": its enqueue and bulk),
    or "<system>:best": that system's variant with the highest drain in the same run."""

    label: str  # the settings compared, for the table: "concurrency 10 / batch 10"
    num: str
    den: str


def _only(settings: str) -> tuple[Variant, ...]:
    """The variants of a system measured at its defaults alone."""
    return (Variant("default", settings, default=True),)


def _sql_probe(query: str) -> Probe:
    """A probe from one statement answering (untouched, unfinished)."""

    def probe(conn: Any, expected: int) -> Progress:
        untouched, unfinished = conn.execute(query).fetchone()
        return Progress(untouched, unfinished)

    return probe


def _saq_probe(client: Any, expected: int) -> Progress:
    # A job waits in `queued`, and stays in `incomplete` until it finishes.
    queued, incomplete = (
        client.pipeline().llen("saq:default:queued").zcard("saq:default:incomplete").execute()
    )
    return Progress(queued, incomplete)


def _arq_probe(client: Any, expected: int) -> Progress:
    # A job stays in arq's queue zset until it finishes; a claim only adds an in-progress key
    # under an id the harness does not know, so arq's drain window opens at its first finish.
    return Progress(None, client.zcard("arq:queue"))


def _rq_probe(client: Any, expected: int) -> Progress:
    # Between the queue list and the started registry a job is briefly in neither: count the
    # registries it ends in instead.
    queued, finished, failed = (
        client.pipeline()
        .llen("rq:queue:default")
        .zcard("rq:finished:default")
        .zcard("rq:failed:default")
        .execute()
    )
    return Progress(queued, expected - finished - failed)


# Our schema (Postgres) or key prefix (Redis) inside the store the harness gives each phase.
_OURS = "bench"


def _ours_redis_probe(client: Any, expected: int) -> Progress:
    # `due` holds the ready rows; every live row holds its namespace in `job:live`.
    tag = "{" + _OURS + "}"
    due, live = client.pipeline().zcard(f"{tag}:due:default").hlen(f"{tag}:job:live").execute()
    return Progress(due, live)


def _peer(name: str, *command: str) -> tuple[Path, tuple[str, ...]]:
    bin_dir = VENVS / name / "bin"
    return bin_dir / "python", (str(bin_dir / command[0]), *command[1:])


def _ours(
    probe: Probe, url_options: str, redis_db: int | None = None, *, wide: tuple[int, ...] = ()
) -> System:
    """Ours; `wide`: variants at those concurrencies too, each matched with a peer's batch of
    the same size."""
    ujobs = str(OURS_PYTHON.parent / "ujobs")
    return System(
        name="ours",
        label="ultimat3-jobs",
        python=OURS_PYTHON,
        worker=(ujobs, "worker", "bench.peers.ours_peer", "--driver", "{url}", "--quiet"),
        worker_note="`ujobs worker` with its defaults but the concurrency (on uvloop, `--loop"
        " auto`'s pick where it is installed; the wake on; jobs held at once = the concurrency,"
        " `--max-in-flight`'s default)",
        probe=probe,
        package="ultimat3-jobs",
        variants=(
            Variant(
                "c10",
                "concurrency 10",
                args=("--concurrency", "10"),
                passed="`--concurrency 10`",
            ),
            Variant("c50", "concurrency 50", default=True),
            *(
                Variant(
                    f"c{n}",
                    f"concurrency {n}",
                    args=("--concurrency", str(n)),
                    passed=f"`--concurrency {n}`",
                )
                for n in wide
            ),
        ),
        redis_db=redis_db,
        url_options=url_options,
    )


_PROCRASTINATE_PYTHON, _PROCRASTINATE_WORKER = _peer(
    "procrastinate",
    "procrastinate",
    "--app=bench.peers.procrastinate_peer.app",
    "worker",
    "--queues=default",
)


def _batch(size: int, *, default: bool = False) -> Variant:
    """PgQueuer at one batch size; its peer reads BENCH_BATCH_SIZE."""
    if default:
        return Variant(f"b{size}", f"batch size {size}", default=True)
    return Variant(
        f"b{size}",
        f"batch size {size}",
        env=(("BENCH_BATCH_SIZE", str(size)),),
        passed=f"`batch_size={size}` (what `pgq run --batch-size {size}` passes)",
    )


def _sized(prefix: str, size: int, passed: str, *, default: bool = False, **env: str) -> Variant:
    """A peer at one concurrency that reaches its worker through the environment."""
    return Variant(
        f"{prefix}{size}",
        f"concurrency {size}",
        default=default,
        env=tuple(env.items()),
        passed=passed,
    )


_OBAN_PYTHON, _OBAN_WORKER = _peer(
    "oban", "oban", "start", "--dsn", "{url}", "--log-level", "WARNING"
)
_CHANCY_PYTHON = VENVS / "chancy" / "bin" / "python"
_CHANCY_WORKER = (str(_CHANCY_PYTHON), "-m", "bench.peers.cli", "chancy", "worker")
_PGQUEUER_PYTHON = VENVS / "pgqueuer" / "bin" / "python"
_PGQUEUER_WORKER = (str(_PGQUEUER_PYTHON), "-m", "bench.peers.cli", "pgqueuer", "worker")
_ARQ_PYTHON, _ARQ_WORKER = _peer("arq", "arq", "bench.peers.arq_peer.WorkerSettings")
_SAQ_PYTHON, _SAQ_WORKER = _peer("saq", "saq", "bench.peers.saq_peer.settings")
_RQ_PYTHON, _RQ_WORKER = _peer("rq", "rq", "worker", "--url", "{url}", "default")

SYSTEMS: dict[str, tuple[System, ...]] = {
    "pg": (
        _ours(
            _sql_probe(
                "SELECT count(*) FILTER (WHERE state = 'ready'),"
                " count(*) FILTER (WHERE state IN ('ready', 'running', 'parked'))"
                f" FROM {_OURS}.jobs"
            ),
            f"?schema={_OURS}",
            # PgQueuer drains faster with bigger batches (b100 over b50; b200 over b100 in 6 of
            # 10 rotated rounds, docs/pg.md): ours at the same sizes is the matched setting. Ours
            # kept gaining past 200 (c400 and c800 over c200 in 7 and 8 of 10 rounds, "The claim
            # chain" in docs/pg.md): each at its best needs those matched pairs too.
            wide=(100, 200, 400, 800),
        ),
        System(
            name="procrastinate",
            label="procrastinate",
            python=_PROCRASTINATE_PYTHON,
            worker=_PROCRASTINATE_WORKER,
            worker_note="`procrastinate worker` with its defaults (concurrency 1, LISTEN/NOTIFY)",
            variants=_only("concurrency 1"),
            probe=_sql_probe(
                "SELECT count(*) FILTER (WHERE status = 'todo'),"
                " count(*) FILTER (WHERE status IN ('todo', 'doing'))"
                " FROM procrastinate_jobs"
            ),
            package="procrastinate",
        ),
        System(
            name="pgqueuer",
            label="PgQueuer",
            python=_PGQUEUER_PYTHON,
            worker=_PGQUEUER_WORKER,
            worker_note="what `pgq run` runs, with its defaults but the batch size (LISTEN/NOTIFY,"
            " asyncpg, uvloop; a batch is how many jobs one dequeue claims and how many"
            " finishes one log write records; jobs in flight are not capped, as"
            " `max_concurrent_tasks` is unset); the `pgq run` command itself fails to start in"
            " 1.6.0",
            variants=(
                _batch(10, default=True),
                *(_batch(n) for n in (50, 100, 200, 400, 800)),
            ),
            # A finished job leaves the table for the log; a failed one stays as `failed`.
            probe=_sql_probe(
                "SELECT count(*) FILTER (WHERE status = 'queued'),"
                " count(*) FILTER (WHERE status IN ('queued', 'picked'))"
                " FROM pgqueuer"
            ),
            package="pgqueuer",
        ),
        System(
            name="oban",
            label="oban-py",
            python=_OBAN_PYTHON,
            worker=_OBAN_WORKER,
            worker_note="`oban start` with its defaults but the queue's limit and `--log-level"
            " WARNING` (at INFO it logs two lines a job); oban-py has no default limit, its"
            " README starts with `default:10`",
            variants=(
                Variant(
                    "q10",
                    "concurrency 10",
                    default=True,
                    args=("--queues", "default:10"),
                    passed="`--queues default:10`",
                ),
                Variant(
                    "q50",
                    "concurrency 50",
                    args=("--queues", "default:50"),
                    passed="`--queues default:50`",
                ),
            ),
            probe=_sql_probe(
                "SELECT count(*) FILTER (WHERE state = 'available'),"
                " count(*) FILTER (WHERE state IN ('available', 'scheduled', 'executing',"
                " 'retryable')) FROM oban_jobs"
            ),
            package="oban",
        ),
        System(
            name="chancy",
            label="chancy",
            python=_CHANCY_PYTHON,
            worker=_CHANCY_WORKER,
            worker_note="chancy's Worker with its defaults, its queue declared by the worker with"
            " the AsyncExecutor (the default is a process pool, for `def` bodies) and eager"
            " polling (otherwise one batch every 5 s), at the variant's concurrency",
            variants=(
                _sized("c", 10, "queue `concurrency=10`", default=True, BENCH_CONCURRENCY="10"),
                _sized("c", 50, "queue `concurrency=50`", BENCH_CONCURRENCY="50"),
            ),
            probe=_sql_probe(
                "SELECT count(*) FILTER (WHERE state = 'pending'),"
                " count(*) FILTER (WHERE state IN ('pending', 'running', 'retrying'))"
                " FROM chancy_jobs"
            ),
            package="chancy",
        ),
    ),
    "redis": (
        _ours(_ours_redis_probe, f"?prefix={_OURS}", redis_db=10),
        System(
            name="arq",
            label="arq",
            python=_ARQ_PYTHON,
            worker=_ARQ_WORKER,
            worker_note="`arq` worker with its defaults (max_jobs 10, poll_delay 0.5 s)",
            variants=_only("max_jobs 10"),
            probe=_arq_probe,
            package="arq",
            redis_db=11,
        ),
        System(
            name="saq",
            label="SAQ",
            python=_SAQ_PYTHON,
            worker=_SAQ_WORKER,
            worker_note="`saq` worker with its defaults but the concurrency (each of its"
            " `concurrency` tasks dequeues one job at a time)",
            variants=(
                Variant("c10", "concurrency 10", default=True),
                Variant(
                    "c50",
                    "concurrency 50",
                    env=(("BENCH_CONCURRENCY", "50"),),
                    passed='`"concurrency": 50` in its settings dict',
                ),
            ),
            probe=_saq_probe,
            package="saq",
            redis_db=12,
        ),
        System(
            name="rq",
            label="RQ",
            python=_RQ_PYTHON,
            worker=_RQ_WORKER,
            worker_note="`rq worker` with its default Worker class (a fork per job)",
            variants=_only("one job at a time"),
            probe=_rq_probe,
            package="rq",
            redis_db=13,
            drain_cap=2_000,
        ),
    ),
}


def _versus(backend: str, peer: str, matched: tuple[tuple[str, str], ...]) -> tuple[Pair, ...]:
    """Ours over `peer`: enqueue and bulk; each matched pair of variants (ours', the peer's);
    each at its best drain of the run; each at its defaults. Labels are the variants' settings."""
    by_name = {s.name: s for s in SYSTEMS[backend]}
    ours, them = by_name["ours"], by_name[peer]

    def pair(prefix: str, mine: Variant, theirs: Variant) -> Pair:
        return Pair(
            f"{prefix}{mine.settings} / {theirs.settings}", ours.key(mine), them.key(theirs)
        )

    return (
        Pair("enqueue and bulk (no worker settings)", ours.name, them.name),
        *(pair("", ours.variant(mine), them.variant(theirs)) for mine, theirs in matched),
        Pair("each at its best drain of the run", f"{ours.name}:{BEST}", f"{them.name}:{BEST}"),
        pair("each at its defaults: ", ours.default, them.default),
    )


PAIRS: dict[str, tuple[Pair, ...]] = {
    "pg": (
        *_versus(
            "pg",
            "pgqueuer",
            tuple((f"c{n}", f"b{n}") for n in (10, 50, 100, 200, 400, 800)),
        ),
        *_versus("pg", "oban", (("c10", "q10"), ("c50", "q50"))),
        *_versus("pg", "chancy", (("c10", "c10"), ("c50", "c50"))),
    ),
    "redis": _versus("redis", "saq", (("c10", "c10"), ("c50", "c50"))),
}
