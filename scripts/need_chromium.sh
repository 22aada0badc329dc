#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's Chromium through Playwright (never a browser
# Playwright downloads). Installs it when missing and this user may; else fails naming it.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing Debian's chromium for the dashboard's browser tests"
    apt-get install -y -q chromium >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
    command -v chromium >/dev/null 2>&1 && exit 0
fi
echo "the dashboard's browser tests need Chromium: install Debian's package 'chromium'" \
    "(sudo apt-get install chromium), or put a chromium on PATH" >&2
exit 1
