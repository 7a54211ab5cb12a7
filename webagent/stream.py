"""``RunStream``: one run as an async iterator of ``Step`` records (what ``Agent.stream`` returns).

It opens the ``Episode`` of its ``RunSpec`` through the ``Runtime`` it is given
(``Runtime.open_episode``), hands each step to the run's recorder (``webagent.record``: redacted
once, then the run directory, spans, replay cache, saved state, Playwright trace, HAR, as the spec
asks) and yields it as recorded, keeps the pages' downloads in the run directory's ``downloads/``,
and says when the run last made progress (what the batch watchdog reads). ``events()`` yields the same steps and, before the
first, a ``Phase`` as each stage begins (launching the browser, opening the start URL, step 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator

import structlog

from .browser.deadline import on_wait_over
from .browser.session import BrowserSession
from .errors import BrowserError, WebAgentError
from .files.downloads import FOLDER_NAME, DownloadFolder
from .loop import Episode
from .record import TRACE_TIMEOUT_S, Recorder, run_recorder
from .records import Phase, PhaseName, RunResult, Step
from .runtime import RunSpec, Runtime

__all__ = ["SETUP_FAILED", "TRACE_TIMEOUT_S", "RunEvent", "RunStream"]

#: What ``RunStream.events()`` yields.
RunEvent = Phase | Step

log = structlog.get_logger("webagent")
#: How the result of a run whose browser failed before its first step begins (``set_up_failed``).
SETUP_FAILED = "the browser failed while the session was set up (not the task's failure): "


class RunStream:
    """An async iterator of Steps; ``result`` is set once the run has ended."""

    def __init__(self, runtime: Runtime, spec: RunSpec) -> None:
        """The run of ``spec`` (its limits applied once, ``Runtime.resolve``), not started yet."""
        spec = runtime.resolve(spec)
        self.runtime = runtime
        #: What the run redacts: the config's secrets and what its browser settings hold (a state's cookies).
        self.secrets = runtime.sessions.secrets(spec.browser)
        #: Whether what it writes is its owner's only (0700 / 0600: ``webagent.files.disk``), its run
        #: directory and its downloads folder: it types secrets, holds a signed-in state or a password,
        #: or saves one.
        self.private = runtime.sessions.private(spec.browser) or spec.save_state is not None
        #: The downloads folder in its run directory, made at the first download (a caller's is its own).
        self.downloads: DownloadFolder | None = None
        if spec.downloads is None and spec.output_dir is not None:
            self.downloads = DownloadFolder(spec.output_dir / FOLDER_NAME, private=self.private)
            spec = dataclasses.replace(spec, downloads=self.downloads)
        self.spec = spec
        self.url = spec.url
        self.goal = spec.goal
        self.output_dir = spec.output_dir
        self.budgets = list(spec.budgets or [])
        self.result: RunResult | None = None
        #: The run's browser session once open; its ``page`` is the tab the run drives (at the end:
        #: the one it ended on, which a new tab or a closed one may have changed).
        self.session: BrowserSession | None = None
        self._gen: AsyncGenerator[RunEvent, None] | None = None
        #: What the run leaves (made when it starts: its spans begin then).
        self.recorder: Recorder | None = None
        #: ``time.monotonic()`` of the last sign of progress: the run started, a step finished, a
        #: model call was answered or a bounded browser wait ended (what a batch watchdog looks at).
        self.last_progress = time.monotonic()
        #: True while the session waits for its turn to open a page on its browser (not a stall).
        self.queued = False
        #: True once the session is set up and the start page open: the first step has begun. What
        #: fails before is the set-up's (a batch counts a crash then apart: ``setup_crash``).
        self.stepping = False
        #: The error that ended the run, if one did: the episode's (``Episode.error``), the one that
        #: stopped the session's set-up (``set_up_failed``), or a saved state's that could not be written.
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
            await self._gen.aclose()

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self) -> AsyncGenerator[RunEvent, None]:
        self._progressed()
        # In this run's task: a browser wait that ends is progress. Unset at the end, so that the
        # caller's context does not keep the hook (and this stream) alive after the run.
        token = on_wait_over.set(self._progressed)
        run = self._run_episode()
        try:
            async for step in run:
                yield step
        finally:
            await run.aclose()
            with contextlib.suppress(ValueError):  # closed from another context: nothing to unset here
                on_wait_over.reset(token)

    async def _run_episode(self) -> AsyncGenerator[RunEvent, None]:
        spec = self.spec
        own_page = spec.page is None and spec.context is None
        guarded = (spec.policy or self.runtime.navigation_policy(spec.url)).active
        if own_page and self.runtime.browsers.launches_next(hardened=guarded):
            yield self._phase("launch")
        replay = None
        if spec.cache is not None:
            any_origin = spec.settings is not None and spec.settings.replay_any_origin
            replay = spec.cache.replay_for(
                spec.cache_key, goal=spec.goal, url=spec.url, expect=spec.expect, any_origin=any_origin
            )
        recorder = self.recorder = run_recorder(self.runtime, spec, replay=replay, on_progress=self._progressed)
        opened = self.runtime.open_episode(
            recorder.prepare(dataclasses.replace(spec, replay=replay)),
            on_session=self._opened,
            on_progress=self._progressed,
            on_queue=self._queued,
        )
        started = time.monotonic()
        try:
            async with opened as episode:
                assert self.session is not None
                steps = self._steps(episode, self.session, recorder)
                try:
                    async for step in steps:
                        yield step
                finally:  # closed early: the result and files before the session closes
                    await steps.aclose()
        except BrowserError as exc:
            if self.stepping or self.result is not None or not exc.infrastructure:
                raise  # the start page that does not open (NavigationError), a browser that cannot launch
            await self.set_up_failed(exc, time.monotonic() - started)
        finally:
            await recorder.finish(None)  # ended before any result (cancelled, raised): the files closed, the span ended
            await recorder.closed()  # the context is closed: what the browser writes then (a HAR)

    async def _steps(
        self, episode: Episode, session: BrowserSession, recorder: Recorder
    ) -> AsyncGenerator[RunEvent, None]:
        await recorder.start(session)
        steps = episode.steps()
        try:
            if self.spec.navigate:
                yield self._phase("open")
            if await episode.open():  # (steps() opens no more)
                self.stepping = True
                yield self._phase("step")
            async for step in steps:
                step = recorder.step(step)  # redacted: what the model echoed of a secret it saw on a page
                self._progressed()
                yield step
        finally:
            await steps.aclose()
            self.error = episode.error
            self._progressed()  # the episode has ended: what follows is bounded clean-up
            if episode.result is not None or self.stepping:  # else: the set-up's failure, recorded by its handler
                self.result = await recorder.finish(episode.result)
                self.error = recorder.error or self.error

    async def fence(self, timeout_s: float) -> bool:
        """Nothing more of the run written into its directory (a batch sets the run aside to re-run
        it there; cancelled, its clean-up may still go on): its sinks fenced (``Recorder.fence``: what
        they had begun finished within ``timeout_s``; False if a write still went on then), and no
        download kept in its folder any more."""
        if self.downloads is not None:
            self.downloads.fenced = True
        return self.recorder is None or await self.recorder.fence(timeout_s)

    async def set_up_failed(self, exc: WebAgentError, duration_s: float) -> None:
        """The browser failed before the first step (a crash or a deadline while the session was set
        up: the context opened, the guard installed, the start page opened): the run's result names
        it as the infrastructure's, never the task's, and it is recorded (its files written)."""
        log.warning("run_setup_failed", error=str(exc), infrastructure=exc.infrastructure)
        self.error = exc
        result = RunResult(
            success=False,
            stop_reason="error",
            message=f"{SETUP_FAILED}{exc}",
            infrastructure=exc.infrastructure,
            url=self.url,
            goal=self.goal,
            duration_s=round(duration_s, 3),
        )
        recorder = self.recorder or run_recorder(self.runtime, self.spec)
        self.result = await recorder.finish(result)
