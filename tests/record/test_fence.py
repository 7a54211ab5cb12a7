"""The sinks that write into a run directory themselves honour a run's fence (a batch sets the run
aside to re-run it in the same directory, ``Recorder.fence``): the HAR is not written after it, a
trace is stopped without being written, and a ``trace.zip`` being written when the fence comes is
done before the fence ends. (The run directory's own files: ``test_files_writer.py``.)"""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path
from typing import cast

import pytest
from playwright.async_api import Browser

from webagent.browser.session import BrowserSession
from webagent.guard.secrets import Secrets
from webagent.record import HarSink, TraceSink
from webagent.records import RunResult


def _failed() -> RunResult:
    return RunResult(success=False, stop_reason="error", message="set aside", url="", goal="g")


async def test_a_fenced_runs_har_is_not_written_into_its_directory(tmp_path: Path) -> None:
    sink = HarSink(tmp_path / "run", Secrets({}))
    sink.raw.write_text(json.dumps({"log": {"entries": []}}))  # what Playwright wrote as the context closed
    assert await sink.fence(1.0)
    await sink.closed()
    assert not (tmp_path / "run").exists() and sink.path is None
    assert not sink.raw.exists()  # the raw archive (it holds secrets) is removed all the same


@pytest.mark.browser
async def test_a_fenced_runs_trace_is_stopped_unwritten_and_one_being_written_is_awaited(
    browser: Browser, tmp_path: Path
) -> None:
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.set_content("<h1>traced</h1>")
        session = cast(BrowserSession, types.SimpleNamespace(page=page))  # what the sink reads of one
        late = TraceSink(tmp_path / "late", "always")
        await late.start(session)
        assert await late.fence(10)
        result = _failed()
        await late.finish(result)
        assert result.trace is None and not (tmp_path / "late").exists()

        writing = TraceSink(tmp_path / "writing", "always")
        await writing.start(session)
        finish = asyncio.create_task(writing.finish(_failed()))
        await asyncio.sleep(0)  # its stop has begun: trace.zip is being written
        assert await writing.fence(30)
        assert (tmp_path / "writing" / "trace.zip").is_file()  # done before the fence ended, not after
        await finish
    finally:
        await context.close()


class _SlowTracing:
    """A context's ``tracing`` whose ``stop`` writes its archive only once ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.paths: list[Path] = []

    async def start(self, **_: object) -> None:
        return None

    async def stop(self, path: Path | None = None) -> None:
        await self.release.wait()
        if path is not None:
            self.paths.append(path)
            path.write_bytes(b"PK late trace")  # noqa: ASYNC240 (a few bytes, as the driver would)


async def test_a_trace_written_after_its_fence_ended_never_lands_in_the_run_directory(tmp_path: Path) -> None:
    tracing = _SlowTracing()
    page = types.SimpleNamespace(context=types.SimpleNamespace(tracing=tracing))
    session = cast(BrowserSession, types.SimpleNamespace(page=page))
    directory = tmp_path / "runs" / "task" / "attempt-1"
    sink = TraceSink(directory, "always")
    await sink.start(session)
    result = _failed()
    finish = asyncio.create_task(sink.finish(result))
    await asyncio.sleep(0.01)  # its stop has begun, and does not end within the fence's bound
    assert await sink.fence(0.05)  # nothing of the run can land in the directory from now on
    directory.mkdir(parents=True, exist_ok=True)  # the re-run's directory, at the same path
    tracing.release.set()  # the archive is written now, after the fence
    await finish
    assert tracing.paths and tracing.paths[0].parent != directory  # written beside, not into, the directory
    assert not (directory / "trace.zip").exists() and result.trace is None
    assert list(directory.parent.iterdir()) == [directory]  # its scratch folder removed


async def test_a_kept_trace_is_moved_into_the_run_directory_whole(tmp_path: Path) -> None:
    tracing = _SlowTracing()
    tracing.release.set()
    page = types.SimpleNamespace(context=types.SimpleNamespace(tracing=tracing))
    directory = tmp_path / "runs" / "task" / "attempt-1"
    sink = TraceSink(directory, "always")
    await sink.start(cast(BrowserSession, types.SimpleNamespace(page=page)))
    result = _failed()
    await sink.finish(result)
    assert (directory / "trace.zip").read_bytes() == b"PK late trace" and result.trace == str(directory / "trace.zip")
    assert sorted(p.name for p in directory.parent.iterdir()) == ["attempt-1"]
