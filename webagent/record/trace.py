"""``TraceSink``: a Playwright trace of the run (``trace.zip`` in its directory, open with
``playwright show-trace``), kept always or only when the run fails.

Only for a context of the run's own (a caller's context may be tracing already), and never for a
run that types secrets or holds a signed-in state: a trace's DOM snapshots would hold the typed
values, its network log the cookies (the recorder's builder decides, ``webagent.record.build``).
Playwright's driver writes the archive into a private scratch folder beside the run directory (on
its file system); the sink then moves it in with one rename, on the loop. A run fenced (set aside
for a re-run in its directory) keeps no trace after: its fence waits, within its bound, for a
``trace.zip`` being written, and once the fence has ended no trace is moved in, even one whose
``tracing.stop`` outlived its deadline and still lands in the scratch folder (which it then leaves
behind, named ``.<run>.trace-*``, instead of in the directory of the run after it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import structlog

from ..browser.deadline import within
from ..browser.session import BrowserSession
from ..files.disk import make_dir, secure_file
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
        #: The run was fenced: its trace is stopped without being written.
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
            scratch = Path(tempfile.mkdtemp(prefix=f".{path.parent.name}.trace-", dir=path.parent.parent))  # 0700
        except Exception as exc:
            log.warning("trace_stop_failed", error=str(exc))
            return None
        written = scratch / path.name
        try:
            await within(tracing.stop(path=written), TRACE_TIMEOUT_S, "tracing.stop")
            secure_file(written, private=self.private)  # written by Playwright's driver, with its umask
            if self._shut:  # checked with no await before the rename: nothing lands after a fence
                log.warning("trace_not_written_fenced", directory=str(path.parent))
                return None
            os.replace(written, path)
            return path
        except Exception as exc:
            log.warning("trace_stop_failed", error=str(exc))
            return None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
