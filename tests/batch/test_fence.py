"""A run set aside and re-run in the same attempt directory is fenced first (``watchdog.fence_run``,
``RunStream.fence``, ``RunWrites.fence``): its writes still queued on the record writer's thread, and
what it writes later (cancelled, its clean-up outlasting its bound), never land in its re-run's
directory. A real batch, a real recorder and run directory writer; the run a scripted one (no
browser), the writer's thread held back (a disk slower than the run's clean-up)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

from webagent.batch import BatchRunner
from webagent.guard.secrets import Secrets
from webagent.images import Frame, Screenshot
from webagent.record import FilesSink, Recorder
from webagent.record.writer import RecordWriter
from webagent.records import RunResult, Step
from webagent.runs.trajectory import TrajectoryWriter
from webagent.runtime import RunSpec
from webagent.tasks import TaskSpec

from .test_reruns import FakeAgent, FakeSession, FakeStream, Plan, by_id
from .test_runner import make_config_stub, wait_for

#: Seconds the held writer thread waits, at most, once the stalled run was cancelled (the fence's bound is 60).
LATE_S = 1.0


class SlowDisk(RecordWriter):
    """A writer thread held back until ``gate`` opens: the old run's writes are still queued when its
    directory is set aside."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.timers: list[threading.Timer] = []
        #: Held inside a write it has begun (a hung disk) rather than before the run's jobs.
        self.inside = False

    def submit(self, work: Callable[[], None]) -> asyncio.Future[None] | None:
        def held() -> None:
            if not self.inside:
                self.gate.wait(30)
            work()

        return super().submit(held)

    def open_later(self, delay_s: float) -> None:
        timer = threading.Timer(delay_s, self.gate.set)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)


def _step(plan: str, index: int) -> Step:
    data = f"{plan} step {index} ".encode() * 64
    image = Screenshot(base64.b64encode(data).decode(), "image/jpeg", Frame(1280, 800, 1280, 800))
    return Step(index=index, url="http://example.test/", thought=f"{plan} step {index}", image=image)


class RecordedStream(FakeStream):
    """A run recording through a real recorder (``FilesSink`` on the slow writer): "ok" records two
    steps and succeeds; "stall" and "lost" (its browser gone) record one, then wait forever; cancelled,
    their clean-up outlasts its bound (left behind) and, once the disk answers, records a late step
    and a late result."""

    def __init__(self, agent: FencedAgent, plan: Plan, goal: str, directory: Path) -> None:
        super().__init__(agent, plan, goal, directory)
        self.disk = agent.disk
        self.recorder = Recorder(Secrets({}), [FilesSink(directory, writer=agent.disk)])

    async def fence(self, timeout_s: float) -> bool:  # as RunStream.fence: its recorder's sinks
        self.agent.fenced.append(self.plan)
        return await self.recorder.fence(timeout_s)

    async def _run(self) -> AsyncGenerator[Step, None]:
        plan = self.plan
        self.session = FakeSession(crashed=plan == "lost")
        self.agent.opened += 1
        result: RunResult | None = None
        try:
            yield self._record(1)
            if plan not in ("ok", "slow_close"):
                await asyncio.Event().wait()
            yield self._record(2)
            self._end(True)
            result = self.result
        finally:
            try:
                if plan != "ok":
                    self.disk.open_later(LATE_S)
                    while not self.disk.gate.is_set():  # its clean-up outlasts the runner's bound
                        with contextlib.suppress(asyncio.CancelledError):
                            await asyncio.sleep(0.02)
                if plan not in ("ok", "slow_close"):  # cut off: what it still does, late
                    self.recorder.step(_step(plan, 2))
                    self._end(False, "error", f"the late end of the {plan} run", 2)
                    result = self.result
                await self.recorder.finish(result)
            finally:
                self.agent.closed += 1

    def _record(self, index: int) -> Step:
        self.stepping = True
        return self.recorder.step(_step(self.plan, index))


class FencedAgent(FakeAgent):
    def __init__(self, plans: dict[str, list[Plan]]) -> None:
        super().__init__(plans)
        self.disk = SlowDisk()
        #: The plans of the runs fenced, in turn.
        self.fenced: list[str] = []

    def start(self, spec: RunSpec) -> RecordedStream:
        plan = self.plans[spec.goal].pop(0)
        if self.played[spec.goal]:  # a re-run: the disk answers now at the latest
            self.disk.gate.set()
        self.played[spec.goal].append(plan)
        assert spec.output_dir is not None
        return RecordedStream(self, plan, spec.goal, spec.output_dir)


def _runner(
    monkeypatch: pytest.MonkeyPatch, out: Path, plans: dict[str, list[Plan]], stall_timeout_s: float
) -> tuple[FencedAgent, BatchRunner]:
    agent = FencedAgent(plans)
    monkeypatch.setattr("webagent.batch.runner.Agent", lambda config: agent)
    tasks = [TaskSpec(id=goal, url="http://example.test/", goal=goal) for goal in plans]
    # The old run's clean-up outlasts its bound (0.2 s, twice): it is left behind, still going.
    runner = BatchRunner(make_config_stub(), tasks, out, stall_timeout_s=stall_timeout_s, cleanup_timeout_s=0.2)
    runner.browser_lost_grace_s = 0.3
    return agent, runner


async def _wait_left_behind(agent: FencedAgent) -> None:
    """The left-behind runs ended (they end once the disk answers), and what they queued written."""
    await wait_for(lambda: agent.closed == agent.opened, 30, "the left-behind run's end")
    barrier = agent.disk.submit(lambda: None)  # after every job queued before it
    assert barrier is not None
    await asyncio.wait_for(barrier, 30)
    for timer in agent.disk.timers:
        timer.cancel()
    agent.disk.drain()


def _plans_of(directory: Path) -> list[str]:
    return [json.loads(line)["thought"] for line in (directory / "trajectory.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("plan", ["stall", "lost"])
async def test_a_rerun_directory_holds_only_the_reruns_files(
    plan: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    agent, runner = _runner(monkeypatch, out, {"t": [plan, "ok"]}, 0.25 if plan == "stall" else 0)
    await asyncio.wait_for(runner.run(), 60)
    await _wait_left_behind(agent)
    row = by_id(out)["t"]
    (record,) = row.attempt_records
    assert row.success and [r.reason for r in record.reruns] == ["stalled" if plan == "stall" else "browser_crash"]
    attempt = out / record.output_dir
    assert _plans_of(attempt) == ["ok step 1", "ok step 2"]  # the old run's queued and late lines are not here
    shots = sorted(p.name for p in attempt.glob("step_*"))
    assert shots == ["step_001.jpg", "step_002.jpg"]
    assert all((attempt / name).read_bytes().startswith(b"ok step") for name in shots)
    result = json.loads((attempt / "result.json").read_text())
    assert result["success"] and result["answer"] == "42"
    assert sorted(p.name for p in attempt.iterdir()) == ["report.html", "result.json", *shots, "trajectory.jsonl"]
    siblings = sorted(p.name for p in attempt.parent.iterdir())
    if plan == "stall":  # kept aside: what the stalled run wrote, whole up to where it was fenced
        assert siblings == ["attempt-1", "attempt-1-stalled"]
        kept = attempt.parent / "attempt-1-stalled"
        lines = _plans_of(kept)  # its late step too, where it came before the fence: a prefix all the same
        assert lines in (["stall step 1"], ["stall step 1", "stall step 2"]), lines
        assert (kept / "step_001.jpg").read_bytes().startswith(b"stall step 1")
        assert json.loads((kept / "result.json").read_text())["message"] == record.reruns[0].message
    else:  # removed, and not made again by a late write
        assert siblings == ["attempt-1"]


async def test_a_fence_that_expires_is_logged_and_the_rerun_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("webagent.batch.watchdog.FENCE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(f"{__name__}.LATE_S", 30.0)  # the disk answers only when the re-run starts
    out = tmp_path / "b"
    agent, runner = _runner(monkeypatch, out, {"t": ["stall", "ok"]}, 0.25)
    agent.disk.inside = True  # the stalled run's first step is being written when the disk hangs
    append = TrajectoryWriter.append

    def hung(writer: TrajectoryWriter, line: str, screenshot: Any) -> None:
        agent.disk.gate.wait(30)
        append(writer, line, screenshot)

    monkeypatch.setattr(TrajectoryWriter, "append", hung)
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(runner.run(), 60)
    await _wait_left_behind(agent)
    assert by_id(out)["t"].success
    expired = [e for e in logs if e["event"] == "run_writes_not_fenced"]
    assert [(e["task"], e["timeout_s"], e["log_level"]) for e in expired] == [("t", 0.2, "error")]
    assert expired[0]["directory"].endswith("runs/t/attempt-1")


async def test_a_run_whose_result_stands_is_not_fenced_its_late_files_are_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The episode ended, answered; only its clean-up outlasts its bound. Its directory is final (no
    # re-run): what it writes late (here its report, as a HAR or a trace would be) belongs there.
    out = tmp_path / "b"
    agent, runner = _runner(monkeypatch, out, {"t": ["slow_close"]}, 0.25)
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(runner.run(), 60)
    await _wait_left_behind(agent)
    row = by_id(out)["t"]
    (record,) = row.attempt_records
    assert row.success and record.reruns == []
    assert any(e["event"] == "task_cleanup_stalled" for e in logs)
    attempt = out / record.output_dir
    assert _plans_of(attempt) == ["slow_close step 1", "slow_close step 2"]
    assert json.loads((attempt / "result.json").read_text())["success"]
    assert agent.fenced == []  # its late HAR or trace, had it one, would land in its own directory


@pytest.mark.parametrize("plans", [["stall", "ok"], ["lost", "ok"], ["stall", "stall"]])
async def test_a_run_set_aside_or_cut_off_is_fenced(
    plans: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    agent, runner = _runner(monkeypatch, out, {"t": list(plans)}, 0.25 if plans[0] == "stall" else 0)
    await asyncio.wait_for(runner.run(), 60)
    await _wait_left_behind(agent)
    assert set(agent.fenced) == {p for p in plans if p != "ok"}  # the last stall: cut off, not re-run
