"""A batch spread over worker processes (``--workers``): real worker processes, each with its own
Chromium, against the offline model server and the local sites; one results file written by the
parent; a worker killed mid-run; a stop; a browser that cannot launch; the counts ``auto`` picks."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from webagent.batch import BatchRunner, RayCluster, TaskResult
from webagent.batch.cli import worker_count
from webagent.batch.processes import SESSIONS_PER_WORKER, auto_workers
from webagent.budget import Budget, BudgetLimits
from webagent.errors import BrowserError, ConfigError, InputError
from webagent.tasks import TaskSpec
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..conftest import load_task_script, make_config
from ..procs import alive, cmdline, descendants
from .test_runner import (
    LOCAL_ANSWERS,
    LOCAL_STEPS,
    lines_of,
    local_lines,
    real_browser,
    slow_copies,
    task_file,
    wait_for,
)


def workers_below(root: int) -> list[int]:
    return [pid for pid in descendants(root) if "webagent.batch.worker" in cmdline(pid)]


@real_browser
async def test_a_batch_in_two_worker_processes_then_resume(site: SiteServer, tmp_path: Path) -> None:
    tasks = task_file(tmp_path / "local.jsonl", list(local_lines(site).values()))
    out = tmp_path / "batch"
    seen: list[int] = []
    async with FakeModelServer(load_task_script("local")) as server:
        config = make_config(server)
        runner = BatchRunner(config, tasks, out, concurrency=4, workers=2)

        def update(stats: object) -> None:
            if runner.processes is not None and runner.processes.pool:
                seen.extend(w.proc.pid for w in runner.processes.pool)

        runner.on_update = update
        stats = await asyncio.wait_for(runner.run(), 120)
        rows = lines_of(out / "results.jsonl")
        assert sorted(r["id"] for r in rows) == sorted(LOCAL_ANSWERS)
        for row in rows:
            r = TaskResult.model_validate(row)
            assert r.success and r.answer == LOCAL_ANSWERS[r.id] and r.steps == LOCAL_STEPS[r.id], (r.id, r.message)
            assert (out / r.attempt_records[0].output_dir / "result.json").exists()  # written by a worker
        assert (stats.done, stats.succeeded, stats.errors, stats.retried, stats.in_flight) == (5, 5, 0, 0, 0)
        assert stats.steps == sum(LOCAL_STEPS.values())  # each step counted once, as the workers sent it
        assert stats.tokens > 0
        pids = set(seen)
        assert len(pids) == 2 and os.getpid() not in pids  # the sessions ran in two other processes
        assert runner.processes is not None and runner.processes.deaths == 0
        assert not [pid for pid in pids if alive(pid)], "a worker process outlived its batch"

        again = await BatchRunner(config, tasks, out, concurrency=4, workers=2).run()
        assert (again.resumed, again.finished_now) == (5, 0)
        assert len(lines_of(out / "results.jsonl")) == 5


@real_browser
async def test_a_killed_worker_is_replaced_and_its_tasks_run_again(site: SiteServer, tmp_path: Path) -> None:
    script = {**load_task_script("local"), "latency_s": {"policy": 0.2}}
    ids = [f"slow-{i}" for i in range(4)]
    tasks = task_file(tmp_path / "t.jsonl", slow_copies(site, *ids))
    out = tmp_path / "batch"
    killed: list[int] = []
    async with FakeModelServer(script) as server:
        runner = BatchRunner(make_config(server), tasks, out, concurrency=4, workers=2)

        def update(stats: object) -> None:
            pool = runner.processes
            if not killed and pool is not None and pool.pool and runner.stats.steps >= 2:
                victim = pool.pool[0]
                if victim.tasks:
                    killed.append(victim.proc.pid)
                    os.kill(victim.proc.pid, signal.SIGKILL)

        runner.on_update = update
        stats = await asyncio.wait_for(runner.run(), 180)
    assert killed, "no worker was killed: the test did not test anything"
    rows = lines_of(out / "results.jsonl")
    assert sorted(r["id"] for r in rows) == ids  # one line each, none lost with the worker
    assert all(r["success"] for r in rows), [r["message"] for r in rows]
    assert runner.processes is not None and runner.processes.deaths == 1
    assert stats.retried >= 1 and stats.errors == 0


@real_browser
async def test_a_task_whose_worker_keeps_dying_ends_as_infrastructure_and_resume_runs_it(
    site: SiteServer, tmp_path: Path
) -> None:
    tasks = task_file(tmp_path / "t.jsonl", slow_copies(site, "doomed", "fine-1", "fine-2"))
    out = tmp_path / "batch"
    killed: list[int] = []
    async with FakeModelServer(load_task_script("local")) as server:
        config = make_config(server)
        runner = BatchRunner(config, tasks, out, concurrency=2, workers=2)

        def update(stats: object) -> None:  # every worker that takes "doomed" is killed
            pool = runner.processes
            for worker in pool.pool if pool is not None else []:
                if "doomed" in worker.tasks and worker.ready and worker.proc.pid not in killed:
                    killed.append(worker.proc.pid)
                    os.kill(worker.proc.pid, signal.SIGKILL)

        runner.on_update = update
        stats = await asyncio.wait_for(runner.run(), 240)
        rows = {r["id"]: r for r in lines_of(out / "results.jsonl")}
        assert sorted(rows) == ["doomed", "fine-1", "fine-2"]
        assert len(killed) == 3 and runner.processes is not None and runner.processes.deaths >= 3
        doomed = rows["doomed"]
        assert doomed["stop_reason"] == "error" and doomed["infrastructure"] is True
        assert "batch worker process running it died 3 times" in doomed["message"]
        assert stats.errors == 1

        again = await asyncio.wait_for(BatchRunner(config, tasks, out, concurrency=2, workers=2).run(), 120)
    assert again.resumed_infra == 1  # an infrastructure line is run again, not kept
    rows = {r["id"]: r for r in lines_of(out / "results.jsonl")}
    assert rows["doomed"]["success"] is True and len(rows) == 3


@real_browser
async def test_a_stopped_batch_of_workers_ends_them_and_resumes(site: SiteServer, tmp_path: Path) -> None:
    script = {**load_task_script("local"), "latency_s": {"policy": 0.3}}
    ids = [f"slow-{i}" for i in range(6)]
    tasks = task_file(tmp_path / "t.jsonl", slow_copies(site, *ids))
    out = tmp_path / "batch"
    me = os.getpid()
    async with FakeModelServer(script) as server:
        config = make_config(server)
        runner = BatchRunner(config, tasks, out, concurrency=2, workers=2)

        async def stop_soon() -> None:
            await wait_for(lambda: runner.stats.steps >= 3, 60, "steps in the workers")
            os.kill(me, signal.SIGINT)  # as Ctrl-C does: the parent's handler stops the batch

        stopper = asyncio.create_task(stop_soon())
        stats = await asyncio.wait_for(runner.run(), 120)
        await stopper
        assert runner.stopping and stats.in_flight == 0
        done = [r["id"] for r in lines_of(out / "results.jsonl")] if (out / "results.jsonl").exists() else []
        assert len(done) < 6
        await wait_for(lambda: not workers_below(me), 30, "the worker processes to exit")

        again = await asyncio.wait_for(BatchRunner(config, tasks, out, concurrency=3, workers=2).run(), 180)
    rows = lines_of(out / "results.jsonl")
    assert sorted(r["id"] for r in rows) == ids and all(r["success"] for r in rows)
    assert again.resumed == len(done)


async def test_workers_whose_browser_cannot_launch_are_one_error(tmp_path: Path) -> None:
    # A "browser" that fails after 2 s: past the workers' first progress reports (every second), so the
    # parent must wait for their word on the browser itself, not take any message for a start.
    chromium = tmp_path / "failing-chromium"
    chromium.write_text("#!/bin/sh\nsleep 2\necho 'no display here' >&2\nexit 1\n")
    chromium.chmod(0o755)
    async with FakeModelServer(load_task_script("local")) as server:
        config = make_config(server)
        config.browser.executable_path = str(chromium)
        tasks = [TaskSpec(id=f"t{i}", url="http://127.0.0.1:9/", goal="g") for i in range(3)]
        runner = BatchRunner(config, tasks, tmp_path / "b", concurrency=4, workers=2)
        with pytest.raises(BrowserError):
            await asyncio.wait_for(runner.run(), 120)
    assert not (tmp_path / "b" / "results.jsonl").exists() or lines_of(tmp_path / "b" / "results.jsonl") == []
    await wait_for(lambda: not workers_below(os.getpid()), 30, "the worker processes to exit")


def test_how_many_workers() -> None:
    assert auto_workers(8, cpus=16) == 1  # a small batch stays in the command's process
    assert auto_workers(SESSIONS_PER_WORKER, cpus=16) == 1
    assert auto_workers(SESSIONS_PER_WORKER + 1, cpus=16) == 2
    assert auto_workers(500, cpus=2) == 2  # at most one per CPU
    assert auto_workers(500, cpus=16) == 5
    assert worker_count("auto", 500, ray=True) == 1  # Ray's actors are the processes then
    assert worker_count("3", 8, ray=False) == 3
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(InputError, match="--workers must be"):
            worker_count(bad, 8, ray=False)


def test_workers_refuse_what_one_process_must_hold(tmp_path: Path) -> None:
    from webagent.config import AgentConfig

    config = AgentConfig()
    tasks = [TaskSpec(id="a", url="http://127.0.0.1:9/", goal="g")]
    budget = Budget(BudgetLimits(tokens=10), config.price, scope="suite")
    with pytest.raises(ConfigError, match="cannot span worker processes"):
        BatchRunner(config, tasks, tmp_path, workers=2, budgets=[budget])
    with pytest.raises(ConfigError, match="not both"):
        BatchRunner(config, tasks, tmp_path, workers=2, ray=RayCluster())
    with pytest.raises(ValueError, match="workers must be at least 1"):
        BatchRunner(config, tasks, tmp_path, workers=0)
