#!/usr/bin/env bash
# Creates a venv and installs the project into it (editable) with the given extras, once per
# change of pyproject.toml: the stamp file holds the hash of what was installed.
#
# VENV (default .venv) names the venv. RESOLUTION=lowest-direct installs the LOWEST version
# of every dependency pyproject.toml names (uv's lowest-direct resolution; uv is installed
# into that venv for it), so `make test-lowest` proves the lower bounds we publish; otherwise
# pip installs the newest releases, as a user's `pip install` would.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
venv="${VENV:-.venv}"
resolution="${RESOLUTION:-highest}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
stamp="$venv/.installed${extras:+-$extras}-$resolution"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
    if [ "$resolution" = "highest" ]; then
        "$venv/bin/python" -m pip install -q -e ".${extras:+[$extras]}"
    else
        "$venv/bin/python" -m pip install -q uv
        "$venv/bin/uv" pip install -q --python "$venv/bin/python" --reinstall \
            --resolution "$resolution" -e ".${extras:+[$extras]}"
    fi
    echo "$want" > "$stamp"
fi
