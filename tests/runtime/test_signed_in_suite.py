"""The floor of signed-in sessions: a suite of 20 checks on a site behind a login (password + 2FA) makes
no sign-in steps and at least 30 % fewer model calls when it runs with the saved state
(``benchmarks/signed_in.py``, run here; its figures are printed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "signed_in.py"


def test_a_saved_state_spares_the_sign_in_of_every_check() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARK), "--checks", "20", "--concurrency", "4", "--json"],
        capture_output=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    figures = json.loads(proc.stdout.splitlines()[-1])
    print(json.dumps(figures, indent=1))  # the figures, with -s
    out, signed_in = figures["signed_out"], figures["signed_in"]
    assert out["passed"] == out["checks"] == 20 and signed_in["passed"] == 20
    assert out["sign_in_requests"] >= 20  # every check signed in the first time...
    assert signed_in["sign_in_requests"] == 0  # ... and none the second
    assert signed_in["calls"]["localizer"] == 0  # no field was typed into: no sign-in step
    assert figures["calls_spared"] >= 0.30
    assert figures["state_mode"] == "0o600"
