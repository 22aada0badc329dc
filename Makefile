.PHONY: demo test nightly

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
