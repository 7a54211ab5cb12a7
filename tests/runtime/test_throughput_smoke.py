"""``benchmarks/throughput.py`` at a tiny N, both floors: it runs to the end, every task passes, and
the whole-batch floor's DevTools counts are the ones its loop sends (no timing is checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput.py"


def table(out: str, header: str) -> list[dict[str, str]]:
    """The rows of the markdown table whose header line starts with ``header``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    names = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(names, (c.strip() for c in line.strip("|").split("|")), strict=True)))
    return rows


def test_the_benchmark_runs_both_floors_and_publishes_its_figures() -> None:
    args = ["--sessions", "2", "--steps", "3", "--latency", "0.1", "--token-steps", "0", "--floor", "steady,whole"]
    proc = subprocess.run(
        [sys.executable, str(BENCHMARK), *args, "--price-per-mtok", "2"], capture_output=True, timeout=600, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)  # the figures, with -s
    assert "warm-up: agent, whole-batch floor, steady floor at 2 sessions, 2 steps, not measured" in proc.stdout
    (whole,) = table(proc.stdout, "| N | floor steps/s | agent steps/s | agent/floor | CPU/step floor | CPU/step agent")
    assert whole["N"] == "2"
    # a floor task: attach, its one page read, 3 screenshots, 2 clicks of 3 events, detach: 12 for 3
    # steps; and one command of the browser's launch: 25 for 6 steps
    assert whole["Runtime.evaluate/step floor"] == "0.33" and whole["CDP commands/step floor"] == "4.17"
    assert float(whole["agent"]) >= 1.0  # the agent's page reads: at least settle's one a step
    (batch,) = table(proc.stdout, "| N | tasks/hour")
    assert batch["success rate"] == "100%" and batch["tasks lost"] == "0"
    tokens = int(batch["model tokens/task"])
    assert tokens > 0 and batch["cost/task"] == f"${tokens * 2 / 1e6:.4f}"
    (steady,) = table(proc.stdout, "| N | floor steps/s | agent steps/s | agent/floor | ideal steps/s")
    assert steady["tasks lost"] == "0"


def test_an_unknown_floor_is_a_one_line_error() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARK), "--floor", "whole,fast"], capture_output=True, timeout=60, text=True
    )
    assert proc.returncode == 2 and "--floor: 'whole,fast'" in proc.stderr
    assert "Traceback" not in proc.stderr


#: Runs the benchmark with one side failing as the whole-batch floor did at 500 sessions (a command
#: past its deadline): the fault is injected in the side's own entry point, the rest is the real run.
FAILING = """
import sys
sys.path.insert(0, {benchmarks!r})
import throughput
from webagent.browser.deadline import CommandTimeout

async def fails(*args, **kwargs):
    raise CommandTimeout("Page.captureScreenshot: no answer from the browser within 30 s")

setattr(throughput, {name!r}, fails)
sys.argv = ["throughput.py", *sys.argv[1:]]
throughput.main()
"""


@pytest.mark.parametrize(("failing", "name"), [("whole-batch floor", "whole_floor"), ("agent", "agent")])
def test_a_side_that_fails_prints_its_error_and_the_other_sides_figures_still_print(failing: str, name: str) -> None:
    args = ["--sessions", "2", "--steps", "3", "--latency", "0.1", "--token-steps", "0", "--floor", "whole"]
    script = FAILING.format(benchmarks=str(BENCHMARK.parent), name=name)
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, timeout=600, text=True)
    print(proc.stdout)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    error = f"N=2    {failing} FAILED: CommandTimeout: Page.captureScreenshot: no answer from the browser within 30 s"
    assert proc.stdout.count(error) == 2  # where it failed, and again at the end
    (whole,) = table(proc.stdout, "| N | floor steps/s | agent steps/s | agent/floor | CPU/step floor | CPU/step agent")
    floor_ran, agent_ran = failing == "agent", failing != "agent"
    assert (whole["floor steps/s"] != "failed") == floor_ran and (whole["agent steps/s"] != "failed") == agent_ran
    assert whole["agent/floor"] == "failed"
    other = "whole-batch floor" if failing == "agent" else "agent"
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith(f"N=2    whole batch, {other}: ")]
    assert "success 100%" in line  # the side that ran: its figures, as soon as it ended
    (batch,) = table(proc.stdout, "| N | tasks/hour")
    assert (batch["success rate"] == "100%") == agent_ran and (batch["tasks lost"] == "0") == agent_ran
