"""Chaos for ``webagent batch`` (real CLI, real Chromium, the offline model server): the browser stops
answering mid-batch (its main process SIGSTOP'd: frozen, alive, connected), for a while or for good.

Its commands then pass their deadlines (short ones here, from a config file), and nothing says the
machine is merely slow (the frozen browser answers nothing, not even a probe), so the deadlines stand
and the run ends with an infrastructure error at once. Every such run is re-run
on a fresh session (a new browser once the frozen one is retired as stuck), the tasks succeed, and the
re-runs are counted apart, each with its cause. Only processes below the batch's own are signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from webagent.batch.summary import BatchSummary
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
) -> tuple[int, dict[str, dict[str, Any]], BatchSummary, str, bool]:
    """Three tasks; once each has taken a step, the browser is frozen for ``frozen_s`` (None: for good).
    Last: whether the frozen browser's main process was still there when the batch had ended."""
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
                with contextlib.suppress(ProcessLookupError):  # the batch ended it first
                    os.kill(main, signal.SIGCONT)
            returncode = batch.wait(240)
            left = alive(main)
        finally:
            if alive(main):
                os.kill(main, signal.SIGCONT if frozen_s is not None else signal.SIGKILL)
    output = batch.log.read_text()
    summary = BatchSummary.model_validate_json((out / "summary.json").read_text())
    return returncode, one_line_each(out, n), summary, output, left


def reruns(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [x for a in row["attempt_records"] for x in a["reruns"]]


def test_a_browser_frozen_for_good_has_its_sessions_rerun_elsewhere_and_they_succeed(
    paced: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    returncode, rows, summary, output, left = frozen_batch(paced, site, tmp_path, frozen_s=None)
    assert returncode == 0, output[-3000:]
    assert "Traceback" not in output
    # The first session whose command went unanswered probed the browser, got no answer either, and the
    # browser was killed: the other sessions on it ended at once, as after a crash, not each on its deadlines.
    assert not left and "browser_killed_frozen" in output, output[-3000:]
    for task_id, row in rows.items():
        assert row["success"] and row["answer"] == ANSWER, (task_id, row["message"])
        assert not row["infrastructure"] and row["retried"]
        assert {x["reason"] for x in reruns(row)} <= {"infrastructure", "browser_crash"}, reruns(row)
        assert row["infra_reruns"] == sum(x["reason"] == "infrastructure" for x in reruns(row))
    infra = [x for row in rows.values() for x in reruns(row) if x["reason"] == "infrastructure"]
    assert infra and all("answers nothing" in x["message"] for x in infra), infra
    assert summary.errors == 0 and summary.infra_reruns == len(infra)
    assert summary.run.infra_rerun_causes, summary.run
    assert summary.run.browser_commands["expired"] > 0  # the frozen browser's deadlines stood


def test_a_browser_frozen_for_a_while_ends_no_task_in_error(
    paced: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    returncode, rows, summary, output, _ = frozen_batch(paced, site, tmp_path, frozen_s=12.0)
    assert returncode == 0, output[-3000:]
    assert all(r["success"] and r["answer"] == ANSWER for r in rows.values()), rows
    assert summary.errors == 0
    # Frozen past a deadline and the probe: re-run, each with its cause.
    assert summary.infra_reruns >= 1 and summary.run.infra_rerun_causes, summary
