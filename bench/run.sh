#!/usr/bin/env bash
# One command per backend: bench/run.sh pg|redis [harness options, see --help].
# Builds each peer's own virtualenv under bench/.venvs/<peer> from bench/requirements/<peer>.txt
# (so their pins never meet ours), then runs the harness from our .venv.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
python="$root/.venv/bin/python"

case "${1:-}" in
pg) peers="procrastinate pgqueuer oban chancy" ;;
redis) peers="arq saq rq" ;;
processes) peers="pgqueuer" ;; # ours with --processes 1, 2, ... beside PgQueuer (bench/processes.py)
*)
    echo "usage: bench/run.sh pg|redis|processes [--dry-run] [--runs N] [--systems a,b] [--variants s:v,...] [--help]" >&2
    exit 2
    ;;
esac

# The interpreter a peer's virtualenv is built with: ours, but for oban-py, which needs 3.12 or
# newer (BENCH_PY312 names one; else the first python3.1x on PATH, or pyenv's, that runs).
newer_python() {
    local candidate version
    for candidate in ${BENCH_PY312:-} python3.14 python3.13 python3.12; do
        if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    if command -v pyenv >/dev/null; then
        version=$(pyenv versions --bare | grep -E '^3\.1[2-9]' | tail -1)
        if [ -n "$version" ]; then
            PYENV_VERSION="$version" pyenv which python
            return
        fi
    fi
    echo "bench: oban-py needs Python 3.12 or newer: set BENCH_PY312 to one" >&2
    exit 2
}

for peer in $peers; do
    venv="$here/.venvs/$peer"
    builder="$python"
    if [ "$peer" = oban ]; then
        builder=$(newer_python)
    fi
    wanted="$here/requirements/$peer.txt"
    # The copy of the requirements inside the venv says what it was built from: rebuild on change.
    if ! cmp -s "$wanted" "$venv/built-from.txt"; then
        echo "bench: building $venv" >&2
        rm -rf "$venv"
        "$builder" -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$wanted"
        cp "$wanted" "$venv/built-from.txt"
    fi
done

cd "$root"
if [ "$1" = processes ]; then
    shift
    exec "$python" -m bench.processes "$@"
fi
exec "$python" -m bench.harness "$@"
