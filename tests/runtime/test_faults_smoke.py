"""``benchmarks/faults.py`` at one copy of each local task: clean, then under model faults and a
Chromium kill, every task passes both times, none is lost, no canary leaks, and its exit status
says so (no timing is checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "faults.py"


def test_the_fault_suite_passes_every_task_under_faults(tmp_path: Path) -> None:
    args = ["--copies", "1", "--concurrency", "3", "--seed", "1", "--output", str(tmp_path), "--json"]
    proc = subprocess.run([sys.executable, str(BENCHMARK), *args], capture_output=True, timeout=600, text=True)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    report = json.loads(proc.stdout[proc.stdout.index("{") :])
    clean, faults = report["clean"], report["faults"]
    assert clean["passed"] == clean["tasks"] > 0 and faults["passed"] == faults["tasks"], faults["failed"]
    assert clean["lost"] == faults["lost"] == 0 and report["secrets_leaked"] == 0
    assert faults["chromium_killed"] and sum(faults["faults"].values()) > 0  # the faults did happen
