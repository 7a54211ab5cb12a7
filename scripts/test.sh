#!/usr/bin/env bash
# Set up with the test extras (scripts/setup.sh test) and run the whole test suite: lint, types, tests
# (the tests in two processes), as CI does. `--fast` first leaves the slow tier out (-m "not slow": the
# tests of tests/slow.txt and those marked slow; every package keeps its other tests): a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
TIER=()
if [ "${1:-}" = --fast ]; then
  shift
  TIER=(-m "not slow")
fi
./scripts/setup.sh test
VENV=${VENV:-.venv}
"$VENV/bin/ruff" check webagent tests benchmarks
"$VENV/bin/ruff" format --check webagent tests benchmarks
"$VENV/bin/mypy"
# Two pytest-xdist workers (10 min here against 17 in one); WEBAGENT_TEST_WORKERS=0 runs them in one
# process, and a later -n in the arguments wins.
"$VENV/bin/pytest" -n "${WEBAGENT_TEST_WORKERS:-2}" "${TIER[@]}" "$@"
