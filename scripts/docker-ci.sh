#!/usr/bin/env bash
# CI stage: build the Docker image (docker/Dockerfile) and smoke-test it end to end.
#
#   1. build the image with podman-ci.sh (debootstrapped debian:bookworm-slim base, no registry,
#      no dockerd; installs podman on first use), or with `docker` where podman-ci.sh is missing;
#   2. start the offline model server (`webagent fake-server`) and the local task sites
#      (`webagent sites`) on the host, on 127.0.0.1, on free ports;
#   3. run the container as CI pipelines do (--network=host --init --shm-size=1g, the suite mounted
#      read-only, an output dir mounted) and check exit codes and output files:
#        docker/ci/smoke.yaml   every check passes  -> exit 0, JUnit without failures, result.json per check
#        docker/ci/failing.yaml one check fails     -> exit 1, JUnit with that failure and its trace
#        a usage error                              -> exit 2
#
# It stops only what it started (the two servers by PID, its containers by name) on any exit.
# Environment: IMAGE (default localhost/webagent:ci), PYTHON (host Python with webagent installed;
# default .venv/bin/python, created by scripts/setup.sh runtime when missing), PODMAN_CI (default
# ../shared/tools/podman-ci.sh), PODMAN_WORK (podman state, default /tmp/podman-ci),
# DOCKER_CI_OUT (outputs, default runs/docker-ci; kept for inspection / CI artifacts).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

IMAGE=${IMAGE:-localhost/webagent:ci}
PODMAN_CI=${PODMAN_CI:-$ROOT/../shared/tools/podman-ci.sh}
PODMAN_WORK=${PODMAN_WORK:-/tmp/podman-ci}
OUT=${DOCKER_CI_OUT:-$ROOT/runs/docker-ci}
SUITES=$ROOT/docker/ci
MODEL_SCRIPT=$ROOT/webagent/testing/data/scripts/local.json

log() { echo "docker-ci: $*" >&2; }
die() {
  log "FAILED: $*"
  exit 1
}

# --- cleanup: only what this script started ---------------------------------------------------
PIDS=()
CONTAINERS=()
CLIENT= # the running `docker/podman run`, if any
ENGINE=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for name in "${CONTAINERS[@]}"; do
    "$ENGINE" rm -f "$name" >/dev/null 2>&1 || true
  done
  for pid in $CLIENT "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. build ---------------------------------------------------------------------------------
t0=$SECONDS
if [ -x "$PODMAN_CI" ]; then
  export WORK=$PODMAN_WORK
  PROJECT_DIR=$ROOT "$PODMAN_CI" base
  t_base=$SECONDS
  PROJECT_DIR=$ROOT IMAGE=$IMAGE "$PODMAN_CI" build
  # shellcheck disable=SC1091
  source "$PODMAN_WORK/env.sh"
  ENGINE=podman
elif command -v docker >/dev/null; then
  log "no $PODMAN_CI; building with docker"
  t_base=$SECONDS
  docker build -f docker/Dockerfile -t "$IMAGE" .
  ENGINE=docker
else
  die "neither $PODMAN_CI nor docker is available (set PODMAN_CI to podman-ci.sh)"
fi
build_s=$((SECONDS - t_base))
base_s=$((t_base - t0))
size=$("$ENGINE" image inspect --format '{{.Size}}' "$IMAGE")
log "image $IMAGE: $((size / 1000000)) MB; base ${base_s}s, build ${build_s}s"

user=$("$ENGINE" image inspect --format '{{.Config.User}}' "$IMAGE")
uid=$("$ENGINE" run --rm --entrypoint id "$IMAGE" -u)
[ -n "$user" ] && [ "$uid" != 0 ] || die "the image must run as a non-root user (USER '$user', uid $uid)"

# --- 2. host servers: model server + task sites, on free ports ---------------------------------
PY=${PYTHON:-$ROOT/${VENV:-.venv}/bin/python}
if [ ! -x "$PY" ]; then
  log "no $PY; running scripts/setup.sh runtime"
  ./scripts/setup.sh runtime
  PY=$ROOT/${VENV:-.venv}/bin/python
fi
rm -rf "$OUT"
mkdir -p "$OUT"

start_server() { # start_server NAME -- command...: starts it, waits for its URL, sets URL
  local name=$1 logfile=$OUT/$1.log pid
  shift 2
  PYTHONUNBUFFERED=1 "$@" >"$logfile" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  URL=
  for _ in $(seq 300); do
    URL=$(grep -o -m1 'http://127\.0\.0\.1:[0-9]*' "$logfile" || true)
    [ -n "$URL" ] && return 0
    kill -0 "$pid" 2>/dev/null || die "$name exited: $(tail -5 "$logfile")"
    sleep 0.1
  done
  die "$name did not report its URL within 30 s: $(tail -5 "$logfile")"
}
start_server model -- "$PY" -m webagent fake-server --script "$MODEL_SCRIPT"
MODEL=$URL
start_server sites -- "$PY" -m webagent sites
SITES=$URL
log "model server $MODEL (pid ${PIDS[0]}), task sites $SITES (pid ${PIDS[1]})"

# --- 3. the container, as a CI job runs it -------------------------------------------------------
# As root, the image's own user writes to the mounted dir (made writable); otherwise run as the
# caller so that the caller can read what the container wrote (see docker/README.md).
USER_ARGS=()
[ "$(id -u)" = 0 ] || USER_ARGS=(--user "$(id -u):$(id -g)")

RC=
run_container() { # run_container LABEL DIR ARGS...: runs the image with DIR mounted at /out, sets RC
  local label=$1 dir=$2 name="webagent-ci-$$-$1"
  shift 2
  mkdir -p "$dir"
  chmod 0777 "$dir"
  CONTAINERS+=("$name")
  # In the background so that a signal interrupts the wait and the trap removes the container.
  "$ENGINE" run --rm --name "$name" --network=host --init --shm-size=1g "${USER_ARGS[@]}" \
    -e WEBAGENT_POLICY_BASE_URL="$MODEL/policy/v1" -e WEBAGENT_POLICY_MODEL=fake-policy \
    -e WEBAGENT_LOCALIZER_BASE_URL="$MODEL/localizer/v1" -e WEBAGENT_LOCALIZER_MODEL=fake-Holo1.5 \
    -e WEBAGENT_VALIDATOR_BASE_URL="$MODEL/validator/v1" -e WEBAGENT_VALIDATOR_MODEL=fake-validator \
    -e SITE_URL="$SITES" \
    -v "$SUITES:/suite:ro" -v "$dir:/out" \
    "$IMAGE" "$@" &
  CLIENT=$!
  set +e
  wait "$CLIENT"
  RC=$?
  set -e
  CLIENT=
  log "$label: exit code $RC"
}

check_outputs() { # check_outputs DIR SUITE PASSED FAILED: the files a CI job archives
  "$PY" - "$@" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path

out, suite, passed, failed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
checks = passed + failed
def need(ok, what):
    if not ok:
        sys.exit(f"docker-ci: FAILED: {out}: {what}")

ts = ET.parse(out / "junit.xml").getroot().find("testsuite")
need(ts is not None, "junit.xml has no <testsuite>")
counts = tuple(int(ts.get(k, "-1")) for k in ("tests", "failures", "errors"))
need(counts == (checks, failed, 0), f"junit.xml tests/failures/errors = {counts}, expected {(checks, failed, 0)}")
summary = json.loads((out / "results" / "suite.json").read_text())
need((summary["checks"], summary["passed"], summary["failed"]) == (checks, passed, failed),
     f"suite.json checks/passed/failed = {summary['checks']}/{summary['passed']}/{summary['failed']}")
need(summary["suite"] == suite, f"suite.json names suite {summary['suite']!r}, expected {suite!r}")
lines = (out / "results" / "results.jsonl").read_text().splitlines()
need(len(lines) == checks, f"results.jsonl has {len(lines)} lines, expected {checks}")
need((out / "results" / "report.html").stat().st_size > 1000, "report.html is missing or empty")
results = [json.loads(p.read_text()) for p in sorted((out / "results" / "runs").glob("*/attempt-*/result.json"))]
need(sum(r["success"] for r in results) == passed, f"{len(results)} result.json files, not {passed} successes")
traces = list((out / "results" / "runs").glob("*/attempt-*/trace.zip"))
need(len(traces) == failed, f"{len(traces)} Playwright traces, expected {failed} (one per failed check)")
print(f"docker-ci: {out.name}: {passed} passed, {failed} failed, as expected; junit.xml, suite.json, "
      f"results.jsonl, report.html, {len(results)} result.json, {len(traces)} trace(s) checked")
EOF
}

t_run=$SECONDS
# Every check passes -> exit 0.
run_container smoke "$OUT/smoke" \
  test /suite/smoke.yaml --output /out/results --junit /out/junit.xml # SUITE-COMMAND
[ "$RC" = 0 ] || die "smoke suite: exit code $RC, expected 0 (see $OUT/smoke)"
check_outputs "$OUT/smoke" "docker smoke" 3 0
smoke_s=$((SECONDS - t_run))

# One check fails -> exit 1, with the failure in JUnit and a trace kept.
run_container failing "$OUT/failing" test /suite/failing.yaml --output /out/results --junit /out/junit.xml -q
[ "$RC" = 1 ] || die "failing suite: exit code $RC, expected 1 (see $OUT/failing)"
check_outputs "$OUT/failing" "docker failing" 1 1

# A usage error -> exit 2 and a one-line message.
run_container usage "$OUT/usage" test /suite/no-such-suite.yaml --output /out/results 2>"$OUT/usage.err"
[ "$RC" = 2 ] || die "usage error: exit code $RC, expected 2: $(cat "$OUT/usage.err")"
grep -q "no-such-suite.yaml does not exist" "$OUT/usage.err" || die "usage error message: $(cat "$OUT/usage.err")"
log "usage error reported as: $(grep -v '^docker-ci:' "$OUT/usage.err")"

run_s=$((SECONDS - t_run))
log "OK: image $((size / 1000000)) MB; base ${base_s}s, build ${build_s}s, smoke suite ${smoke_s}s, all runs ${run_s}s"
