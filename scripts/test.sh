#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite: lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
VENV=${VENV:-.venv}
"$VENV/bin/ruff" check webagent tests benchmarks
"$VENV/bin/ruff" format --check webagent tests benchmarks
"$VENV/bin/mypy"
"$VENV/bin/pytest" "$@"
