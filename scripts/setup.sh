#!/usr/bin/env bash
# Set up everything webagent needs on a fresh Debian/Ubuntu machine (idempotent):
#   Chromium + fonts and its headless shell (Debian packages, when missing), a virtualenv in .venv,
#   and the package (editable), in one of two modes:
#     scripts/setup.sh runtime   the package and its runtime dependencies (what scripts/demo.sh needs)
#     scripts/setup.sh [test]    those and the test extras: pytest, ruff, mypy, Ray, the MCP SDK...
#                                (what scripts/test.sh needs; the default)
# Without root and without a system Chromium it falls back to Playwright's bundled browser.
# SETUP_DRY_RUN=1 prints what pip would be asked to install, and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

MODE=${1:-test}
case "$MODE" in
  runtime) SPEC=. ;;
  test) SPEC=.[test] ;;
  *)
    echo "usage: scripts/setup.sh [runtime|test]  (got '$MODE')" >&2
    exit 2
    ;;
esac
if [ -n "${SETUP_DRY_RUN:-}" ]; then
  echo "pip install -e $SPEC"
  exit 0
fi

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
# Chromium's headless shell, which unguarded headless browsers prefer (half the CPU: docs/benchmarks.md,
# "What a page costs, by binary: the headless shell"); best effort: without it they run on the full Chromium.
if [ -x /usr/bin/chromium ] && [ ! -x /usr/lib/chromium/chromium-headless-shell ] && [ -z "${WEBAGENT_SKIP_APT:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian's chromium-headless-shell" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium-headless-shell >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends chromium-headless-shell >/dev/null 2>&1; } \
      || echo "setup: no chromium-headless-shell; headless browsers use the full Chromium" >&2
  elif command -v sudo >/dev/null && command -v apt-get >/dev/null && sudo -n true 2>/dev/null; then
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium-headless-shell \
      >/dev/null 2>&1 || echo "setup: no chromium-headless-shell; headless browsers use the full Chromium" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
echo "setup: installing the package ($MODE: pip install -e '$SPEC')" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$SPEC"

if [ ! -x /usr/bin/chromium ]; then
  echo "setup: no system Chromium; installing Playwright's bundled Chromium" >&2
  "$VENV/bin/python" -m playwright install chromium
fi
