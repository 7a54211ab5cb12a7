"""A browser that fails before a run's first step (issue 43), with a fake agent (no browser): a renderer
that died while the session was set up, a set-up deadline, a browser gone while the session opened.
Each is the infrastructure's: re-run in the same attempt (pass@k attempts not consumed), counted
apart (``setup_crash``), and only past its bound the task's line says ``infrastructure``. A crash
after the first step is a crash too, never a plain error. The real thing, in Chromium:
``test_setup_crashes_chromium.py``."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from rich.console import Console

from webagent.batch import SETUP_RERUNS
from webagent.batch.cli import BatchProgress
from webagent.batch.stats import infra_cause
from webagent.batch.summary import print_summary, summarize

from .test_reruns import CRASHED_AGAIN, SETUP_CRASH, SETUP_TIMEOUT, by_id, fake_runner
from .test_runner import make_config_stub


async def test_a_browser_failure_before_the_first_step_is_rerun_and_counted_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    plans = {
        "raised": ["setup_crash", "ok"],  # the session's renderer died as the guard was installed
        "result": ["setup_crash_result", "ok"],  # the same, as RunStream ends it (a result)
        "deadline": ["infra_setup", "ok"],  # a set-up command past its deadline
        "at-open": ["crash_at_open", "ok"],  # the browser died as the session opened (no session)
        "fine": ["ok"],
    }
    runner, agent = fake_runner(monkeypatch, out, plans)
    stats = await asyncio.wait_for(runner.run(), 30)
    rows = by_id(out)
    assert all(r.success and r.stop_reason == "answered" and not r.infrastructure for r in rows.values()), rows
    for task_id in ("raised", "result", "deadline", "at-open"):
        r = rows[task_id]
        assert r.retried and r.attempts == 1 and r.infra_reruns == 0, r
        (record,) = r.attempt_records
        assert record.attempt == 1 and record.output_dir == f"runs/{task_id}/attempt-1"
        assert [(x.reason, x.steps) for x in record.reruns] == [("setup_crash", 0)], record.reruns
        assert record.steps == 2  # the re-run's own steps: none spent by the failed set-up
    assert not rows["fine"].retried
    assert (stats.setup_crashes, stats.infra_reruns, stats.retried, stats.errors) == (4, 0, 4, 0)
    assert stats.setup_causes[infra_cause(SETUP_CRASH)] == 2 and stats.setup_causes[infra_cause(SETUP_TIMEOUT)] == 1
    summary = summarize(list(rows.values()), stats, make_config_stub(), attempts=1)
    assert summary.setup_crash_reruns == 4 and summary.infra_reruns == 0 and summary.errors == 0
    assert summary.retried_after_crash == 0  # a crash in set-up is counted apart from one mid-run
    assert summary.run.setup_crash_causes[infra_cause(SETUP_CRASH)] == 2
    assert "4 re-run after a crash in set-up" in BatchProgress(quiet=True).line(stats)
    printed = io.StringIO()
    print_summary(summary, Console(file=printed, width=200))
    assert "re-run after a crash in set-up" in printed.getvalue()
    assert agent.opened == agent.closed == 8  # every session that opened was closed (at-open opened none)


async def test_set_up_crash_reruns_are_bounded_then_the_line_names_the_infrastructure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    runner, agent = fake_runner(monkeypatch, out, {"k": ["setup_crash", "setup_crash_result", "setup_crash", "ok"]})
    stats = await asyncio.wait_for(runner.run(), 30)
    (r,) = by_id(out).values()
    assert agent.played["k"] == ["setup_crash", "setup_crash_result", "setup_crash"]  # 1 run + SETUP_RERUNS
    assert SETUP_RERUNS == 2
    assert not r.success and r.stop_reason == "error" and r.infrastructure and r.attempt_records[0].infrastructure
    assert r.message.startswith("infrastructure failure, re-run 2 times: "), r.message
    summary = summarize([r], stats, make_config_stub(), attempts=1)
    assert summary.infrastructure_errors == 1 and summary.setup_crash_reruns == 2


async def test_a_set_up_crash_keeps_its_attempt_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pass@2: each attempt's set-up crash is re-run within that attempt; the task's own failure in
    the first attempt is what the second attempt is for."""
    out = tmp_path / "b"
    plans = {"k": ["setup_crash_result", "fail", "setup_crash", "ok"]}
    runner, _ = fake_runner(monkeypatch, out, plans, attempts=2)
    await asyncio.wait_for(runner.run(), 30)
    (r,) = by_id(out).values()
    assert r.success and r.attempts == 2
    first, second = r.attempt_records
    assert (first.attempt, second.attempt) == (1, 2)
    assert [x.reason for x in first.reruns] == ["setup_crash"] and first.stop_reason == "max_steps"
    assert not first.infrastructure  # the task's own failure stands as such
    assert [x.reason for x in second.reruns] == ["setup_crash"] and second.success
    assert second.output_dir == "runs/k/attempt-2"


async def test_a_crash_after_the_first_step_is_rerun_not_a_plain_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page whose renderer kept dying (its browser alive) ends the run with a crash: re-run."""
    out = tmp_path / "b"
    runner, _ = fake_runner(monkeypatch, out, {"k": ["crash_later_result", "ok"]})
    stats = await asyncio.wait_for(runner.run(), 30)
    (r,) = by_id(out).values()
    assert r.success and r.retried
    (record,) = r.attempt_records
    assert [(x.reason, x.message, x.steps) for x in record.reruns] == [("browser_crash", CRASHED_AGAIN, 1)]
    assert stats.setup_crashes == 0
