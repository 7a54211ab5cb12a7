#!/usr/bin/env bash
# Set up the runtime only (scripts/setup.sh runtime: no test extras, no Ray) and run the demo: a real
# task on a bundled local site, with the offline model server standing in for the VLMs. Prints each
# step and writes runs/demo-catalog-price/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh runtime
exec "${VENV:-.venv}/bin/webagent" demo "$@"
