"""The run directory written off the event loop (``record/writer.py``): many runs at once each get
every step in order, byte for byte what the loop wrote before (``RunFiles``, the same records
written in place); a run cancelled mid-way has every step it recorded on disk once its end is
awaited; a write that fails is raised, at the end and at the next step, and logged; a run fenced
(set aside for a re-run in its directory) has what it queued done and nothing written after."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

from webagent.guard.secrets import Secrets
from webagent.images import Frame, Screenshot
from webagent.record import FilesSink, Recorder
from webagent.record.writer import RecordWriter
from webagent.records import RunResult, Step
from webagent.runs.trajectory import RunFiles, TrajectoryWriter

FRAME = Frame(1280, 800, 1260, 784)


def _shot(run: int, index: int, size: int = 2048) -> Screenshot:
    data = (f"run {run} step {index} ".encode() + os.urandom(16)) * (size // 32)
    return Screenshot(base64.b64encode(data).decode(), "image/jpeg", FRAME)


def _step(run: int, index: int, size: int = 2048) -> Step:
    return Step(
        index=index, url=f"http://127.0.0.1/{run}", thought=f"run {run} step {index}", image=_shot(run, index, size)
    )


def _result(run: int) -> RunResult:
    return RunResult(success=True, stop_reason="answered", message=f"run {run}", url="", goal=f"goal {run}")


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != "report.html"}


async def test_many_runs_at_once_write_every_step_in_order_byte_for_byte(tmp_path: Path) -> None:
    runs, steps = 60, 12
    recorded: dict[int, list[Step]] = {}
    results: dict[int, RunResult] = {}

    async def run(i: int) -> None:
        sink = FilesSink(tmp_path / "async" / f"run-{i}")
        recorded[i] = []
        for index in range(1, steps + 1):
            step = _step(i, index)
            sink.step(step)
            recorded[i].append(step)
            await asyncio.sleep(0)  # the other runs' steps come in between
        results[i] = _result(i)
        await sink.finish(results[i])

    await asyncio.gather(*(run(i) for i in range(runs)))
    for i in range(runs):  # what the loop wrote itself, from the same records (their names already set)
        directory = tmp_path / "async" / f"run-{i}"
        assert [s.screenshot for s in recorded[i]] == [f"step_{k:03d}.jpg" for k in range(1, steps + 1)]
        assert results[i].output_dir == str(directory)
        reference = RunFiles(tmp_path / "sync" / f"run-{i}")
        for step in recorded[i]:
            step = step.model_copy()
            step.screenshot = None  # named again, as the loop named it
            reference.step(step)
        text = reference.result_text(results[i].model_copy())
        reference.end(text.replace(str(tmp_path / "sync"), str(tmp_path / "async")))
        assert _files(directory) == _files(tmp_path / "sync" / f"run-{i}")
        assert (directory / "report.html").is_file()


async def test_a_run_cancelled_mid_way_has_every_step_it_recorded_once_its_end_is_awaited(tmp_path: Path) -> None:
    started = asyncio.Event()
    counts: dict[int, int] = {}

    async def run(i: int) -> None:  # as RunStream does: the recorder finished in a finally
        recorder = Recorder(Secrets({}), [FilesSink(tmp_path / f"run-{i}")])
        counts[i] = 0
        try:
            for index in range(1, 1000):
                recorder.step(_step(i, index, size=256 * 1024))  # large: the writer falls behind
                counts[i] = index
                if index == 5 and i == 0:
                    started.set()
                await asyncio.sleep(0)
        finally:
            await recorder.finish(None)

    tasks = [asyncio.create_task(run(i)) for i in range(8)]
    await started.wait()
    for task in tasks:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
    for i in range(8):  # checked at once: nothing is left to the writer
        lines = (tmp_path / f"run-{i}" / "trajectory.jsonl").read_text().splitlines()
        assert len(lines) == counts[i] >= 1
        assert [Step.model_validate_json(line).index for line in lines] == list(range(1, counts[i] + 1))
        assert len(list((tmp_path / f"run-{i}").glob("step_*.jpg"))) == counts[i]


async def test_a_write_that_fails_is_raised_at_the_end_and_at_the_next_step_and_logged(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    sink = FilesSink(blocker / "run")  # the run directory cannot be made
    with structlog.testing.capture_logs() as logs:
        sink.step(_step(0, 1))
        with pytest.raises(FileExistsError):
            await sink.finish(_result(0))
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["record_write_failed"]
    with pytest.raises(FileExistsError):
        sink.step(_step(0, 2))


async def test_writes_wait_for_the_disk_past_the_bounded_queue(tmp_path: Path) -> None:
    writer = RecordWriter(max_jobs=2)
    sink = FilesSink(tmp_path / "run", writer=writer)
    for index in range(1, 51):  # far more than the queue holds: recording waits, nothing is dropped
        sink.step(_step(0, index))
    await sink.finish(_result(0))
    lines = (tmp_path / "run" / "trajectory.jsonl").read_text().splitlines()
    assert [Step.model_validate_json(line).index for line in lines] == list(range(1, 51))
    writer.drain()


class _HeldWriter(RecordWriter):
    """Its thread held back until ``gate`` opens (a slow disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def submit(self, work: Callable[[], None]) -> asyncio.Future[None] | None:
        def held() -> None:
            self.gate.wait(30)
            work()

        return super().submit(held)


async def test_a_fenced_run_has_its_queued_writes_done_and_nothing_after(tmp_path: Path) -> None:
    writer = _HeldWriter()
    sink = FilesSink(tmp_path / "run", writer=writer)
    for index in (1, 2):
        sink.step(_step(0, index))  # queued behind the held disk
    fence = asyncio.create_task(sink.fence(30))
    await asyncio.sleep(0.05)
    assert not fence.done() and not (tmp_path / "run").exists()  # it waits for them, on the loop
    writer.gate.set()
    assert await fence
    sink.step(_step(0, 3))  # a run left behind still records: nothing of it lands
    await sink.finish(_result(0))
    barrier = writer.submit(lambda: None)
    assert barrier is not None
    await barrier
    lines = (tmp_path / "run" / "trajectory.jsonl").read_text().splitlines()
    assert [Step.model_validate_json(line).index for line in lines] == [1, 2]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["step_001.jpg", "step_002.jpg", "trajectory.jsonl"]
    assert sink.files._writer is None  # its trajectory file closed by the fence
    writer.drain()


async def test_a_fence_behind_another_runs_hung_write_returns_at_once_and_drops_the_rest(tmp_path: Path) -> None:
    writer = _HeldWriter()  # the thread hangs before the run's jobs (on another run's write)
    sink = FilesSink(tmp_path / "run", writer=writer)
    sink.step(_step(0, 1))
    sink.step(_step(0, 2))
    assert await sink.fence(0.1)  # none of its writes begun: each will be skipped, nothing lands
    writer.gate.set()
    barrier = writer.submit(lambda: None)
    assert barrier is not None
    await barrier
    assert not (tmp_path / "run").exists()  # revoked before the thread began them: dropped
    writer.drain()


async def test_a_fence_on_a_write_of_its_own_that_hangs_gives_up_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    append = TrajectoryWriter.append

    def hung(trajectory: TrajectoryWriter, line: str, screenshot: Any) -> None:
        gate.wait(30)
        append(trajectory, line, screenshot)

    monkeypatch.setattr(TrajectoryWriter, "append", hung)
    writer = RecordWriter()
    sink = FilesSink(tmp_path / "run", writer=writer)
    sink.step(_step(0, 1))
    sink.step(_step(0, 2))
    await asyncio.sleep(0.05)  # the first write has begun, and hangs
    assert not await sink.fence(0.1)  # the fence says so at its deadline, it does not hang
    gate.set()
    barrier = writer.submit(lambda: None)
    assert barrier is not None
    await barrier
    lines = (tmp_path / "run" / "trajectory.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [1]  # the begun one landed; the rest dropped
    writer.drain()
