"""The public task runner: a task is data (its start, goal, reward source and run options) and
``TaskRunner.run`` / ``run_task`` take it to its results line, with real Chromium, the offline model
server and the local sites; the lines are counted once, however they were run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from webagent import Agent
from webagent.batch import AttemptRecord, BatchStats, Rerun, TaskLimits, TaskResult, TaskRunner, run_task
from webagent.batch.stats import infra_cause
from webagent.records import Step
from webagent.tasks import TaskOptions, TaskSpec
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..conftest import load_task_script, make_config
from .test_runner import LOCAL_ANSWERS, LOCAL_STEPS, local_lines, real_browser


@real_browser
async def test_a_task_runs_with_its_own_options_through_the_public_runner(site: SiteServer, tmp_path: Path) -> None:
    local = local_lines(site)
    price = local["catalog-price"]
    short = TaskSpec(id="short", url=price["url"], goal=price["goal"], options=TaskOptions(max_steps=1, trace="always"))
    full = TaskSpec(id="full", url=price["url"], goal=price["goal"])
    seen: list[tuple[str, int]] = []

    def on_step(task: TaskSpec, step: Step) -> None:
        seen.append((task.id, step.index))

    async with FakeModelServer(load_task_script("local")) as server, Agent(make_config(server)) as agent:
        runner = TaskRunner(agent, tmp_path / "out", TaskLimits(attempts=2), on_step=on_step)
        limited, done = await asyncio.wait_for(asyncio.gather(runner.run(short), runner.run(full)), 120)
        tabs = local["tabs-order"]
        alone = await asyncio.wait_for(
            run_task(agent, TaskSpec(id="tabs", url=tabs["url"], goal=tabs["goal"]), tmp_path / "alone"), 60
        )
    assert limited.stop_reason == "max_steps" and limited.attempts == 2 and limited.steps == 2  # its own limit
    for record in limited.attempt_records:  # and its own trace setting
        assert (tmp_path / "out" / record.output_dir / "trace.zip").is_file()
    assert done.success and done.answer == LOCAL_ANSWERS["catalog-price"] and done.attempts == 1
    assert done.steps == LOCAL_STEPS["catalog-price"]
    assert not list((tmp_path / "out").glob("runs/full/attempt-1/trace.zip"))  # the default: no trace
    assert sorted(seen) == sorted(
        [("short", 1), ("short", 1), *(("full", i) for i in range(1, LOCAL_STEPS["catalog-price"] + 1))]
    )
    assert alone.success and alone.answer == LOCAL_ANSWERS["tabs-order"]
    assert (tmp_path / "alone" / alone.attempt_records[0].output_dir / "result.json").is_file()


def test_a_line_is_counted_from_what_it_records() -> None:
    """One count for a line, whether its task ran here or on a Ray actor."""
    stalled = Rerun(reason="stalled", message="no progress for 300 s", steps=2, duration_s=300.0)
    infra = Rerun(
        reason="infrastructure", message="the page gives no screenshot at http://x/ in 5 s", steps=1, duration_s=5
    )
    crash = Rerun(reason="browser_crash", message="the browser died", steps=0, duration_s=1.0)
    record = AttemptRecord(
        attempt=1,
        success=False,
        answer=None,
        stop_reason="error",
        message="no progress",
        steps=0,
        duration_s=1.0,
        output_dir="runs/t/attempt-1",
        retried=True,
        stalled=True,
        reruns=[stalled, infra, crash],
    )
    line = TaskResult.failed(TaskSpec(id="t", url="http://x/", goal="g"), "no progress").model_copy(
        update={"attempt_records": [record], "retried": True, "infra_reruns": 1}
    )
    stats = BatchStats(3, 1)
    stats.count_line(line)
    assert (stats.done, stats.finished_now, stats.errors, stats.succeeded, stats.retried) == (2, 1, 1, 0, 1)
    assert stats.stalled == 2 and stats.infra_reruns == 1
    assert stats.infra_causes == {infra_cause(infra.message): 1}
