#!/usr/bin/env bash
# The whole test command: set-up, lint, types, then every test against real Postgres and Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_venv.sh dev
scripts/need_chromium.sh
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict"
.venv/bin/mypy
echo "== pytest on 2 processes (hypothesis profile: $HYPOTHESIS_PROFILE)"
# Two processes (pytest-xdist) keep the suite inside CI's budget on a 2-core runner; worksteal
# evens out the long process and parity tests. Each test has its own schema, key prefix, ports
# and tmp dir, so the two never share state. `scripts/test.sh -n 0` runs in one process.
.venv/bin/python scripts/with_services.py -- \
    .venv/bin/python -m pytest -q -n 2 --dist worksteal "$@"
