"""``benchmarks/fleet_throughput.py`` at a tiny N, one round: it runs to the end on the local pool
and on two browser hosts, and its figures parse (their values are not checked: no timing is)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .test_throughput_smoke import table

pytestmark = pytest.mark.e2e

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "fleet_throughput.py"


def test_the_benchmark_runs_both_pools_and_prints_parseable_figures() -> None:
    args = ["--sessions", "4", "--rounds", "1", "--steps", "3", "--latency", "0.1"]
    proc = subprocess.run([sys.executable, str(BENCHMARK), *args], capture_output=True, timeout=600, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)  # the figures, with -s
    runs = table(proc.stdout, "| round | mode |")
    assert [r["mode"] for r in runs] == ["local", "fleet"]
    for run in runs:
        assert run["succeeded"] == "4/4" and run["lines"] == "4" and int(run["steps"]) == 12
        float(run["steps/s"]), float(run["steady steps/s"]), float(run["wall s"])
    assert runs[0]["sessions per host"] == "-"
    hosts = dict(h.split("=") for h in runs[1]["sessions per host"].split())
    assert set(hosts) == {"host-0", "host-1"} and sum(map(int, hosts.values())) == 4
    (ratio,) = table(proc.stdout, "| N | local steps/s | fleet steps/s | fleet/local")
    assert ratio["N"] == "4"
    for name in ("local steps/s", "fleet steps/s", "fleet/local", "steady fleet/local"):
        float(ratio[name])
    assert [float(x) for x in ratio["fleet/local by round"].split()]  # one a round
    assert "load " in proc.stdout  # the load the figures were taken under


def test_a_bad_flag_is_a_one_line_error() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARK), "--sessions", "0"], capture_output=True, timeout=60, text=True
    )
    assert proc.returncode == 2 and "--sessions" in proc.stderr and "Traceback" not in proc.stderr
