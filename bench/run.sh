#!/usr/bin/env bash
# One command per backend: bench/run.sh pg|redis [harness options, see --help].
# Builds each peer's own virtualenv under bench/.venvs/<peer> from bench/requirements/<peer>.txt
# (so their pins never meet ours), then runs the harness from our .venv.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
python="$root/.venv/bin/python"

case "${1:-}" in
pg) peers="procrastinate pgqueuer" ;;
redis) peers="arq saq rq" ;;
processes) peers="pgqueuer" ;; # ours with --processes 1, 2, ... beside PgQueuer (bench/processes.py)
*)
    echo "usage: bench/run.sh pg|redis|processes [--dry-run] [--runs N] [--systems a,b] [--variants s:v,...] [--help]" >&2
    exit 2
    ;;
esac

for peer in $peers; do
    venv="$here/.venvs/$peer"
    wanted="$here/requirements/$peer.txt"
    # The copy of the requirements inside the venv says what it was built from: rebuild on change.
    if ! cmp -s "$wanted" "$venv/built-from.txt"; then
        echo "bench: building $venv" >&2
        rm -rf "$venv"
        "$python" -m venv "$venv"
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
