"""Infrastructure failures re-run, with a fake agent (no browser): a run that ended because the browser
did not answer in time is re-run on a fresh session, a bounded number of times, counted apart from the
task's own failures; only then does the task end with the infrastructure's error, named as such."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from webagent.batch import INFRA_RERUNS
from webagent.batch.stats import infra_cause
from webagent.batch.summary import summarize

from .test_reruns import NO_ANSWER, NO_SCREENSHOT, by_id, fake_runner
from .test_runner import make_config_stub


async def test_an_infrastructure_error_is_rerun_on_a_fresh_session_and_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    plans = {"later": ["infra_later", "ok"], "shot": ["infra_result", "infra_later", "ok"], "fine": ["ok"]}
    runner, agent = fake_runner(monkeypatch, out, plans)
    stats = await asyncio.wait_for(runner.run(), 30)
    rows = by_id(out)
    assert all(r.success and r.stop_reason == "answered" and not r.infrastructure for r in rows.values()), rows
    assert agent.played["shot"] == ["infra_result", "infra_later", "ok"]
    (record,) = rows["shot"].attempt_records
    assert [rr.reason for rr in record.reruns] == ["infrastructure", "infrastructure"]
    assert [rr.message for rr in record.reruns] == [NO_SCREENSHOT, NO_ANSWER]
    assert record.reruns[0].steps == 1 and record.reruns[1].steps == 1
    assert record.retried and not record.infrastructure
    lines = (out / record.output_dir / "trajectory.jsonl").read_text().splitlines()
    assert [json.loads(line)["plan"] for line in lines] == ["ok", "ok"]  # a fresh directory for the re-run
    assert rows["shot"].infra_reruns == 2 and rows["later"].infra_reruns == 1 and rows["fine"].infra_reruns == 0
    assert rows["shot"].retried and not rows["fine"].retried
    assert (stats.infra_reruns, stats.retried, stats.errors, stats.succeeded) == (3, 2, 0, 3)
    assert stats.infra_causes == {infra_cause(NO_ANSWER): 2, infra_cause(NO_SCREENSHOT): 1}
    assert agent.opened == agent.closed == 6  # each run on a session of its own, each closed


async def test_infrastructure_reruns_are_bounded_then_the_task_ends_naming_the_infrastructure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    plans = {"stuck": ["infra_result", "infra_later", "infra_result", "ok"], "task": ["error"]}
    runner, agent = fake_runner(monkeypatch, out, plans)
    stats = await asyncio.wait_for(runner.run(), 30)
    rows = by_id(out)
    stuck = rows["stuck"]
    assert agent.played["stuck"] == ["infra_result", "infra_later", "infra_result"]  # 1 run + INFRA_RERUNS re-runs
    assert INFRA_RERUNS == 2 and stuck.infra_reruns == INFRA_RERUNS
    assert not stuck.success and stuck.stop_reason == "error" and stuck.infrastructure
    assert stuck.message == f"infrastructure failure, re-run 2 times: {NO_SCREENSHOT}"
    assert stuck.attempt_records[0].infrastructure
    task = rows["task"]  # the task's own failure (a plain BrowserError, its browser alive): not re-run, not infra
    assert task.stop_reason == "error" and not task.infrastructure and task.infra_reruns == 0 and not task.retried
    assert stats.errors == 2 and stats.infra_reruns == 2
    summary = summarize(list(rows.values()), stats, make_config_stub(), attempts=1)
    assert summary.errors == 2 and summary.infrastructure_errors == 1
    assert summary.infra_reruns == 2
    assert summary.run.infra_rerun_causes == {infra_cause(NO_SCREENSHOT): 1, infra_cause(NO_ANSWER): 1}


async def test_infrastructure_and_crash_reruns_are_counted_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    runner, _ = fake_runner(monkeypatch, out, {"both": ["crash", "infra_later", "crash", "infra_result", "ok"]})
    stats = await asyncio.wait_for(runner.run(), 30)
    (r,) = by_id(out).values()
    assert r.success
    reasons = [rr.reason for rr in r.attempt_records[0].reruns]
    assert reasons == ["browser_crash", "infrastructure", "browser_crash", "infrastructure"]
    assert r.infra_reruns == 2 and stats.infra_reruns == 2 and stats.retried == 1


def test_an_infrastructure_cause_is_counted_without_its_urls_and_figures() -> None:
    assert infra_cause(NO_SCREENSHOT) == "the page gives no screenshot (none within N s, twice) at URL"
    assert infra_cause("") == "unknown"
