#!/usr/bin/env bash
# The whole test command: set-up, lint, types, then every test against real Postgres and Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_venv.sh dev
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict"
.venv/bin/mypy
echo "== pytest (hypothesis profile: $HYPOTHESIS_PROFILE)"
.venv/bin/python scripts/with_services.py -- .venv/bin/python -m pytest -q "$@"
