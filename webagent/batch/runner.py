"""The concurrent batch runner: a queue of tasks, N sessions at once, resumable results.

``DIR/results.jsonl`` gets exactly one line per finished task, written with a single ``write``
on an ``O_APPEND`` descriptor, so a killed run never leaves a partial line (a torn tail from a
crashed machine is cut off on resume). Re-running the same command skips finished ids. SIGINT
and SIGTERM stop new work and cleanly abandon in-flight tasks (they rerun on resume).

Each task is run to its line by the one task runner (``TaskRunner``, ``attempts.py``): its attempts,
and the re-runs of a run whose browser died (``CRASH_RERUNS``), whose browser failed before its
first step (``SETUP_RERUNS``), that ended with an infrastructure error (``INFRA_RERUNS``) or that
the watchdog stopped for making no progress (``STALL_RERUNS``).
Cancelling a run closes its browser context; that cleanup is bounded too (``cleanup_timeout_s``),
so a task always ends with its one line. The tasks run here (N coroutines on one ``Agent``), in
``workers`` processes of this machine (``processes.py``: each its own agent, driver and admission,
for batches larger than one Python thread can drive), or, with ``ray=RayCluster(...)``, on Ray
actors (``ray.py``), each calling the same ``TaskRunner``; either way this runner alone writes the
lines and counts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import structlog

from ..agent import Agent
from ..browser.deadline import browser_load
from ..browser.load import BrowserLoad
from ..browser.providers import FleetPool
from ..budget import Budget
from ..config import AgentConfig
from ..errors import ConfigError
from ..records import Step
from ..replay import ReplayCache
from ..runtime import private_outputs
from ..stream import TRACE_TIMEOUT_S
from ..tasks import TaskSpec, check_run_dirs, guarded, run_dir_name
from .admission import INITIAL, TICK_S, Admission
from .attempts import CRASH_RERUNS, INFRA_RERUNS, SETUP_RERUNS, STALL_RERUNS, TaskLimits, TaskRunner
from .nodebrowser import node_browser_refusal
from .outputs import BatchOutput
from .processes import WorkerPool
from .ray import RayCluster, RayPool
from .results import ResultsFile, ResumePlan, TaskResult, resume_plan
from .stats import BatchPhase, BatchStats, StepFigures
from .watchdog import BROWSER_LOST_GRACE_S

__all__ = [
    "CRASH_RERUNS",
    "DEFAULT_CLEANUP_TIMEOUT_S",
    "DEFAULT_STALL_TIMEOUT_S",
    "INFRA_RERUNS",
    "SETUP_RERUNS",
    "STALL_RERUNS",
    "BatchPhase",
    "BatchRunner",
    "BatchStats",
    "RayCluster",
]

log = structlog.get_logger("webagent.batch")

#: Seconds without progress (no step finished, no model call answered) before a run is cancelled.
DEFAULT_STALL_TIMEOUT_S = 300.0
#: Seconds a cancelled run gets beyond the deadlines of stopping its trace and closing its context
#: (twice, then it is left behind).
DEFAULT_CLEANUP_TIMEOUT_S = 30.0


class BatchRunner:
    """Runs tasks with bounded concurrency, writing DIR/results.jsonl: here, through one Agent, or
    on the actors of a Ray cluster (``ray``)."""

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
        retry_infra: bool = True,
        admission: bool = True,
        cache: ReplayCache | None = None,
        budgets: Sequence[Budget] = (),
        ray: RayCluster | None = None,
        workers: int = 1,
    ) -> None:
        """``stall_timeout_s``: seconds without progress before a run is cancelled and re-run (0: never);
        ``cleanup_timeout_s``: what a cancelled run gets to stop its trace and close its browser
        context (default: those two deadlines and ``DEFAULT_CLEANUP_TIMEOUT_S`` more);
        ``retry_infra``: on resume, run again the tasks whose line ended with the infrastructure's error;
        ``admission``: hold new sessions back while the browsers do not keep up (``concurrency`` is then
        the ceiling; off: always ``concurrency`` at once); ``cache``: a replay cache (each task's
        recording under its id); ``budgets``: limits every run shares (a suite's: not on Ray, where
        runs are in several processes); ``ray``: run the tasks on that Ray cluster's actors, each
        running up to ``concurrency`` at once; ``workers``: processes of this machine the
        ``concurrency`` sessions are spread over (1: all in this one; ``processes.auto_workers``
        says how many a size of batch wants)."""
        if cleanup_timeout_s is None:
            cleanup_timeout_s = TRACE_TIMEOUT_S + config.browser.open_timeout_s + DEFAULT_CLEANUP_TIMEOUT_S
        if concurrency < 1 or attempts < 1:
            raise ValueError("concurrency and attempts must be at least 1")
        if stall_timeout_s < 0 or cleanup_timeout_s <= 0:
            raise ValueError("stall_timeout_s must be at least 0 and cleanup_timeout_s more than 0")
        if ray is not None and ray.actors < 1:
            raise ValueError("a Ray cluster needs at least 1 actor")
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if ray is not None and workers > 1:
            raise ConfigError("a batch runs on Ray's actors or in worker processes here, not both: drop --workers")
        if workers > 1 and budgets:
            raise ConfigError(
                "a budget shared by every run (a suite's budget) is kept in one process and cannot span worker "
                "processes; drop the suite budget or run with --workers 1"
            )
        if ray is not None and budgets:
            raise ConfigError(
                "a budget shared by every run (a suite's budget) is kept in one process and cannot span Ray's "
                "actors; drop the suite budget or run without --ray"
            )
        check_run_dirs(task.id for task in tasks)  # no run overwrites another's files
        #: Whether the batch's outputs are its owner's only (its runs hold a secret: ``webagent.files.disk``).
        self.private = private_outputs(config, (task.browser for task in tasks))
        self.config = config
        self._redaction = config.secret_set()
        self.tasks = tasks
        #: Where the batch's files go: a local folder, or a URL staged in a local one (``outputs.py``).
        self.store = BatchOutput(output)
        #: The local folder the runs write to (the output itself, or a URL's staging folder).
        self.output = self.store.local
        self.concurrency = concurrency
        self.attempts = attempts
        self.sample_all = sample_all
        self.references = references or {}
        self.on_update = on_update or (lambda _: None)
        self.stall_timeout_s = stall_timeout_s
        self.cleanup_timeout_s = cleanup_timeout_s
        self.retry_infra = retry_infra
        self.cache = cache
        self.budgets = list(budgets)
        self.ray = ray
        self.workers = workers
        #: The Ray actors of the running batch (``ray`` set).
        self.pool: RayPool | None = None
        #: The worker processes of the running batch (``workers`` over 1).
        self.processes: WorkerPool | None = None
        #: What the browsers' answers say about the machine (admission and deadlines read it).
        self.load = BrowserLoad()
        self.admission = Admission(concurrency, self.load, initial=INITIAL if admission else concurrency)
        self._admit = admission
        #: Seconds a run may go on after its browser disconnected before it is cut off and re-run.
        self.browser_lost_grace_s = BROWSER_LOST_GRACE_S
        self._results: ResultsFile | None = None
        self.stopping = False
        self._workers: list[asyncio.Task[None]] = []
        self.stats = BatchStats(len(tasks), 0)
        #: The agent of the running batch (its browser pool says how many sessions are open).
        self.agent: Agent | None = None

    @property
    def results(self) -> ResultsFile:
        if self._results is None:
            self._results = ResultsFile(self.output / "results.jsonl", private=self.private)
        return self._results

    def stop(self) -> None:
        """Stop taking new tasks and abandon the ones in flight (they rerun on resume)."""
        if not self.stopping:
            log.warning("batch_stopping")
        self.stopping = True
        for worker in self._workers:
            worker.cancel()

    @property
    def limits(self) -> TaskLimits:
        """How each task is run: attempts, the watchdog's limits, reference answers."""
        return TaskLimits(
            attempts=self.attempts,
            sample_all=self.sample_all,
            stall_timeout_s=self.stall_timeout_s,
            cleanup_timeout_s=self.cleanup_timeout_s,
            browser_lost_grace_s=self.browser_lost_grace_s,
            references=self.references,
        )

    async def run(self) -> BatchStats:
        self._workers = []
        token = browser_load.set(self.load)  # every bounded browser wait of the batch is measured
        try:
            return await self._run()
        finally:
            browser_load.reset(token)

    async def _run(self) -> BatchStats:
        await self.store.open()  # a URL's results.jsonl read back first (a resume)
        uploading = asyncio.create_task(self.store.uploader()) if self.store.remote else None
        try:
            return await self._resume()
        finally:
            await self.store.close(uploading)  # every line written is uploaded, or the batch says not

    async def _resume(self) -> BatchStats:
        plan = resume_plan(self.results.finished(), self.tasks, retry_infra=self.retry_infra)
        self.results.forget(plan.infra_rerun)
        self.stats = resumed_stats(len(self.tasks), plan)
        if plan.kept or plan.infra_rerun:  # what it found is told at once
            log.info(
                "batch_resuming",
                kept=plan.kept,
                kept_failed=plan.kept_failed,
                infra_rerun=len(plan.infra_rerun),
                infra_kept=plan.infra_kept,
            )
            self.on_update(self.stats)
        try:
            if self.ray is not None:
                if plan.pending:
                    await self._run_on_ray(self.ray, plan.pending)
            elif self.workers > 1 and plan.pending:
                await self._run_in_processes(plan.pending)
            else:
                await self._run_here(plan.pending)
        finally:
            self.results.close()
            self.on_update(self.stats)
        return self.stats

    def _finished(self, result: TaskResult) -> None:
        """A task's line: written, then counted (the one place either is done). Redacted here too: a
        task's own url and goal may hold a suite variable's value (``AgentConfig.variables``)."""
        result = self._redaction.redact_model(result)
        self.results.append(result)  # a task that finished is kept, even while stopping
        self.store.task_done(run_dir_name(result.id))  # its run folder, then results.jsonl, uploaded
        self.stats.count_line(result)
        self._count_hosts()
        self.on_update(self.stats)

    def _stepped(self, task: TaskSpec, step: Step) -> None:
        self.stats.count_step(StepFigures.of(step))
        self._count_hosts()
        self.on_update(self.stats)

    def _count_hosts(self) -> None:
        """The browser hosts' own counts (sessions, crashes), from a fleet pool of this process."""
        if self.agent is not None and isinstance(self.agent.browsers, FleetPool):
            self.stats.host_counts = self.agent.browsers.host_figures()

    async def _run_here(self, pending: list[TaskSpec]) -> None:
        queue: asyncio.Queue[TaskSpec] = asyncio.Queue()
        for task in pending:
            queue.put_nowait(task)
        agent = self.agent = Agent(self.config)
        runner = TaskRunner(
            agent,
            self.output,
            self.limits,
            cache=self.cache,
            budgets=self.budgets,
            on_step=self._stepped,
            stopping=lambda: self.stopping,
        )
        if pending:
            self.on_update(self.stats)  # phase "launch"
            try:  # a browser that cannot launch is a usage error, not N failures; of the first task's kind
                await agent.browsers.start(hardened=guarded(pending[0], self.config))
            except BaseException:
                await agent.aclose()
                raise
            self.stats.phase = "run"
            self.on_update(self.stats)
        ticking = asyncio.create_task(self._tick(admission=True), name="webagent-admission")
        try:
            with self._signals():
                self._workers = [asyncio.create_task(self._worker(runner, queue)) for _ in range(self.concurrency)]
                await asyncio.gather(*self._workers, return_exceptions=True)
        finally:
            ticking.cancel()
            self._show()
            for run in list(runner.left_behind):  # closing the browsers below ends what they wait for
                run.cancel()
            self._count_hosts()
            await agent.aclose()

    async def _run_on_ray(self, cluster: RayCluster, pending: list[TaskSpec]) -> None:
        self.stats.phase = "ray"
        self.on_update(self.stats)
        cache = self.cache.path if self.cache is not None else None
        hardened = guarded(pending[0], self.config)
        per_actor = node_browser_refusal(self.config, pending)
        pool = self.pool = RayPool(
            cluster,
            self.config,
            self.output,
            self.limits,
            self.concurrency,
            cache=cache,
            hardened=hardened,
            staged=self.store.remote,
            per_actor=per_actor,
            node_hardened=per_actor is None and any(guarded(task, self.config) for task in pending),
        )
        async with pool:  # Ray started (or joined), each actor's browser launched
            self.stats.ray_browsers = pool.browsers
            await self._elsewhere(self._drive(pool, deque(pending)))  # signals after ray.init, which sets its own

    async def _run_in_processes(self, pending: list[TaskSpec]) -> None:
        self.on_update(self.stats)  # phase "launch"
        cache = self.cache.path if self.cache is not None else None
        root = logging.getLogger().getEffectiveLevel()  # the workers log as this process was set to
        pool = self.processes = WorkerPool(
            self.config,
            self.output,
            self.limits,
            workers=self.workers,
            concurrency=self.concurrency,
            admission=self._admit,
            cache=cache,
            verbosity=2 if root <= logging.DEBUG else 1 if root <= logging.INFO else 0,
            hardened=guarded(pending[0], self.config),
        )
        async with pool:  # each worker's browser launched
            await self._elsewhere(self._gather(pool, deque(pending)))

    async def _elsewhere(self, collecting: Coroutine[Any, Any, None]) -> None:
        """The runs started in other processes (Ray's actors, the workers): ``collecting`` takes their
        lines as they come, with the progress shown every second, until done or stopped (``stop``)."""
        self.stats.phase = "run"
        self.on_update(self.stats)
        ticking = asyncio.create_task(self._tick(admission=False), name="webagent-progress")
        try:
            with self._signals():
                self._workers = [asyncio.create_task(collecting)]
                for outcome in await asyncio.gather(*self._workers, return_exceptions=True):
                    if isinstance(outcome, Exception):  # not a stop (a cancel): the pool's own failure
                        raise outcome
        finally:
            ticking.cancel()
            if self.processes is not None:
                self._show()  # the workers' last figures

    async def _gather(self, pool: WorkerPool, pending: deque[TaskSpec]) -> None:
        async with contextlib.aclosing(pool.results(pending, self.stats)) as results:
            async for item in results:
                if isinstance(item, TaskResult):
                    self._finished(item)
                else:
                    self.stats.count_step(item)
                    self.on_update(self.stats)

    async def _drive(self, pool: RayPool, pending: deque[TaskSpec]) -> None:
        async with contextlib.aclosing(pool.results(pending, self.stats)) as results:
            async for result, steps in results:
                for step in steps:
                    self.stats.count_step(step)
                self._finished(result)

    @contextlib.contextmanager
    def _signals(self) -> Any:
        """SIGINT and SIGTERM stop the batch (``stop``) while the tasks run."""
        loop = asyncio.get_running_loop()
        handled = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stop)
                handled.append(sig)
        try:
            yield
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    async def _tick(self, *, admission: bool) -> None:
        """The progress shown every second, with the admission's limit reconsidered (``admission``:
        the sessions are this process's; a worker process and a Ray actor run their own)."""
        while True:
            await asyncio.sleep(TICK_S)
            if admission and self._admit:
                opening = self.agent.browsers.waiting_to_open if self.agent is not None else 0
                self.admission.update(opening)
            if admission or self.processes is not None:
                self._show()
            self.on_update(self.stats)

    def _show(self) -> None:
        if self.processes is not None:  # what the workers last reported
            self.stats.admission = self.processes.admission_state() or self.stats.admission
            self.stats.commands = self.processes.commands()
            return
        self.stats.admission = self.admission.state()
        load = self.load
        self.stats.commands = {"answered": load.answered, "extended": load.extended, "expired": load.expired}

    @property
    def open_sessions(self) -> int:
        """Sessions open now, in this process's browsers or the workers' (as they last reported)."""
        if self.processes is not None:
            return self.processes.open_sessions
        return self.agent.browsers.open_sessions if self.agent is not None else 0

    async def _worker(self, runner: TaskRunner, queue: asyncio.Queue[TaskSpec]) -> None:
        while not self.stopping:
            try:
                task = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            async with self.admission.place():  # a new session only while the browsers keep up
                self.stats.in_flight += 1
                try:
                    result = await runner.run(task)
                finally:
                    self.stats.in_flight -= 1
            self._finished(result)


def resumed_stats(total: int, plan: ResumePlan) -> BatchStats:
    """The counters of an invocation that resumes after ``plan``."""
    stats = BatchStats(total, plan.kept)
    stats.resumed_failed = plan.kept_failed
    stats.resumed_infra = len(plan.infra_rerun)
    stats.resumed_infra_kept = plan.infra_kept
    return stats
