.PHONY: demo test test-lowest nightly docs docs-serve bench-pg bench-redis bench-processes bench-flows bench-factories bench-webhooks chaos screenshots

# The main job: the demo on the embedded (memory) driver. Creates .venv on first use.
demo:
	scripts/setup_venv.sh
	.venv/bin/ujobs demo

# Every check CI runs: ruff, mypy --strict, and all tests on real Postgres and Redis.
test:
	scripts/test.sh

# The same suite on the LOWEST version of every dependency pyproject.toml allows (uv's
# lowest-direct resolution, in .venv-lowest), by hand or nightly: proves our lower bounds.
test-lowest:
	VENV=.venv-lowest RESOLUTION=lowest-direct LINT=0 scripts/test.sh

# The long Hypothesis profile, by hand.
nightly:
	HYPOTHESIS_PROFILE=nightly scripts/test.sh

# The side-by-side benchmarks (README, "Benchmarks"). ARGS=--dry-run tries one in a minute.
bench-pg:
	scripts/setup_venv.sh dev
	bench/run.sh pg $(ARGS)

bench-redis:
	scripts/setup_venv.sh dev
	bench/run.sh redis $(ARGS)

# Drains with `ujobs worker --processes 1,2` on Postgres and Redis beside PgQueuer with as many
# processes (docs/bench.md, "Worker processes"); e.g. ARGS="--processes 1,2,4,8 --jobs 40000".
bench-processes:
	scripts/setup_venv.sh dev
	bench/run.sh processes $(ARGS)

# Fan-out / fan-in (docs/flows.md): one parent gathering 1,000 and 10,000 no-op children, ours on
# Postgres and Redis beside a Celery chord on the same Redis (Celery in bench/.venvs/celery);
# about 10 minutes. ARGS=--dry-run tries it in half a minute.
bench-flows:
	scripts/setup_venv.sh dev
	.venv/bin/python -m bench.flows $(ARGS)

# What a factory's durability costs (docs/factories.md, "Measured"): a backfill over 1,000,000
# rows of a Postgres table (keyset, batch 1,000) and an import of a 100 MB JSONL file, each run
# by a worker on Postgres, against a bare loop doing the same batches without steps or ledger;
# 5 pairs, about 5 minutes. The server is $JOBS_BENCH_PG_URL (default: the test server);
# ARGS=--dry-run tries it in seconds.
bench-factories:
	scripts/setup_venv.sh dev
	.venv/bin/python -m bench.factories $(ARGS)

# Webhooks out and in (docs/factories.md, "Measured"): 2,000 webhook() jobs drained by one worker
# into a no-op endpoint of its own process, and 5,000 signed deliveries to a webhook_receiver()
# route under uvicorn (16 in flight), each on Postgres and on Redis, every event checked
# exactly once; about 3 minutes. ARGS=--dry-run tries it in seconds.
bench-webhooks:
	scripts/setup_venv.sh dev
	.venv/bin/python -m bench.webhooks $(ARGS)

# The fault-injection run (docs/chaos.md): kill -9, drains and store restarts on throwaway
# servers of its own, for every family (plain jobs, steps, waits, limits, scheduler, relay,
# flows, factories) on pg and redis-aof, plain jobs on redis-nopersist too (about 16 min in all).
# ARGS=--help lists its options, e.g. ARGS="--family steps --backend pg".
chaos:
	scripts/setup_venv.sh dev
	.venv/bin/python -m bench.chaos.run $(ARGS)

# The README's dashboard screenshots, taken by the browser test on Postgres.
screenshots:
	scripts/setup_venv.sh dev
	scripts/need_chromium.sh
	UJOBS_SCREENSHOTS=docs/screenshots .venv/bin/python scripts/with_services.py -- \
		.venv/bin/python -m pytest -q -n 0 tests/dashboard/test_browser.py -k pg

# The documentation site (mkdocs.yml, docs/) into site/, warnings as errors, as
# tests/test_docs_site.py builds it; docs-serve rebuilds it on every edit at 127.0.0.1:8000.
docs:
	scripts/setup_venv.sh dev
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

docs-serve:
	scripts/setup_venv.sh dev
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve
