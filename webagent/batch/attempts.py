"""The one task runner: a task (``TaskSpec``) to its results line (``TaskResult``).

``TaskRunner.run(task)`` (or ``run_task``) runs a task's attempts (pass@k) and the re-runs of a run
that was not the task's fault, and returns its line; the local batch's workers, the Ray actors and
``webagent test`` all call it. How each run is opened comes from the task alone (``TaskRunner.open``:
``TaskSpec.run_spec``, its start, its goal, a benchmark page that judges it, its ``TaskOptions`` and
``browser`` settings) and from what the runner shares between tasks (the agent, a replay cache, budgets).

Each run of an attempt gets a fresh browser session and runs under the watchdog. A run is re-run,
in the same attempt directory, when:

- its browser died under it (``browser_crash``; or it still waited ``browser_lost_grace_s`` after its
  browser disconnected; or its page's renderer, its page or its context died past what the session
  recovers from: a ``BrowserCrashError``): at most ``CRASH_RERUNS`` times per attempt, on a
  replacement browser when the browser died, else on a fresh session;
- the same happened before its first step, while its session was being set up (opening its context,
  installing the navigation guard, opening the start page), or a set-up command passed its deadline
  (``setup_crash``: whatever fails in the browser before the first step is never the task's): at most
  ``SETUP_RERUNS`` times per attempt. The re-run is a new run (its own time limit, steps and
  set-up deadlines, none spent by the failed set-up) in the same attempt: pass@k attempts are not
  consumed;
- it ended with an error of the machinery under it (``infrastructure``: ``WebAgentError.infrastructure``,
  e.g. a browser that did not answer setting the session up or a screenshot within its deadline, a
  model server that kept failing): at most ``INFRA_RERUNS`` times per attempt;
- the watchdog stopped it for making no progress (``stalled``): ``STALL_RERUNS`` time(s), its files
  kept aside in ``attempt-<k>-stalled``.

A run is fenced (``watchdog.fence_run``) before its directory is kept aside or removed and its
re-run writes there, and a run cut off before the runner writes its result: what it had queued is
written or dropped first, and nothing it does later (a cancelled run whose clean-up outlasted its
bound) lands in the re-run's directory or over the runner's result. A run whose result stands (only
its clean-up was slow) and is not re-run is not fenced: its late files (a HAR, a trace) are its own.

Each re-run is recorded with its reason and message (``AttemptRecord.reruns``). An attempt whose last
run still ended with a crash or an infrastructure error says so (``infrastructure``), and so does
the task's line when that attempt is the one that counts: a resumed batch runs such a task again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ..agent import Agent
from ..budget import Budget
from ..config import ROLES
from ..errors import BrowserCrashError, BrowserError, NavigationError, WebAgentError
from ..guard.navigation import NavigationPolicy
from ..records import RunResult, Step, Usage
from ..replay import ReplayCache
from ..runtime.access import data_start, task_set_policy
from ..stream import RunStream
from ..tasks import TaskSpec, benchmark_task, reference_matches, run_dir_name
from .results import AttemptRecord, Rerun, RerunReason, TaskResult, cost_of
from .watchdog import (
    BROWSER_LOST_GRACE_S,
    Fenced,
    cancel_run,
    fence_run,
    keep_aside,
    stuck_in,
    wait_for_progress,
    write_result,
)

__all__ = ["CRASH_RERUNS", "INFRA_RERUNS", "SETUP_RERUNS", "STALL_RERUNS", "TaskLimits", "TaskRunner", "run_task"]

log = structlog.get_logger("webagent.batch")

#: Re-runs of one attempt after the browser died under it (each time on a replacement browser).
CRASH_RERUNS = 2
#: Re-runs of one attempt after the browser failed before its first step (a crash or a deadline while
#: its session was set up), each on a fresh session.
SETUP_RERUNS = 2
#: Re-runs of one attempt after it ended with an infrastructure error (each on a fresh session).
INFRA_RERUNS = 2
#: Re-runs of one attempt after the watchdog stopped it for making no progress.
STALL_RERUNS = 1

_RERUNS: dict[RerunReason, int] = {
    "browser_crash": CRASH_RERUNS,
    "setup_crash": SETUP_RERUNS,
    "infrastructure": INFRA_RERUNS,
    "stalled": STALL_RERUNS,
}


@dataclass(frozen=True)
class TaskLimits:
    """How a runner runs every task: attempts (pass@k), the watchdog's limits, reference answers by
    task id (beside a task's own)."""

    attempts: int = 1
    sample_all: bool = False
    #: Seconds without progress before a run is cancelled and re-run (0: never).
    stall_timeout_s: float = 300.0
    #: What a cancelled run gets to stop its trace and close its browser context.
    cleanup_timeout_s: float = 150.0
    #: Seconds a run may go on after its browser disconnected before it is cut off and re-run.
    browser_lost_grace_s: float = BROWSER_LOST_GRACE_S
    references: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class _Outcome:
    """How one run of an attempt ended: why it is to be re-run, if it is."""

    result: RunResult
    crashed: bool = False
    stalled: bool = False
    infrastructure: bool = False
    #: It failed before its first step began, in the browser (its session was being set up).
    setup: bool = False
    #: The run's stream, fenced (``fence_run``) before its directory is set aside for a re-run.
    stream: Fenced | None = None

    @property
    def rerun_reason(self) -> RerunReason | None:
        if self.setup and (self.crashed or self.infrastructure):
            return "setup_crash"
        if self.crashed:
            return "browser_crash"
        if self.stalled:
            return "stalled"
        if self.infrastructure:
            return "infrastructure"
        return None


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


def _no_step(task: TaskSpec, step: Step) -> None:
    pass


class TaskRunner:
    """Runs tasks on one agent, each to its results line: attempts, re-runs, the watchdog.

    ``output``: the directory of the runs (``runs/<task>/attempt-<k>/``); ``limits``: attempts and
    the watchdog's limits; ``cache``: a replay cache, each task's recording under its id; ``budgets``:
    limits shared by all the runs (a suite's); ``on_step(task, step)`` is called as each step of a
    run ends; ``stopping()`` says when the caller is being stopped (a run still going ends then).
    """

    def __init__(
        self,
        agent: Agent,
        output: str | Path,
        limits: TaskLimits | None = None,
        *,
        cache: ReplayCache | None = None,
        budgets: Sequence[Budget] = (),
        on_step: Callable[[TaskSpec, Step], None] = _no_step,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.agent = agent
        self.output = Path(output)
        self.limits = limits or TaskLimits()
        self.cache = cache
        self.budgets = list(budgets)
        self.on_step = on_step
        self.stopping = stopping
        #: Runs whose cleanup outlasted its bound (cancelled when the batch closes its browsers).
        self.left_behind: set[asyncio.Task[Any]] = set()

    def open(self, task: TaskSpec, directory: Path) -> RunStream:
        """One run of ``task``, its files in ``directory``: the task's own run (``TaskSpec.run_spec``:
        its start and goal, a benchmark page that judges it, its options and ``browser`` settings)
        under its navigation policy, with what the runner shares (the replay cache, budgets) and the
        trace the task asks for."""
        page = benchmark_task(task.benchmark, task.seed) if task.benchmark is not None else None
        spec = task.run_spec(self.agent.config.agent, page=page)
        spec = dataclasses.replace(spec, policy=self.policy(task, page.url if page is not None else None))
        spec = dataclasses.replace(
            spec,
            output_dir=directory,
            cache=self.cache,
            cache_key=task.id if self.cache is not None else "",
            shared_budgets=tuple(self.budgets),
        )
        return self.agent.start(spec)

    def policy(self, task: TaskSpec, url: str | None = None) -> NavigationPolicy | None:
        """The navigation policy of ``task``'s runs other than the one its start URL gives (None):
        a benchmark page's (its task set's own server at ``url``: that one host:port, nothing else
        local), a file's not trusted (its start proves nothing: ``data_start``)."""
        if task.benchmark is not None:
            if url is None:
                url = benchmark_task(task.benchmark, task.seed).url
            return task_set_policy(self.agent.runtime, url)
        return data_start(self.agent.runtime, task.url) if not task.trusted else None

    async def run(self, task: TaskSpec) -> TaskResult:
        """The task's results line: its attempts, each with its re-runs. A bug of the runner is
        recorded on the line (stop reason ``error``, "internal error: ..."), never raised."""
        try:
            return await self._run(task)
        except Exception as exc:
            log.exception("task_crashed", task=task.id)
            return TaskResult.failed(task, f"internal error: {type(exc).__name__}: {exc}")

    async def _run(self, task: TaskSpec) -> TaskResult:
        task_dir = self.output / "runs" / run_dir_name(task.id)
        if task_dir.exists():  # left by an abandoned run: start clean
            shutil.rmtree(task_dir)
        records: list[AttemptRecord] = []
        usage = Usage()
        started = time.monotonic()
        retried = False
        for k in range(1, self.limits.attempts + 1):
            directory = task_dir / f"attempt-{k}"
            reruns: list[Rerun] = []
            while True:
                outcome = await self._attempt(task, directory, usage)
                reason = outcome.rerun_reason
                if reason is None or sum(r.reason == reason for r in reruns) >= _RERUNS[reason]:
                    break
                if outcome.stream is not None:  # nothing of it lands in the re-run's directory
                    await fence_run(outcome.stream, task.id, directory)
                reruns.append(self._set_aside(outcome, reason, directory, reruns))
                retried = True
                log.warning(
                    "task_rerun",
                    task=task.id,
                    attempt=k,
                    reason=reason,
                    rerun=len(reruns),
                    error=outcome.result.message,
                )
            records.append(self._record(k, directory, outcome, reruns))
            if outcome.result.success and not self.limits.sample_all:
                break
        return self._line(task, records, usage, started, retried)

    def _set_aside(self, outcome: _Outcome, reason: RerunReason, directory: Path, reruns: list[Rerun]) -> Rerun:
        """The record of a run that is replaced; a stalled run's files are kept beside the re-run's
        (they show where it was stuck), the others' removed."""
        kept = None
        if reason == "stalled":
            kept = keep_aside(directory, sum(r.reason == "stalled" for r in reruns) + 1)
        else:
            shutil.rmtree(directory, ignore_errors=True)
        result = outcome.result
        return Rerun(
            reason=reason,
            message=result.message,
            steps=result.steps,
            duration_s=result.duration_s,
            output_dir=str(kept.relative_to(self.output)) if kept else None,
        )

    def _record(self, k: int, directory: Path, outcome: _Outcome, reruns: list[Rerun]) -> AttemptRecord:
        result = outcome.result
        infrastructure = (
            not result.success
            and result.stop_reason == "error"
            and outcome.rerun_reason in ("browser_crash", "setup_crash", "infrastructure")
        )
        message = result.message
        if infrastructure and reruns:
            spent = sum(r.reason == outcome.rerun_reason for r in reruns)
            message = f"infrastructure failure, re-run {spent} time{'s' if spent != 1 else ''}: {message}"
        return AttemptRecord(
            attempt=k,
            success=result.success,
            answer=result.answer,
            stop_reason=result.stop_reason,
            message=message,
            steps=result.steps,
            duration_s=result.duration_s,
            output_dir=str(directory.relative_to(self.output)),
            retried=bool(reruns),
            stalled=outcome.stalled,
            infrastructure=infrastructure,
            reruns=reruns,
            feedback=result.feedback,
            replayed_steps=result.replayed_steps,
            calls_saved=result.calls_saved,
            trace=result.trace,
            downloads=result.downloads,
        )

    def _line(
        self, task: TaskSpec, records: list[AttemptRecord], usage: Usage, started: float, retried: bool
    ) -> TaskResult:
        best = next((r for r in records if r.success), records[-1])
        refs = self.limits.references.get(task.id) or list(task.reference)
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
            cost_usd=round(cost_of(usage, self.agent.config), 6),
            duration_s=round(time.monotonic() - started, 3),
            retried=retried,
            infrastructure=best.infrastructure,
            infra_reruns=sum(x.reason == "infrastructure" for r in records for x in r.reruns),
            reference=refs,
            reference_match=reference_matches(best.answer, refs) if refs else None,
            replayed_steps=sum(r.replayed_steps for r in records),
            calls_saved=sum(r.calls_saved for r in records),
            benchmark=task.benchmark,
            downloads=best.downloads,
        )

    async def _attempt(self, task: TaskSpec, directory: Path, usage: Usage) -> _Outcome:
        """One run of an attempt, under the watchdog: how it ended, and why it is to be re-run if it is."""
        limits = self.limits
        stream = self.open(task, directory)
        progress = _Progress()
        run = asyncio.create_task(self._consume(stream, task, usage, progress), name=f"webagent-run:{task.id}")
        try:
            stall = await wait_for_progress(
                stream, run, limits.stall_timeout_s, lost_grace_s=limits.browser_lost_grace_s
            )
        except asyncio.CancelledError:  # the batch stops: the run is abandoned (its context closed, bounded)
            await cancel_run(run, task.id, limits.cleanup_timeout_s, self.left_behind)
            raise
        if stall is None or run.done():
            return dataclasses.replace(run.result(), stream=stream)
        where = stuck_in(run, progress.steps, opened=stream.session is not None)
        ended = stream.result  # set when the episode has ended (cancelling sets one too: read it first)
        await cancel_run(run, task.id, limits.cleanup_timeout_s, self.left_behind)
        idle_s = round(stall.idle_s, 1)
        if ended is not None:  # only the clean-up after the episode was slow: its result stands
            log.warning("task_cleanup_stalled", task=task.id, idle_s=idle_s, where=where)
            _add_usage(usage, ended.usage)
            if not (directory / "result.json").exists():
                write_result(directory, ended, private=stream.private)
            # An episode that failed as its browser died (its clean-up then waiting on that browser)
            # is re-run as after any crash; otherwise its directory is final, and its late writes
            # (a HAR, a trace) still belong there: it is fenced only if it is set aside.
            crashed = stall.browser_lost and ended.stop_reason == "error"
            return _Outcome(ended, crashed=crashed, setup=crashed and not stream.stepping, stream=stream)
        await fence_run(stream, task.id, directory)  # cut off: nothing of it lands after the runner's result
        if stall.browser_lost:
            message = (
                f"the browser disconnected and the run was still waiting {limits.browser_lost_grace_s:g} s later "
                f"(stuck in {where})"
            )
            log.warning("task_cut_off_browser_lost", task=task.id, where=where, steps=progress.steps)
        else:
            message = f"no progress for {limits.stall_timeout_s:g} s (stuck in {where})"
            log.warning("task_stalled", task=task.id, idle_s=idle_s, where=where, steps=progress.steps)
        result = _failed(task, message, progress)
        _add_usage(usage, progress.usage)
        write_result(directory, result, private=stream.private)
        if stall.browser_lost:  # re-run on a replacement browser, as after any crash
            return _Outcome(result, crashed=True, setup=not stream.stepping)
        return _Outcome(result, stalled=True)

    async def _consume(self, stream: RunStream, task: TaskSpec, usage: Usage, progress: _Progress) -> _Outcome:
        agent = self.agent
        crashes_before = agent.browsers.crashes
        try:
            async for step in stream:
                progress.steps += 1
                for call in step.calls:
                    progress.usage.add_call(call)
                self.on_step(task, step)
                if self.stopping():  # the batch cancels in-flight tasks; one that went on anyway ends here
                    await stream.aclose()
                    raise asyncio.CancelledError
        except NavigationError as exc:  # the site, not the browser (a closed browser is a BrowserError)
            _add_usage(usage, progress.usage)
            return _Outcome(_failed(task, str(exc), progress))
        except WebAgentError as exc:  # e.g. the browser could not be launched, or died while opening the page
            _add_usage(usage, progress.usage)
            result = _failed(task, str(exc), progress, infrastructure=exc.infrastructure)
            if stream.session is not None:
                crashed = await stream.session.confirm_browser_crash()
            else:  # no session yet (the pool tried other browsers already): a crash if a browser died meanwhile
                crashed = isinstance(exc, BrowserError) and agent.browsers.crashes > crashes_before
            return _ended(stream, result, exc, crashed)
        assert stream.result is not None
        result = stream.result
        _add_usage(usage, result.usage)
        if result.stop_reason != "error":
            return _Outcome(result, infrastructure=result.infrastructure)
        crashed = stream.session is not None and await stream.session.confirm_browser_crash()
        return _ended(stream, result, stream.error, crashed)


def _ended(stream: RunStream, result: RunResult, error: WebAgentError | None, crashed: bool) -> _Outcome:
    """How a run that ended with an error ended: a crash (its browser died, or the page, its renderer
    or its context: ``BrowserCrashError``), before its first step (``setup``) or after, or another
    error of the infrastructure's (``result.infrastructure``), or the task's own."""
    crashed = crashed or isinstance(error, BrowserCrashError)
    in_browser = crashed or isinstance(error, BrowserError)
    return _Outcome(
        result,
        crashed=crashed,
        infrastructure=result.infrastructure,
        setup=in_browser and not stream.stepping,
    )


def _failed(task: TaskSpec, message: str, progress: _Progress, *, infrastructure: bool = False) -> RunResult:
    """The result of a run that ended in an error (``message``) after ``progress``."""
    return RunResult(
        success=False,
        stop_reason="error",
        message=message,
        infrastructure=infrastructure,
        url=task.url,
        goal=task.goal,
        steps=progress.steps,
        duration_s=progress.elapsed_s,
        usage=progress.usage,
    )


def _add_usage(total: Usage, run: Usage) -> None:
    """Add a run's usage to the task's."""
    for role in ROLES:
        total.role(role).add(run.role(role))


async def run_task(
    agent: Agent,
    task: TaskSpec,
    output: str | Path,
    limits: TaskLimits | None = None,
    *,
    cache: ReplayCache | None = None,
    budgets: Sequence[Budget] = (),
) -> TaskResult:
    """Run one task on ``agent`` to its results line (``TaskRunner(...).run(task)``); its runs are
    written under ``output/runs/``."""
    return await TaskRunner(agent, output, limits, cache=cache, budgets=budgets).run(task)
