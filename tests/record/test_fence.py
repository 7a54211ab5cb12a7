"""The sinks that write into a run directory themselves honour a run's fence (a batch sets the run
aside to re-run it in the same directory, ``Recorder.fence``): the HAR is not written after it, a
trace is stopped without being written, a ``trace.zip`` being written when the fence comes is
done before the fence ends, and one whose stop outlives the fence never lands there. A kept trace
has the mode of a file written there, from any scratch folder. (The run directory's own files:
``test_files_writer.py``.)"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import stat
import tempfile
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


def _gone(paths: list[str]) -> bool:
    return not any(os.path.exists(p) for p in paths)


def _sink_over(tracing: _SlowTracing, directory: Path, *, private: bool = False) -> TraceSink:
    sink = TraceSink(directory, "always", private=private)
    sink.session = cast(
        BrowserSession,
        types.SimpleNamespace(page=types.SimpleNamespace(context=types.SimpleNamespace(tracing=tracing))),
    )
    return sink


@pytest.mark.parametrize("private", [False, True])
async def test_a_kept_trace_has_the_mode_of_a_file_written_there(tmp_path: Path, private: bool) -> None:
    tracing = _SlowTracing()
    tracing.release.set()
    directory = tmp_path / "runs" / "task" / "attempt-1"
    await _sink_over(tracing, directory, private=private).finish(_failed())
    umask = os.umask(0)
    os.umask(umask)
    mode = stat.S_IMODE((directory / "trace.zip").stat().st_mode)
    assert mode == (0o600 if private else 0o666 & ~umask)  # not the scratch folder's privacy


async def test_a_trace_is_kept_where_the_parent_takes_no_scratch_folder_or_is_another_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mkdtemp, replace = tempfile.mkdtemp, os.replace
    scratches: list[str] = []

    def no_folder_beside(prefix: str = "", dir: str | Path | None = None) -> str:
        if dir is not None:
            raise PermissionError(13, "Permission denied", str(dir))
        scratches.append(mkdtemp(prefix=prefix))
        return scratches[-1]

    def across(src: str | Path, dst: str | Path) -> None:
        if Path(dst).name == "trace.zip" and Path(src).parent.name.startswith("webagent-trace-"):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        replace(src, dst)

    monkeypatch.setattr("webagent.record.trace.tempfile.mkdtemp", no_folder_beside)
    monkeypatch.setattr("webagent.record.trace.os.replace", across)
    tracing = _SlowTracing()
    tracing.release.set()
    directory = tmp_path / "runs" / "task" / "attempt-1"
    result = _failed()
    await _sink_over(tracing, directory).finish(result)
    assert (directory / "trace.zip").read_bytes() == b"PK late trace" and result.trace == str(directory / "trace.zip")
    assert scratches and _gone(scratches)
    assert [p.name for p in directory.iterdir()] == ["trace.zip"]  # no copy left beside it


async def test_a_stop_past_its_deadline_is_not_cancelled_and_its_scratch_goes_once_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("webagent.record.trace.TRACE_TIMEOUT_S", 0.05)
    tracing = _SlowTracing()
    directory = tmp_path / "runs" / "task" / "attempt-1"
    result = _failed()
    await _sink_over(tracing, directory).finish(result)  # gave up on it at the deadline
    assert result.trace is None and not (directory / "trace.zip").exists()
    tracing.release.set()  # the driver goes on and writes it: into the scratch folder, not the run's
    for _ in range(100):
        if tracing.paths and not tracing.paths[0].parent.exists():
            break
        await asyncio.sleep(0.01)
    assert tracing.paths and not tracing.paths[0].parent.exists()  # it was written, then removed
    assert sorted(p.name for p in directory.parent.iterdir()) == ["attempt-1"]
    assert not (directory / "trace.zip").exists()
