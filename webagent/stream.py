"""``RunStream``: one run as an async iterator of ``Step`` records (what ``Agent.stream`` returns).

It opens the ``Episode`` of its ``RunSpec`` through the ``Runtime`` it is given
(``Runtime.open_episode``), yields each step with secrets redacted, writes the run directory as it
goes (the pages' downloads in its ``downloads/`` folder), keeps the replay cache and an optional
Playwright trace, and says when the run last made progress (what the batch watchdog reads). ``events()`` yields the same steps and, before the
first, a ``Phase`` as each stage begins (launching the browser, opening the start URL, step 1).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from .browser.context import save_storage_state
from .browser.deadline import on_wait_over, within
from .browser.session import BrowserSession
from .budget import Budget
from .downloads import FOLDER_NAME, DownloadFolder
from .errors import BrowserError, WebAgentError
from .files import make_dir, secure_file
from .loop import Episode
from .records import Phase, PhaseName, RunResult, Step
from .replay import ReplayCache, StepReplay
from .runs.trajectory import RunFiles
from .runtime import RunSpec, Runtime
from .tasks import TraceMode
from .telemetry import runs as telemetry

__all__ = ["SETUP_FAILED", "TRACE_TIMEOUT_S", "RunEvent", "RunStream"]

#: What ``RunStream.events()`` yields.
RunEvent = Phase | Step

log = structlog.get_logger("webagent")
TRACE_TIMEOUT_S = 60.0  # writing a trace of a long run takes a while
#: How the result of a run whose browser failed before its first step begins (``set_up_failed``).
SETUP_FAILED = "the browser failed while the session was set up (not the task's failure): "


class RunStream:
    """An async iterator of Steps; ``result`` is set once the run has ended."""

    def __init__(
        self,
        runtime: Runtime,
        spec: RunSpec,
        *,
        output_dir: str | Path | None = None,
        cache: ReplayCache | None = None,
        cache_key: str = "",
        budgets: list[Budget] | None = None,
        trace: TraceMode = "off",
    ) -> None:
        """``budgets``: limits shared with other runs, after the spec's settings' own."""
        settings = spec.settings or runtime.config.agent
        self.runtime = runtime
        self.spec = spec.replace(settings=settings, budgets=runtime.run_budgets(settings, budgets or []))
        #: What the run redacts: the config's secrets and what its browser settings hold (a state's cookies).
        self.secrets = runtime.sessions.secrets(spec.browser)
        #: Whether what it writes is its owner's only (0700 / 0600: ``webagent.files``), its run
        #: directory and its downloads folder: it types secrets, holds a signed-in state or a password,
        #: or saves one.
        self.private = runtime.sessions.private(spec.browser) or spec.save_state is not None
        self.url = spec.url
        self.goal = spec.goal
        self.output_dir = Path(output_dir) if output_dir is not None else None
        if self.spec.downloads is None and self.output_dir is not None:  # made at the first download
            folder = DownloadFolder(self.output_dir / FOLDER_NAME, private=self.private)
            self.spec = self.spec.replace(downloads=folder)
        self.cache = cache
        self.cache_key = cache_key
        self.budgets = list(self.spec.budgets or [])
        self.trace = trace
        self.result: RunResult | None = None
        #: The run's browser session once open; its ``page`` is the tab the run drives (at the end:
        #: the one it ended on, which a new tab or a closed one may have changed).
        self.session: BrowserSession | None = None
        self._gen: AsyncIterator[RunEvent] | None = None
        #: ``time.monotonic()`` of the last sign of progress: the run started, a step finished, a
        #: model call was answered or a bounded browser wait ended (what a batch watchdog looks at).
        self.last_progress = time.monotonic()
        #: True while the session waits for its turn to open a page on its browser (not a stall).
        self.queued = False
        #: True once the session is set up and the start page open: the first step has begun. What
        #: fails before is the set-up's (a batch counts a crash then apart: ``setup_crash``).
        self.stepping = False
        #: The error that ended the run, if one did: the episode's (``Episode.error``), or the one that
        #: stopped the session's set-up (``set_up_failed``).
        self.error: WebAgentError | None = None

    @property
    def browser_lost(self) -> bool:
        """Whether the browser under the run's session disconnected (a batch watchdog cuts off a
        run that still waits some seconds later)."""
        return self.session is not None and self.session.browser_crashed

    def _progressed(self) -> None:
        self.last_progress = time.monotonic()

    def _opened(self, session: BrowserSession) -> None:
        self.session = session

    def _queued(self, waiting: bool) -> None:
        self.queued = waiting
        self._progressed()

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> Step:
        while True:
            event = await self._next_event()
            if isinstance(event, Step):
                return event

    async def events(self) -> AsyncIterator[RunEvent]:
        """The run as it goes: a ``Phase`` as each stage before the first step begins, then each
        ``Step`` (what ``async for step in stream`` yields alone)."""
        while True:
            try:
                event = await self._next_event()
            except StopAsyncIteration:
                return
            yield event

    async def _next_event(self) -> RunEvent:
        if self._gen is None:
            self._gen = self._run()
        return await self._gen.__anext__()

    def _phase(self, name: PhaseName) -> Phase:
        return Phase(name=name, url=self.url)

    async def aclose(self) -> None:
        if self._gen is not None:
            await self._gen.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self) -> AsyncIterator[RunEvent]:
        self._progressed()
        # In this run's task: a browser wait that ends is progress. Unset at the end, so that the
        # caller's context does not keep the hook (and this stream) alive after the run.
        token = on_wait_over.set(self._progressed)
        run = self._run_episode()
        try:
            async for step in run:
                yield step
        finally:
            await run.aclose()  # type: ignore[attr-defined]
            with contextlib.suppress(ValueError):  # closed from another context: nothing to unset here
                on_wait_over.reset(token)

    async def _run_episode(self) -> AsyncIterator[RunEvent]:
        spec = self.spec
        own_page = spec.page is None and spec.context is None
        guarded = (spec.policy or self.runtime.navigation_policy(spec.url)).active
        if own_page and self.runtime.browsers.launches_next(hardened=guarded):
            yield self._phase("launch")
        replay = None
        if self.cache is not None:
            any_origin = spec.settings is not None and spec.settings.replay_any_origin
            replay = self.cache.replay_for(
                self.cache_key, goal=spec.goal, url=spec.url, expect=spec.expect, any_origin=any_origin
            )
        opened = self.runtime.open_episode(
            spec.replace(replay=replay),
            on_session=self._opened,
            on_progress=self._progressed,
            on_queue=self._queued,
        )
        started = time.monotonic()
        try:
            async with opened as episode:
                assert self.session is not None
                steps = self._steps(episode, self.session, replay)
                try:
                    async for step in steps:
                        yield step
                finally:  # closed early: the result and files before the session closes
                    await steps.aclose()  # type: ignore[attr-defined]
        except BrowserError as exc:
            if self.stepping or self.result is not None or not exc.infrastructure:
                raise  # the start page that does not open (NavigationError), a browser that cannot launch
            self.set_up_failed(exc, time.monotonic() - started)

    async def _steps(
        self, episode: Episode, session: BrowserSession, replay: StepReplay | None
    ) -> AsyncIterator[RunEvent]:
        secrets = self.secrets
        files = RunFiles(self.output_dir, private=self.private)
        # No trace when secrets are set: a trace's DOM snapshots would hold the typed values (and
        # its network log a signed-in state's cookies). A suite's variables alone keep it.
        own_page = self.spec.page is None and self.spec.context is None
        tracing = self.trace != "off" and own_page and not secrets.credentials
        if tracing:
            await _start_tracing(session)
        steps = episode.steps()
        spans = telemetry.run_trace(self.goal, self.url, redact=secrets.redact, price=self.runtime.price)
        try:
            if self.spec.navigate:
                yield self._phase("open")
            if await episode.open():  # (steps() opens no more)
                self.stepping = True
                yield self._phase("step")
            async for step in steps:
                step = secrets.redact_model(step)  # what the model echoed of a secret it saw on a page
                files.step(step)
                if spans is not None:
                    spans.step(step)
                self._progressed()
                yield step
        finally:
            await steps.aclose()  # type: ignore[attr-defined]
            self.result = secrets.redact_model(episode.result) if episode.result is not None else None
            self.error = episode.error
            if spans is not None:
                spans.end(self.result)
            self._progressed()  # the episode has ended: what follows is bounded clean-up
            if self.result is not None and self.cache is not None and replay is not None and self.result.success:
                self.cache.update(
                    self.cache_key,
                    replay,
                    url=self.url,
                    goal=self.goal,
                    expect=self.spec.expect,
                    redact=secrets.redact_model,
                )
            if self.spec.save_state is not None and self.result is not None and self.result.success:
                await self._save_state(session, self.spec.save_state)
            if tracing and self.output_dir is not None:
                keep = self.trace == "always" or not (self.result and self.result.success)
                trace = await _stop_tracing(session, self.output_dir / "trace.zip" if keep else None, self.private)
                self._progressed()
                if trace and self.result is not None:
                    self.result.trace = str(trace)
            files.finish(self.result)

    def set_up_failed(self, exc: WebAgentError, duration_s: float) -> None:
        """The browser failed before the first step (a crash or a deadline while the session was set
        up: the context opened, the guard installed, the start page opened): the run's result names
        it as the infrastructure's, never the task's, and its files are written."""
        log.warning("run_setup_failed", error=str(exc), infrastructure=exc.infrastructure)
        self.error = exc
        self.result = RunResult(
            success=False,
            stop_reason="error",
            message=f"{SETUP_FAILED}{exc}",
            infrastructure=exc.infrastructure,
            url=self.url,
            goal=self.goal,
            duration_s=round(duration_s, 3),
        )
        RunFiles(self.output_dir, private=self.private).finish(self.result)

    async def _save_state(self, session: BrowserSession, path: Path) -> None:
        """The signed-in state of a successful run, written 0600 (``webagent auth save``); a
        failure to write it makes the run fail (its one purpose)."""
        try:
            await save_storage_state(session.context, path, timeout_s=session.config.open_timeout_s)
        except (BrowserError, OSError) as exc:
            assert self.result is not None
            self.result.success = False
            self.result.stop_reason = "error"
            self.result.message = f"signed in, but the browser state could not be saved to {path}: {exc}"
            # The browser gone (a crash) or not answering: the infrastructure's, not the task's.
            self.result.infrastructure = isinstance(exc, BrowserError) and exc.infrastructure
            if isinstance(exc, BrowserError):
                self.error = exc
            log.warning("storage_state_not_saved", path=str(path), error=str(exc))
            return
        self._progressed()
        log.info("storage_state_saved", path=str(path))


async def _start_tracing(session: BrowserSession) -> None:
    try:
        tracing = session.page.context.tracing
        await within(tracing.start(screenshots=True, snapshots=True), TRACE_TIMEOUT_S, "tracing.start")
    except Exception as exc:  # a trace is a debugging aid: never fail a run for it
        log.warning("trace_start_failed", error=str(exc))


async def _stop_tracing(session: BrowserSession, path: Path | None, private: bool) -> Path | None:
    try:
        tracing = session.page.context.tracing
        if path is None:
            await within(tracing.stop(), TRACE_TIMEOUT_S, "tracing.stop")
            return None
        make_dir(path.parent, private=private)
        await within(tracing.stop(path=path), TRACE_TIMEOUT_S, "tracing.stop")
        secure_file(path, private=private)  # written by Playwright's driver, with its umask
        return path
    except Exception as exc:
        log.warning("trace_stop_failed", error=str(exc))
        return None
