"""The concurrent batch runner: a queue of tasks, N sessions at once, resumable results.

``DIR/results.jsonl`` gets exactly one line per finished task, written with a single ``write``
on an ``O_APPEND`` descriptor, so a killed run never leaves a partial line (a torn tail from a
crashed machine is cut off on resume). Re-running the same command skips finished ids. SIGINT
and SIGTERM stop new work and cleanly abandon in-flight tasks (they rerun on resume).

A run whose browser died under it is re-run on a replacement browser, up to ``CRASH_RERUNS``
times per attempt, in the same attempt directory. A watchdog cancels a run that makes no progress
(no step finished, no model call answered) for ``stall_timeout_s``: its files are kept beside the
attempt's (``attempt-<k>-stalled``, with a result.json saying where it was stuck) and it is re-run
``STALL_RERUNS`` time(s); a re-run that stalls as well ends the task with that error. Cancelling a
run closes its browser context; that cleanup is bounded too (``cleanup_timeout_s``), so a task
always ends with its one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ..agent import Agent
from ..config import ROLES, AgentConfig
from ..errors import BrowserError, NavigationError, WebAgentError
from ..records import RunResult, Usage
from ..stream import TRACE_TIMEOUT_S, RunStream
from .results import AttemptRecord, Rerun, RerunReason, ResultsFile, TaskResult, cost_of
from .tasks import TaskSpec, check_run_dirs, reference_matches, run_dir_name
from .watchdog import BROWSER_LOST_GRACE_S, cancel_run, keep_aside, stuck_in, wait_for_progress, write_result

__all__ = [
    "CRASH_RERUNS",
    "DEFAULT_CLEANUP_TIMEOUT_S",
    "DEFAULT_STALL_TIMEOUT_S",
    "STALL_RERUNS",
    "BatchRunner",
    "BatchStats",
]

log = structlog.get_logger("webagent.batch")

#: Re-runs of one attempt after the browser died under it (each time on a replacement browser).
CRASH_RERUNS = 2
#: Re-runs of one attempt after the watchdog stopped it for making no progress.
STALL_RERUNS = 1
#: Seconds without progress (no step finished, no model call answered) before a run is cancelled.
DEFAULT_STALL_TIMEOUT_S = 300.0
#: Seconds a cancelled run gets beyond the deadlines of stopping its trace and closing its context
#: (twice, then it is left behind).
DEFAULT_CLEANUP_TIMEOUT_S = 30.0


class BatchStats:
    """Live counters of this invocation (progress display and summary)."""

    def __init__(self, total: int, already_done: int) -> None:
        self.total = total
        self.done = already_done
        self.resumed = already_done
        self.succeeded = 0
        self.finished_now = 0
        self.errors = 0
        self.retried = 0
        self.stalled = 0
        self.steps = 0
        self.tokens = 0
        self.in_flight = 0
        self.started = time.monotonic()
        self.step_total_s: list[float] = []
        self.step_model_s: list[float] = []
        self.step_browser_s: list[float] = []

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


@dataclass
class _Outcome:
    """How one run of an attempt ended."""

    result: RunResult
    crashed: bool = False
    stalled: bool = False


class _Progress:
    """What the runner knows of a run in flight (for its record when it has to be stopped)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.steps = 0
        #: The model calls of the steps it has yielded (a run stopped mid-way keeps what it spent).
        self.usage = Usage()

    @property
    def elapsed_s(self) -> float:
        return round(time.monotonic() - self.started, 3)


class BatchRunner:
    """Runs tasks through one Agent with bounded concurrency, writing DIR/results.jsonl."""

    def __init__(
        self,
        config: AgentConfig,
        tasks: list[TaskSpec],
        output: str | Path,
        *,
        concurrency: int = 8,
        attempts: int = 1,
        sample_all: bool = False,
        references: dict[str, list[str]] | None = None,
        on_update: Callable[[BatchStats], None] | None = None,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        cleanup_timeout_s: float | None = None,
    ) -> None:
        """``stall_timeout_s``: seconds without progress before a run is cancelled and re-run (0: never);
        ``cleanup_timeout_s``: what a cancelled run gets to stop its trace and close its browser
        context (default: those two deadlines and ``DEFAULT_CLEANUP_TIMEOUT_S`` more)."""
        if cleanup_timeout_s is None:
            cleanup_timeout_s = TRACE_TIMEOUT_S + config.browser.open_timeout_s + DEFAULT_CLEANUP_TIMEOUT_S
        if concurrency < 1 or attempts < 1:
            raise ValueError("concurrency and attempts must be at least 1")
        if stall_timeout_s < 0 or cleanup_timeout_s <= 0:
            raise ValueError("stall_timeout_s must be at least 0 and cleanup_timeout_s more than 0")
        check_run_dirs(task.id for task in tasks)  # no run overwrites another's files
        self.config = config
        self.tasks = tasks
        self.output = Path(output)
        self.concurrency = concurrency
        self.attempts = attempts
        self.sample_all = sample_all
        self.references = references or {}
        self.on_update = on_update or (lambda _: None)
        self.stall_timeout_s = stall_timeout_s
        self.cleanup_timeout_s = cleanup_timeout_s
        #: Seconds a run may go on after its browser disconnected before it is cut off and re-run.
        self.browser_lost_grace_s = BROWSER_LOST_GRACE_S
        self._results: ResultsFile | None = None  # opened by run(): the runner also serves Ray actors
        self._left_behind: set[asyncio.Task[Any]] = set()  # runs whose cleanup outlasted its bound
        self.stopping = False
        self.stats = BatchStats(len(tasks), 0)
        #: The agent of the running batch (its browser pool says how many sessions are open).
        self.agent: Agent | None = None

    @property
    def results(self) -> ResultsFile:
        if self._results is None:
            self._results = ResultsFile(self.output / "results.jsonl")
        return self._results

    def stop(self) -> None:
        """Stop taking new tasks and abandon the ones in flight (they rerun on resume)."""
        if not self.stopping:
            log.warning("batch_stopping")
        self.stopping = True
        for worker in getattr(self, "_workers", []):
            worker.cancel()

    async def run(self) -> BatchStats:
        finished = self.results.finished()
        pending = [t for t in self.tasks if t.id not in finished]
        self.stats = BatchStats(len(self.tasks), len(self.tasks) - len(pending))
        queue: asyncio.Queue[TaskSpec] = asyncio.Queue()
        for task in pending:
            queue.put_nowait(task)
        try:
            agent = self.agent = Agent(self.config)
        except BaseException:
            self.results.close()
            raise
        if pending:
            try:
                await agent.browsers.start()  # a browser that cannot launch is a usage error, not N failures
            except BaseException:
                await agent.aclose()
                self.results.close()
                raise
        loop = asyncio.get_running_loop()
        handled = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stop)
                handled.append(sig)
        try:
            self._workers = [asyncio.create_task(self._worker(agent, queue)) for _ in range(self.concurrency)]
            await asyncio.gather(*self._workers, return_exceptions=True)
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
            for run in list(self._left_behind):  # closing the browsers below ends what they wait for
                run.cancel()
            await agent.aclose()
            self.results.close()
            self.on_update(self.stats)
        return self.stats

    async def _worker(self, agent: Agent, queue: asyncio.Queue[TaskSpec]) -> None:
        while not self.stopping:
            try:
                task = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            self.stats.in_flight += 1
            try:
                result = await self._run_task(agent, task)
            except Exception as exc:  # a bug must not silently drop the task: record it
                log.exception("task_crashed", task=task.id)
                result = TaskResult.failed(task, f"internal error: {type(exc).__name__}: {exc}")
            finally:
                self.stats.in_flight -= 1
            self.results.append(result)  # a task that finished is kept, even while stopping
            self.stats.done += 1
            self.stats.finished_now += 1
            self.stats.succeeded += result.success
            self.stats.errors += result.stop_reason == "error"
            self.on_update(self.stats)

    async def _run_task(self, agent: Agent, task: TaskSpec) -> TaskResult:
        task_dir = self.output / "runs" / run_dir_name(task.id)
        if task_dir.exists():  # left by an abandoned run: start clean
            shutil.rmtree(task_dir)
        records: list[AttemptRecord] = []
        usage = Usage()
        started = time.monotonic()
        retried = False
        for k in range(1, self.attempts + 1):
            directory = task_dir / f"attempt-{k}"
            reruns: list[Rerun] = []
            while True:
                outcome = await self._attempt(agent, task, directory, usage)
                reason: RerunReason | None = (
                    "browser_crash" if outcome.crashed else "stalled" if outcome.stalled else None
                )
                if reason is None or sum(r.reason == reason for r in reruns) >= _RERUNS[reason]:
                    break
                kept = None
                if reason == "stalled":  # its files show where it was stuck: kept beside the re-run's
                    kept = keep_aside(directory, sum(r.reason == "stalled" for r in reruns) + 1)
                else:
                    shutil.rmtree(directory, ignore_errors=True)
                result = outcome.result
                reruns.append(
                    Rerun(
                        reason=reason,
                        message=result.message,
                        steps=result.steps,
                        duration_s=result.duration_s,
                        output_dir=str(kept.relative_to(self.output)) if kept else None,
                    )
                )
                if not retried:
                    retried = True
                    self.stats.retried += 1
                log.warning(
                    "task_rerun", task=task.id, attempt=k, reason=reason, rerun=len(reruns), error=result.message
                )
                self.on_update(self.stats)
            result = outcome.result
            records.append(
                AttemptRecord(
                    attempt=k,
                    success=result.success,
                    answer=result.answer,
                    stop_reason=result.stop_reason,
                    message=result.message,
                    steps=result.steps,
                    duration_s=result.duration_s,
                    output_dir=str(directory.relative_to(self.output)),
                    retried=bool(reruns),
                    stalled=outcome.stalled,
                    reruns=reruns,
                    feedback=result.feedback,
                    replayed_steps=result.replayed_steps,
                    calls_saved=result.calls_saved,
                    trace=result.trace,
                )
            )
            if result.success and not self.sample_all:
                break
        best = next((r for r in records if r.success), records[-1])
        refs = self.references.get(task.id) or list(task.reference)
        return TaskResult(
            id=task.id,
            url=task.url,
            goal=task.goal,
            success=any(r.success for r in records),
            answer=best.answer,
            stop_reason=best.stop_reason,
            message=best.message,
            attempts=len(records),
            attempt_records=records,
            steps=sum(r.steps for r in records),
            usage=usage,
            cost_usd=round(cost_of(usage, self.config), 6),
            duration_s=round(time.monotonic() - started, 3),
            retried=retried,
            reference=refs,
            reference_match=reference_matches(best.answer, refs) if refs else None,
            replayed_steps=sum(r.replayed_steps for r in records),
            calls_saved=sum(r.calls_saved for r in records),
            benchmark=task.benchmark,
        )

    async def _attempt(self, agent: Agent, task: TaskSpec, directory: Path, usage: Usage) -> _Outcome:
        """One run of an attempt, under the watchdog: how it ended, whether its browser died under it,
        whether it was stopped for making no progress."""
        stream = self._stream(agent, task, directory)
        progress = _Progress()
        run = asyncio.create_task(self._consume(agent, stream, task, usage, progress), name=f"webagent-run:{task.id}")
        try:
            stall = await wait_for_progress(stream, run, self.stall_timeout_s, lost_grace_s=self.browser_lost_grace_s)
        except asyncio.CancelledError:  # stop(): the run is abandoned (its context closed, bounded)
            await cancel_run(run, task.id, self.cleanup_timeout_s, self._left_behind)
            raise
        if stall is None or run.done():
            return run.result()
        where = stuck_in(run, progress.steps, opened=stream.session is not None)
        ended = stream.result  # set when the episode has ended (cancelling sets one too: read it first)
        await cancel_run(run, task.id, self.cleanup_timeout_s, self._left_behind)
        idle_s = round(stall.idle_s, 1)
        if ended is not None:  # only the clean-up after the episode was slow: its result stands
            log.warning("task_cleanup_stalled", task=task.id, idle_s=idle_s, where=where)
            _add_usage(usage, ended.usage)
            if not (directory / "result.json").exists():
                write_result(directory, ended)
            # An episode that failed as its browser died (its clean-up then waiting on that browser)
            # is re-run as after any crash.
            return _Outcome(ended, crashed=stall.browser_lost and ended.stop_reason == "error")
        if stall.browser_lost:
            message = (
                f"the browser disconnected and the run was still waiting {self.browser_lost_grace_s:g} s later "
                f"(stuck in {where})"
            )
            log.warning("task_cut_off_browser_lost", task=task.id, where=where, steps=progress.steps)
        else:
            message = f"no progress for {self.stall_timeout_s:g} s (stuck in {where})"
            log.warning("task_stalled", task=task.id, idle_s=idle_s, where=where, steps=progress.steps)
            self.stats.stalled += 1
        result = self._failed(task, message, progress)
        _add_usage(usage, progress.usage)
        write_result(directory, result)
        if stall.browser_lost:  # re-run on a replacement browser, as after any crash
            return _Outcome(result, crashed=True)
        return _Outcome(result, stalled=True)

    async def _consume(
        self, agent: Agent, stream: RunStream, task: TaskSpec, usage: Usage, progress: _Progress
    ) -> _Outcome:
        crashes_before = agent.browsers.crashes
        try:
            async for step in stream:
                progress.steps += 1
                for call in step.calls:
                    progress.usage.add_call(call)
                t = step.timings
                self.stats.steps += 1
                self.stats.tokens += sum(c.usage.prompt_tokens + c.usage.completion_tokens for c in step.calls)
                self.stats.step_total_s.append(t.total_s)
                self.stats.step_model_s.append(t.model_s)
                self.stats.step_browser_s.append(t.observe_s + t.act_s)
                self.on_update(self.stats)
                if self.stopping:  # stop() cancels in-flight tasks; one that went on anyway ends here
                    await stream.aclose()
                    raise asyncio.CancelledError
        except NavigationError as exc:  # the site, not the browser (a closed browser is a BrowserError)
            _add_usage(usage, progress.usage)
            return _Outcome(self._failed(task, str(exc), progress))
        except WebAgentError as exc:  # e.g. the browser could not be launched, or died while opening the page
            _add_usage(usage, progress.usage)
            result = self._failed(task, str(exc), progress)
            if stream.session is not None:
                return _Outcome(result, crashed=await stream.session.confirm_browser_crash())
            # No session yet (the pool tried other browsers already): a crash if a browser died meanwhile.
            return _Outcome(result, crashed=isinstance(exc, BrowserError) and agent.browsers.crashes > crashes_before)
        assert stream.result is not None
        _add_usage(usage, stream.result.usage)
        if stream.result.stop_reason != "error" or stream.session is None:
            return _Outcome(stream.result)
        return _Outcome(stream.result, crashed=await stream.session.confirm_browser_crash())

    @staticmethod
    def _failed(task: TaskSpec, message: str, progress: _Progress) -> RunResult:
        """The result of a run that ended in an error (``message``) after ``progress``."""
        return RunResult(
            success=False,
            stop_reason="error",
            message=message,
            url=task.url,
            goal=task.goal,
            steps=progress.steps,
            duration_s=progress.elapsed_s,
            usage=progress.usage,
        )

    def _stream(self, agent: Agent, task: TaskSpec, directory: Path) -> RunStream:
        """The run of one attempt (subclasses add per-task options); a benchmark task's page is its judge."""
        if task.benchmark is not None:
            from ..env.tasks import benchmark_task

            page = benchmark_task(task.benchmark, task.seed)
            return agent.stream(page.url, page.goal, output_dir=directory, task=page, **_own_browser(task))
        return agent.stream(task.url, task.goal, output_dir=directory, **_own_browser(task))


def _own_browser(task: TaskSpec) -> dict[str, Any]:
    """The task's own browser session settings, for ``Agent.stream`` (nothing when it has none)."""
    return {"browser": task.browser} if task.browser is not None else {}


_RERUNS: dict[RerunReason, int] = {"browser_crash": CRASH_RERUNS, "stalled": STALL_RERUNS}


def _add_usage(total: Usage, run: Usage) -> None:
    """Add a run's usage to the task's."""
    for role in ROLES:
        total.role(role).add(run.role(role))
