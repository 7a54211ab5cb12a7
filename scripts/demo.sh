#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the demo: a real task on a bundled local site, with the offline
# model server standing in for the VLMs. Prints each step and writes runs/demo-catalog-price/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec "${VENV:-.venv}/bin/webagent" demo "$@"
