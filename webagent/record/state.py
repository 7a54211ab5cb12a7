"""``StateSink``: a successful run's signed-in browser state saved to a file, 0600 (``webagent auth
save``); failing to write it fails the run (its one purpose)."""

from __future__ import annotations

from pathlib import Path

import structlog

from ..browser.context import save_storage_state
from ..browser.session import BrowserSession
from ..errors import BrowserError
from ..records import RunResult
from .sink import RunSink

__all__ = ["StateSink"]

log = structlog.get_logger("webagent.record")


class StateSink(RunSink):
    """Saves the context's storage state to ``path`` when the run succeeds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.session: BrowserSession | None = None

    async def start(self, session: BrowserSession) -> None:
        self.session = session

    async def finish(self, result: RunResult | None) -> None:
        session = self.session
        if result is None or not result.success or session is None:
            return
        try:
            await save_storage_state(session.context, self.path, timeout_s=session.config.open_timeout_s)
        except (BrowserError, OSError) as exc:
            result.success = False
            result.stop_reason = "error"
            result.message = f"signed in, but the browser state could not be saved to {self.path}: {exc}"
            # The browser gone (a crash) or not answering: the infrastructure's, not the task's.
            result.infrastructure = isinstance(exc, BrowserError) and exc.infrastructure
            if isinstance(exc, BrowserError):
                self.error = exc
            log.warning("storage_state_not_saved", path=str(self.path), error=str(exc))
            return
        log.info("storage_state_saved", path=str(self.path))
