.PHONY: demo test nightly bench-pg bench-redis

# The main job: the demo on the embedded (memory) driver. Creates .venv on first use.
demo:
	scripts/setup_venv.sh
	.venv/bin/ujobs demo

# Every check CI runs: ruff, mypy --strict, and all tests on real Postgres and Redis.
test:
	scripts/test.sh

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
