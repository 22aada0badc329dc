"""Plain jobs (`bench/chaos/jobs.py`, fed by `bench/chaos/producer.py`): N jobs on K workers;
the figures of `bench.chaos.figures.analyse` (jobs lost, keys completed twice, successes
recorded as failures, bodies run again)."""

from __future__ import annotations

from bench.chaos.families import Evidence, Family, workers
from bench.chaos.figures import Findings, analyse, answer_of


def _analyse(ev: Evidence) -> Findings:
    return analyse(ev.cfg, [answer_of(d) for d in ev.answers], ev.rows, ev.runs(), ev.lives)


FAMILY = Family(
    name="jobs",
    title="plain jobs enqueued through a link that loses answers: none lost, none doubled",
    fleet=workers("bench.chaos.jobs"),
    feed=("-m", "bench.chaos.producer"),
    jobs=2_000,
    seconds=60.0,
    analyse=_analyse,
    backends=("pg", "redis-aof", "redis-nopersist"),
)
