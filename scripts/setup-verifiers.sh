#!/usr/bin/env bash
# A virtualenv for verifiers beside the project's (idempotent): verifiers pins an mcp that the test
# extras cannot share (0.3: mcp<2), so tests/env/test_vf.py runs verifiers' own `vf-eval` from here.
#
# The venv holds webagent's dependencies and the rl extra's verifiers, gymnasium and miniwob, not
# webagent itself: a checkout puts itself first on PYTHONPATH when it runs vf-eval. So one venv serves
# every checkout and worktree, cached by the hash of what it installs (the Python version, the
# project's dependencies and the specs below): ${WEBAGENT_CACHE_DIR:-~/.cache/webagent}/venv-vf-HASH.
# A change of requirements makes a new venv; an interrupted build is built again. .venv-vf links to it.
# Prints the venv's path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
CACHE=${WEBAGENT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/webagent}
EXTRA=("verifiers>=0.3.1,<0.4" "gymnasium>=1.0" "miniwob>=1.1")

mapfile -t DEPS < <("$PYTHON" - <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    for dep in tomllib.load(f)["project"]["dependencies"]:
        print(dep)
EOF
)
HASH=$({
  "$PYTHON" -c 'import sys; print(sys.version)'
  printf '%s\n' "${DEPS[@]}" "${EXTRA[@]}"
} | sha256sum | cut -c1-16)
VENV=${VF_VENV:-$CACHE/venv-vf-$HASH}

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9  # two checkouts building the same venv at once: the second waits, then finds it made
if [ ! -e "$VENV/.complete" ]; then
  echo "setup-verifiers: creating $VENV" >&2
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${DEPS[@]}" "${EXTRA[@]}"
  touch "$VENV/.complete"
fi
PYTHONPATH=$PWD "$VENV/bin/python" -c "import verifiers, webagent.env.vf" >/dev/null
if [ -z "${VF_VENV:-}" ]; then
  ln -sfn "$VENV" .venv-vf
fi
echo "$VENV"
