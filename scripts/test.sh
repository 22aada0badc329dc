#!/usr/bin/env bash
# The whole test command: set-up, lint, types, then every test against real Postgres and Redis.
#
# VENV (default .venv) and RESOLUTION are setup_venv.sh's: `make test-lowest` runs this with
# VENV=.venv-lowest RESOLUTION=lowest-direct and LINT=0, the suite on the lowest versions
# pyproject.toml allows (ruff and mypy judge our code, not the dependencies: they run once, on
# the newest releases, in `make test`).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${VENV:-.venv}"
scripts/setup_venv.sh dev
scripts/need_chromium.sh
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
# Bytecode is cached, outside the tree, even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE): the suite starts hundreds of Python processes (the CLI, workers,
# relays) and the pytest workers, each of which would otherwise compile every module of ours,
# and rewrite every test module's asserts, from source again (a quarter of the CLI tests' time).
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-${TMPDIR:-/tmp}/ujobs-pycache}"
unset PYTHONDONTWRITEBYTECODE
mypy_pid=""
if [ "${LINT:-1}" = "1" ]; then
    echo "== ruff"
    "$venv/bin/ruff" check .
    "$venv/bin/ruff" format --check .
    # mypy runs beside the tests, its report printed after them: from a cold cache (a fresh
    # checkout, as on CI) it takes half a minute of one core (measured 2026-12-06: 38 s cold,
    # 2 s warm), which the suite's waits leave idle; run before the tests it added its whole
    # time to the command's.
    mypy_log="$(mktemp)"
    "$venv/bin/mypy" >"$mypy_log" 2>&1 &
    mypy_pid=$!
fi
echo "== pytest on 4 processes (hypothesis profile: $HYPOTHESIS_PROFILE)"
# Four processes (pytest-xdist) on a 2-core runner: a third of the suite's time is spent
# waiting (on servers, subprocesses, leases): with two, a quarter of the cores sat idle (measured
# 2026-12-06: 9 min 40 s with three on a quiet machine, 10 min 47 s with two and other work
# beside it); with three the cores still sat idle a third of the time (2026-12-07, 4,768
# tests: pytest 591 s with three, 518 s with four, one run each on a quiet machine, the
# CPU used 14.1 and 12.8 min); worksteal evens out the long process
# and parity tests. Each test has its own schema, key prefix, ports and tmp dir, so they never
# share state. `scripts/test.sh -n 0` runs in one process. The
# ten slowest tests are printed at the end, so a test that grows shows where the time goes.
pytest_status=0
"$venv/bin/python" scripts/with_services.py -- \
    "$venv/bin/python" -m pytest -q -n 4 --dist worksteal --durations=10 "$@" || pytest_status=$?
if [ -n "$mypy_pid" ]; then
    echo "== mypy --strict (run beside the tests)"
    mypy_status=0
    wait "$mypy_pid" || mypy_status=$?
    cat "$mypy_log"
    rm -f "$mypy_log"
    [ "$mypy_status" = "0" ] || exit "$mypy_status"
fi
exit "$pytest_status"
