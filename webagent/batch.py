"""The concurrent batch runner: a queue of tasks, N sessions at once, resumable results.

``DIR/results.jsonl`` gets exactly one line per finished task, written with a single ``write``
on an ``O_APPEND`` descriptor, so a killed run never leaves a partial line (a torn tail from a
crashed machine is cut off on resume). Re-running the same command skips finished ids. SIGINT
and SIGTERM stop new work and cleanly abandon in-flight tasks (they rerun on resume).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import structlog
from pydantic import BaseModel, Field

from .agent import Agent, RunStream
from .config import ROLES, AgentConfig
from .errors import InputError, NavigationError, WebAgentError
from .records import RunResult, Usage
from .tasks import TaskSpec, reference_matches

__all__ = ["AttemptRecord", "BatchRunner", "BatchStats", "ResultsFile", "TaskResult"]

log = structlog.get_logger("webagent.batch")


class AttemptRecord(BaseModel):
    attempt: int
    success: bool
    answer: str | None
    stop_reason: str
    message: str
    steps: int
    duration_s: float
    output_dir: str
    retried: bool = False
    feedback: list[str] = []
    replayed_steps: int = 0
    calls_saved: int = 0
    trace: str | None = None


class TaskResult(BaseModel):
    """One line of results.jsonl."""

    id: str
    url: str
    goal: str
    success: bool = Field(description="A validated success in any attempt")
    answer: str | None
    stop_reason: str
    message: str
    attempts: int = Field(description="Attempts run (pass@k)")
    attempt_records: list[AttemptRecord]
    steps: int
    usage: Usage
    cost_usd: float
    duration_s: float
    retried: bool = Field(description="Re-run after its browser crashed")
    reference: list[str] = []
    reference_match: bool | None = None
    replayed_steps: int = Field(default=0, description="Steps replayed from a replay cache")
    calls_saved: int = Field(default=0, description="Model calls the replay cache saved")

    @classmethod
    def failed(cls, task: TaskSpec, message: str) -> TaskResult:
        """The line of a task that could not run at all (stop reason ``error``)."""
        return cls(
            id=task.id,
            url=task.url,
            goal=task.goal,
            success=False,
            answer=None,
            stop_reason="error",
            message=message,
            attempts=0,
            attempt_records=[],
            steps=0,
            usage=Usage(),
            cost_usd=0.0,
            duration_s=0.0,
            retried=False,
        )


class ResultsFile:
    """Append-only results.jsonl with atomic lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._repair()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _repair(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):  # torn tail from a crash: drop it
            cut = data.rfind(b"\n") + 1
            with self.path.open("r+b") as fh:
                fh.truncate(cut)
            log.warning("results_torn_line_dropped", path=str(self.path), bytes=len(data) - cut)

    def finished(self) -> dict[str, TaskResult]:
        done: dict[str, TaskResult] = {}
        if self.path.exists():
            for number, line in enumerate(self.path.read_text(encoding="utf-8").split("\n"), start=1):
                if line.strip():
                    try:
                        result = TaskResult.model_validate_json(line)
                    except ValueError:
                        raise InputError(
                            f"{self.path}:{number} is not a webagent result line; use another --output directory"
                        ) from None
                    done[result.id] = result
        return done

    def append(self, result: TaskResult) -> None:
        line = (result.model_dump_json() + "\n").encode()
        written = os.write(self._fd, line)
        if written != len(line):  # pragma: no cover - disk full
            raise OSError(f"short write to {self.path}")

    def close(self) -> None:
        os.close(self._fd)


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
    ) -> None:
        if concurrency < 1 or attempts < 1:
            raise ValueError("concurrency and attempts must be at least 1")
        self.config = config
        self.tasks = tasks
        self.output = Path(output)
        self.concurrency = concurrency
        self.attempts = attempts
        self.sample_all = sample_all
        self.references = references or {}
        self.on_update = on_update or (lambda _: None)
        self._results: ResultsFile | None = None  # opened by run(): the runner also serves Ray actors
        self.stopping = False
        self.stats = BatchStats(len(tasks), 0)

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
            agent = Agent(self.config)
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
        task_dir = self.output / "runs" / _safe_name(task.id)
        if task_dir.exists():  # left by an abandoned run: start clean
            shutil.rmtree(task_dir)
        records: list[AttemptRecord] = []
        usage = Usage()
        started = time.monotonic()
        retried = False
        for k in range(1, self.attempts + 1):
            result, crashed = await self._attempt(agent, task, task_dir / f"attempt-{k}", usage)
            if crashed and not retried:
                retried = True
                self.stats.retried += 1
                log.warning("task_retried_after_browser_crash", task=task.id, attempt=k)
                shutil.rmtree(task_dir / f"attempt-{k}", ignore_errors=True)
                result, _ = await self._attempt(agent, task, task_dir / f"attempt-{k}", usage)
            records.append(
                AttemptRecord(
                    attempt=k,
                    success=result.success,
                    answer=result.answer,
                    stop_reason=result.stop_reason,
                    message=result.message,
                    steps=result.steps,
                    duration_s=result.duration_s,
                    output_dir=str((task_dir / f"attempt-{k}").relative_to(self.output)),
                    retried=crashed,
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
        )

    async def _attempt(self, agent: Agent, task: TaskSpec, directory: Path, usage: Usage) -> tuple[RunResult, bool]:
        """One attempt; returns its result and whether its browser crashed under it."""
        stream = self._stream(agent, task, directory)
        try:
            async for step in stream:
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
            result = RunResult(success=False, stop_reason="error", message=str(exc), url=task.url, goal=task.goal)
            return result, False
        except WebAgentError as exc:  # e.g. the browser could not be launched, or died while opening the page
            result = RunResult(success=False, stop_reason="error", message=str(exc), url=task.url, goal=task.goal)
            return result, bool(stream.session and await stream.session.confirm_browser_crash())
        assert stream.result is not None
        for role in ROLES:
            usage.role(role).add(stream.result.usage.role(role))
        if stream.result.stop_reason != "error" or stream.session is None:
            return stream.result, False
        return stream.result, await stream.session.confirm_browser_crash()

    def _stream(self, agent: Agent, task: TaskSpec, directory: Path) -> RunStream:
        """The run of one attempt (subclasses add per-task options)."""
        return agent.stream(task.url, task.goal, output_dir=directory)


def cost_of(usage: Usage, config: AgentConfig) -> float:
    """Dollar cost of a usage record at the per-role prices in the config."""
    total = 0.0
    for role in ROLES:
        u = usage.role(role)
        total += config.role(role).cost(u.prompt_tokens, u.completion_tokens)
    return total


def _safe_name(task_id: str) -> str:
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id).strip(".")[:100] or "task"
    if name != task_id:  # keep distinct ids distinct after sanitising
        name += "-" + hashlib.sha1(task_id.encode()).hexdigest()[:8]
    return name


def read_results(output: str | Path) -> list[TaskResult]:
    path = Path(output) / "results.jsonl"
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): answers may hold U+2028
    return [TaskResult.model_validate(json.loads(line)) for line in lines if line.strip()]
