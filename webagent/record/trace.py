"""``TraceSink``: a Playwright trace of the run (``trace.zip`` in its directory, open with
``playwright show-trace``), kept always or only when the run fails.

Only for a context of the run's own (a caller's context may be tracing already), and never for a
run that types secrets or holds a signed-in state: a trace's DOM snapshots would hold the typed
values, its network log the cookies (the recorder's builder decides, ``webagent.record.build``).
Playwright's driver writes the archive into a private scratch folder beside the run directory (on
its file system; in the system's temporary folder where that parent takes no new folder); the sink
then moves it in on the loop, with the mode ``write_atomic`` would give it there. A run fenced (set
aside for a re-run in its directory) keeps no trace after: its fence waits, within its bound, for a
``trace.zip`` being written, and once the fence has ended no trace is moved in. A ``tracing.stop``
that outlives its deadline (or its run) is not cancelled: the driver writes into the scratch
folder, which is removed once it is done, never into the directory of the run after it."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import structlog

from ..browser.deadline import within
from ..browser.session import BrowserSession
from ..files.disk import file_mode, make_dir, secure_file, write_atomic_parts
from ..records import RunResult
from .sink import RunSink

__all__ = ["TRACE_TIMEOUT_S", "TraceSink"]

log = structlog.get_logger("webagent.record")
TRACE_TIMEOUT_S = 60.0  # writing a trace of a long run takes a while


class TraceSink(RunSink):
    """Traces the run's context from its start; writes ``directory/trace.zip`` when ``keep`` says."""

    def __init__(self, directory: Path, keep: Literal["on-failure", "always"], *, private: bool = False) -> None:
        self.directory = directory
        self.keep = keep
        self.private = private
        self.session: BrowserSession | None = None
        #: The run was fenced: a trace not yet being stopped is stopped without being written.
        self.fenced = False
        #: The fence has ended: nothing is moved into the run directory any more.
        self._shut = False
        self._stopping: asyncio.Task[Path | None] | None = None

    async def start(self, session: BrowserSession) -> None:
        try:
            tracing = session.page.context.tracing
            await within(tracing.start(screenshots=True, snapshots=True), TRACE_TIMEOUT_S, "tracing.start")
            self.session = session
        except Exception as exc:  # a trace is a debugging aid: never fail a run for it
            log.warning("trace_start_failed", error=str(exc))

    async def finish(self, result: RunResult | None) -> None:
        if self.session is None:
            return
        kept = (self.keep == "always" or not (result is not None and result.success)) and not self.fenced
        self._stopping = asyncio.create_task(self._stop(self.session, self.directory / "trace.zip" if kept else None))
        path = await self._stopping
        if path is not None and result is not None:
            result.trace = str(path)

    async def fence(self, timeout_s: float) -> bool:
        self.fenced = True
        stopping = self._stopping  # a trace.zip being written: Playwright's driver writes it at the end
        if stopping is not None and not stopping.done():
            await asyncio.wait({stopping}, timeout=timeout_s)
        self._shut = True  # a trace still being written stays in its scratch folder: nothing lands after
        return True

    async def _stop(self, session: BrowserSession, path: Path | None) -> Path | None:
        try:
            tracing = session.page.context.tracing
            if path is None:
                await within(tracing.stop(), TRACE_TIMEOUT_S, "tracing.stop")
                return None
            make_dir(path.parent, private=self.private)
            scratch = _scratch(path.parent)
        except Exception as exc:
            log.warning("trace_stop_failed", error=str(exc))
            return None
        written = scratch / path.name
        # Not cancelled at its deadline, nor with the run: the driver would write the archive all
        # the same, into a scratch folder then gone, so it is removed only once the driver is done.
        stopping = asyncio.ensure_future(tracing.stop(path=written))
        try:
            await within(asyncio.shield(stopping), TRACE_TIMEOUT_S, "tracing.stop")
            if self._shut:  # checked with no await before the move: nothing lands after a fence
                log.warning("trace_not_written_fenced", directory=str(path.parent))
                return None
            _move_in(written, path, private=self.private)
            return path
        except Exception as exc:
            log.warning("trace_stop_failed", error=str(exc))
            return None
        finally:
            if stopping.done():
                _remove(scratch, stopping)
            else:
                stopping.add_done_callback(lambda done: _remove(scratch, done))


def _scratch(directory: Path) -> Path:
    """A private folder (0700) for the driver to write the archive in: beside the run ``directory``
    (its file system: one rename moves it in), else, where that parent takes no new folder, in the
    system's temporary folder."""
    try:
        return Path(tempfile.mkdtemp(prefix=f".{directory.name}.trace-", dir=directory.parent))
    except OSError:
        return Path(tempfile.mkdtemp(prefix="webagent-trace-"))


def _move_in(written: Path, path: Path, *, private: bool) -> None:
    """The archive the driver wrote moved to ``path`` with the mode ``write_atomic`` gives a file
    there: in one rename, or, from another file system, copied beside it first (on the loop: with
    no await, so that no fence comes in between)."""
    if file_mode(path, private=private) == 0o600:
        secure_file(written, private=True)  # written by Playwright's driver, with its umask
    try:
        os.replace(written, path)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        with written.open("rb") as archive:
            write_atomic_parts(path, iter(lambda: archive.read(1 << 20), b""), private=private)


def _remove(scratch: Path, stopping: asyncio.Future[None]) -> None:
    """The scratch folder removed once the driver's stop is over (its outcome read: logged where awaited)."""
    if not stopping.cancelled():
        stopping.exception()
    shutil.rmtree(scratch, ignore_errors=True)
