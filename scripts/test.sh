#!/usr/bin/env bash
# Set up with the test extras (scripts/setup.sh test) and run the whole test suite: lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh test
VENV=${VENV:-.venv}
"$VENV/bin/ruff" check webagent tests benchmarks
"$VENV/bin/ruff" format --check webagent tests benchmarks
"$VENV/bin/mypy"
"$VENV/bin/pytest" "$@"
