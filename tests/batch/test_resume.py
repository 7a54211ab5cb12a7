"""Resume after infrastructure failures, with a fake agent (no browser): re-running the same batch runs
again the tasks whose line ended with the infrastructure's error, keeps the tasks that really failed,
says how many of each it found, and keeps one line per task."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from webagent.batch import ResultsFile
from webagent.batch.cli import BatchProgress
from webagent.batch.results import resume_plan
from webagent.cli.parser import build_parser
from webagent.tasks import TaskSpec

from .test_reruns import by_id, fake_runner

#: A first run: "infra" keeps getting no screenshot (its re-runs spent), "failed" fails on its own,
#: "done" succeeds.
FIRST = {"infra": ["infra_result"] * 3, "failed": ["error"], "done": ["ok"]}


async def first_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "b"
    runner, _ = fake_runner(monkeypatch, out, {k: list(v) for k, v in FIRST.items()})
    await asyncio.wait_for(runner.run(), 30)
    rows = by_id(out)
    assert rows["infra"].infrastructure and rows["infra"].stop_reason == "error"
    assert not rows["failed"].infrastructure and rows["failed"].stop_reason == "error"
    return out


async def test_resume_runs_again_what_the_infrastructure_ended_and_keeps_real_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = await first_run(tmp_path, monkeypatch)
    runner, agent = fake_runner(monkeypatch, out, {"infra": ["ok"], "failed": ["ok"], "done": ["ok"]})
    stats = await asyncio.wait_for(runner.run(), 30)
    assert dict(agent.played) == {"infra": ["ok"]}  # only the task the infrastructure ended runs again
    rows = by_id(out)  # one line per task: the infrastructure's line was taken out, the new one added
    assert rows["infra"].success and not rows["infra"].infrastructure
    assert rows["failed"].stop_reason == "error" and not rows["failed"].success  # kept as it was
    assert (stats.resumed, stats.resumed_failed, stats.resumed_infra, stats.resumed_infra_kept) == (2, 1, 1, 0)
    assert stats.done == 3 and stats.finished_now == 1
    line = BatchProgress.resume_line(stats)
    assert line == "resuming: 2 finished tasks kept (1 of them failed), 1 ended by an infrastructure error run again"
    again, agent = fake_runner(monkeypatch, out, {"infra": [], "failed": [], "done": []})
    stats = await asyncio.wait_for(again.run(), 30)  # all done now: nothing runs
    assert agent.played == {} and stats.resumed == 3 and stats.resumed_infra == 0


async def test_no_retry_infra_keeps_the_infrastructure_s_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = await first_run(tmp_path, monkeypatch)
    runner, agent = fake_runner(
        monkeypatch, out, {"infra": ["ok"], "failed": ["ok"], "done": ["ok"]}, retry_infra=False
    )
    stats = await asyncio.wait_for(runner.run(), 30)
    assert agent.played == {}
    assert by_id(out)["infra"].infrastructure
    assert (stats.resumed, stats.resumed_failed, stats.resumed_infra, stats.resumed_infra_kept) == (3, 1, 0, 1)
    line = BatchProgress.resume_line(stats)
    assert line is not None and "1 ended by an infrastructure error kept (--no-retry-infra)" in line


def test_the_flag_turns_the_retry_off() -> None:
    parser = build_parser()
    assert parser.parse_args(["batch", "t.jsonl", "--output", "o"]).no_retry_infra is False
    assert parser.parse_args(["batch", "t.jsonl", "--output", "o", "--no-retry-infra"]).no_retry_infra is True


async def test_forgetting_lines_rewrites_the_file_and_appends_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = await first_run(tmp_path, monkeypatch)
    results = ResultsFile(out / "results.jsonl")
    try:
        finished = results.finished()
        tasks = [TaskSpec(id=i, url="http://example.test/", goal=i) for i in ("done", "failed", "infra", "new")]
        plan = resume_plan(finished, tasks)
        assert [t.id for t in plan.pending] == ["infra", "new"] and plan.infra_rerun == ["infra"]
        results.forget(plan.infra_rerun)
        assert sorted(results.finished()) == ["done", "failed"]
        results.append(finished["infra"].model_copy(update={"id": "new"}))  # the descriptor follows the new file
    finally:
        results.close()
    assert sorted(by_id(out)) == ["done", "failed", "new"]
