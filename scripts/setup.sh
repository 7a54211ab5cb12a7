#!/usr/bin/env bash
# Set up everything webagent needs on a fresh Debian/Ubuntu machine (idempotent):
#   Chromium + fonts (Debian packages, when /usr/bin/chromium is missing), a virtualenv in .venv,
#   and the package with its test extras.
# Without root and without a system Chromium it falls back to Playwright's bundled browser.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ ! -x /usr/bin/chromium ] && [ -z "${WEBAGENT_SKIP_APT:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian's chromium and fonts" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium fonts-liberation fonts-dejavu-core libatomic1 >/dev/null
  elif command -v sudo >/dev/null && command -v apt-get >/dev/null && sudo -n true 2>/dev/null; then
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium fonts-liberation fonts-dejavu-core libatomic1 >/dev/null
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'

if [ ! -x /usr/bin/chromium ]; then
  echo "setup: no system Chromium; installing Playwright's bundled Chromium" >&2
  "$VENV/bin/python" -m playwright install chromium
fi
