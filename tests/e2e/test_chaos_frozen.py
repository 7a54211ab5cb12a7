"""Chaos for ``webagent batch`` (real CLI, real Chromium, the offline model server): the browser stops
answering mid-batch (its main process SIGSTOP'd: frozen, alive, connected), for a while or for good.

Its commands then pass their deadlines (short ones here, from a config file), and nothing says the
machine is merely slow (the frozen browser answers nothing, not even a probe), so the deadlines stand
and the run ends with an infrastructure error at once. Every such run is re-run
on a fresh session (a new browser once the frozen one is retired as stuck), the tasks succeed, and the
re-runs are counted apart, each with its cause. Only processes below the batch's own are signalled.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..procs import alive
from .test_batch_cli import wait_until
from .test_chaos_batch import ANSWER, Batch, chromium_mains, every_task_stepped, long_tasks, one_line_each, paced

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["paced"]  # the fixture, from test_chaos_batch

#: Deadlines short enough for a frozen browser to be given up on within seconds (each is judged on
#: its own browser's answers: none come, however busy the test machine is).
SHORT = """
[browser]
command_timeout_s = 3.0
capture_timeout_s = 3.0
navigation_timeout_s = 5.0
"""


def frozen_batch(
    server: FakeModelServer, site: SiteServer, tmp_path: Path, *, frozen_s: float | None
) -> tuple[int, dict[str, dict[str, Any]], dict[str, Any], str]:
    """Three tasks; once each has taken a step, the browser is frozen for ``frozen_s`` (None: for good)."""
    n = 3
    tasks, out = long_tasks(site, tmp_path / "t.jsonl", n), tmp_path / "b"
    config = tmp_path / "webagent.toml"
    config.write_text(SHORT)
    extra = ["--concurrency", str(n), "--config", str(config)]
    with Batch(tasks, out, server, tmp_path / "batch.log", *extra) as batch:
        wait_until(lambda: every_task_stepped(out, n), 60, "a step of every task", batch.proc)
        (main,) = chromium_mains(batch.proc.pid)
        batch.remember()
        os.kill(main, signal.SIGSTOP)
        try:
            if frozen_s is not None:
                time.sleep(frozen_s)  # the injected fault itself: how long the browser stays frozen
                os.kill(main, signal.SIGCONT)
            returncode = batch.wait(240)
        finally:
            if alive(main):
                os.kill(main, signal.SIGCONT if frozen_s is not None else signal.SIGKILL)
    output = batch.log.read_text()
    summary = json.loads((out / "summary.json").read_text())
    return returncode, one_line_each(out, n), summary, output


def infra_reruns(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [x for a in row["attempt_records"] for x in a["reruns"] if x["reason"] == "infrastructure"]


def test_a_browser_frozen_for_good_has_its_sessions_rerun_elsewhere_and_they_succeed(
    paced: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    returncode, rows, summary, output = frozen_batch(paced, site, tmp_path, frozen_s=None)
    assert returncode == 0, output[-3000:]
    assert "Traceback" not in output
    for task_id, row in rows.items():
        assert row["success"] and row["answer"] == ANSWER, (task_id, row["message"])
        assert not row["infrastructure"] and row["retried"]
        reruns = infra_reruns(row)
        assert reruns and row["infra_reruns"] == len(reruns), row["attempt_records"]
        assert all("answer" in x["message"] for x in reruns), reruns  # "answers nothing", "no answer ... within"
    assert summary["errors"] == 0 and summary["infra_reruns"] >= 3
    assert summary["run"]["infra_rerun_causes"], summary["run"]
    assert summary["run"]["browser_commands"]["expired"] > 0  # the frozen browser's deadlines stood


def test_a_browser_frozen_for_a_while_ends_no_task_in_error(
    paced: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    returncode, rows, summary, output = frozen_batch(paced, site, tmp_path, frozen_s=12.0)
    assert returncode == 0, output[-3000:]
    assert all(r["success"] and r["answer"] == ANSWER for r in rows.values()), rows
    assert summary["errors"] == 0
    # Frozen past the deadlines of a screenshot, its retakes and a reopened page: re-run, each with its cause.
    assert summary["infra_reruns"] >= 1 and summary["run"]["infra_rerun_causes"], summary
