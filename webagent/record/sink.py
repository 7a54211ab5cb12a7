"""``RunSink``, one output of a run, and ``Recorder``, which redacts a run's records once and hands
them to each of its sinks in turn.

A sink is told the run's browser session once it is open (``start``), each step as it ends
(``step``), the result (``finish``: it may amend it, e.g. the trace's path, or a state that could
not be saved), and that the run's browser context has closed (``closed``: what the browser writes
only then, a HAR). ``prepare`` lets a sink ask for something of the context before it opens (the
HAR's recording). The base class does nothing at each point, so a sink says only what it does.

A run that a batch sets aside to re-run it in the same directory is fenced (``fence``): each sink
finishes, within a bound, what it had begun writing into the run directory and writes nothing there
after, whatever the run (cancelled, its clean-up maybe still going) still does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from ..browser.session import BrowserSession
from ..errors import WebAgentError
from ..guard.secrets import Secrets
from ..records import RunResult, Step
from ..runtime import RunSpec

__all__ = ["Recorder", "RunSink"]

log = structlog.get_logger("webagent.record")


class RunSink:
    """One output of a run; each method does nothing unless the sink overrides it."""

    #: The error this sink met that ends the run as failed (a signed-in state that could not be saved).
    error: WebAgentError | None = None

    def prepare(self, spec: RunSpec) -> RunSpec:
        """The run spec with what this sink needs of the run's context (before it opens)."""
        return spec

    async def start(self, session: BrowserSession) -> None:
        """The run's browser session is open (before the start page)."""

    def step(self, step: Step) -> None:
        """A step has ended (``step`` already redacted)."""

    async def finish(self, result: RunResult | None) -> None:
        """The run has ended with ``result`` (redacted; None: it ended without one), its session still open."""

    async def closed(self) -> None:
        """The run's browser context has closed."""

    async def fence(self, timeout_s: float) -> bool:
        """Write nothing more into the run directory from now on; True once what this sink had begun
        writing there is done (within ``timeout_s``), False if it was still going then."""
        return True


class Recorder:
    """A run's sinks behind one door: every record is redacted once, here, then given to each sink
    in order (the sinks' ``finish`` in that order too: the first may amend the result the next see)."""

    def __init__(
        self,
        secrets: Secrets,
        sinks: Sequence[RunSink],
        *,
        private: bool = False,
        on_progress: Callable[[], None] = lambda: None,
    ) -> None:
        """``secrets``: what is redacted from every record; ``private``: whether what the sinks
        write is their owner's only (``webagent.files.disk``); ``on_progress``: called after each sink's
        bounded clean-up at the end (a batch watchdog's sign of life)."""
        self.secrets = secrets
        self.private = private
        self.sinks = list(sinks)
        self.on_progress = on_progress
        self._finished = False

    def sink(self, kind: type[RunSink]) -> RunSink | None:
        """The recorder's sink of that class, if it has one."""
        return next((s for s in self.sinks if isinstance(s, kind)), None)

    @property
    def error(self) -> WebAgentError | None:
        """The first error a sink met that failed the run."""
        return next((s.error for s in self.sinks if s.error is not None), None)

    def prepare(self, spec: RunSpec) -> RunSpec:
        for sink in self.sinks:
            spec = sink.prepare(spec)
        return spec

    async def start(self, session: BrowserSession) -> None:
        for sink in self.sinks:
            await sink.start(session)

    def step(self, step: Step) -> Step:
        """``step`` redacted (what the model echoed of a secret it saw on a page), given to every sink."""
        step = self.secrets.redact_model(step)
        for sink in self.sinks:
            sink.step(step)
        return step

    async def finish(self, result: RunResult | None) -> RunResult | None:
        """``result`` redacted, given to every sink (once: a second call does nothing); the result
        as the sinks left it."""
        if self._finished:
            return result
        self._finished = True
        redacted = self.secrets.redact_model(result) if result is not None else None
        for sink in self.sinks:
            await sink.finish(redacted)
            self.on_progress()
        return redacted

    async def closed(self) -> None:
        for sink in self.sinks:
            await sink.closed()
            self.on_progress()

    async def fence(self, timeout_s: float) -> bool:
        """Every sink fenced (``RunSink.fence``), all within ``timeout_s``: True once nothing of the
        run is being written into its directory or will be; False if a write still went on then."""
        fenced = await asyncio.gather(*(sink.fence(timeout_s) for sink in self.sinks), return_exceptions=True)
        for sink, outcome in zip(self.sinks, fenced, strict=True):
            if isinstance(outcome, BaseException):  # e.g. the file closed on a full disk: logged, not raised
                log.error("run_fence_failed", sink=type(sink).__name__, error=str(outcome) or type(outcome).__name__)
        return all(outcome is True for outcome in fenced)
