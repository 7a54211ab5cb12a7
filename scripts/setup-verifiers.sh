#!/usr/bin/env bash
# A virtualenv for verifiers beside the project's (idempotent): verifiers pins an mcp that the test
# extras cannot share (0.3: mcp<2), so tests/env/test_vf.py runs verifiers' own `vf-eval` from here.
# It holds webagent (editable, this checkout) with the rl extra's verifiers, gymnasium and miniwob.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VF_VENV:-.venv-vf}

if [ ! -x "$VENV/bin/vf-eval" ]; then
  echo "setup-verifiers: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e . "verifiers>=0.3.1,<0.4" "gymnasium>=1.0" "miniwob>=1.1"
fi
"$VENV/bin/python" -c "import verifiers, webagent.env.vf" >/dev/null
