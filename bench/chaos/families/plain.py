"""Plain jobs (`bench/chaos/jobs.py`, fed by `bench/chaos/producer.py`): N jobs on K workers;
the figures of `bench.chaos.figures.analyse` (jobs lost, keys completed twice, successes
recorded as failures, bodies run again)."""

from __future__ import annotations

import argparse

from bench.chaos.families import Evidence, Family, Urls
from bench.chaos.figures import Findings, analyse, answer_of


def _fleet(urls: Urls, args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    return [
        "worker",
        "bench.chaos.jobs",
        "--driver",
        urls.jobs,
        "--lease",
        str(args.lease),
        "--drain-timeout",
        str(args.drain_timeout),
        "--concurrency",
        str(args.concurrency),
        "--quiet",
    ], {}


def _analyse(ev: Evidence) -> Findings:
    return analyse(ev.cfg, [answer_of(d) for d in ev.answers], ev.rows, ev.runs(), ev.lives)


FAMILY = Family(
    name="jobs",
    title="plain jobs enqueued through a link that loses answers: none lost, none doubled",
    fleet=_fleet,
    feed=("-m", "bench.chaos.producer"),
    jobs=2_000,
    seconds=60.0,
    analyse=_analyse,
    backends=("pg", "redis-aof", "redis-nopersist"),
)
