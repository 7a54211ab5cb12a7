"""A batch's sessions spread over worker processes on this machine (``--workers N``).

One Python thread drives every session of a local batch: its event loop, the Playwright driver's
messages, the model calls' HTTP, the run files. At a few hundred sessions that thread is the limit
(on a busy machine it waits for a CPU between every browser round trip: docs/benchmarks.md, "Soak";
how it was found: docs/benchmarks-history.md, 2026-12-02, issue 27). ``WorkerPool`` starts N
processes (``worker.py``), each with its own agent, browser pool, driver and admission control,
hands each task to the worker with the fewest in flight (each holds at most its share of
``--concurrency``) and yields the lines and step figures they send back, for the one
``BatchRunner`` that writes ``results.jsonl`` and counts them. A worker that dies (killed, out of
memory) is replaced and its tasks in flight handed out again, up to ``WORKER_RETRIES`` times each;
a worker that stops answering at all is found by its silence (it reports every second): killed,
then handled like a death.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections import deque
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from ..browser.providers import HostFigures
from ..config import AgentConfig
from ..errors import BrowserError
from ..tasks import TaskSpec
from .attempts import TaskLimits
from .results import TaskResult
from .stats import AdmissionState, BatchStats, StepFigures
from .worker import LINE_LIMIT, config_payload, payload

__all__ = ["CLOSE_S", "SILENT_S", "START_S", "WORKER_RETRIES", "WorkerPool", "auto_workers", "merged_hosts"]

log = structlog.get_logger("webagent.batch")

#: Times a task is handed out again after the worker running it died.
WORKER_RETRIES = 2
#: Seconds a worker gets to start its browser (beyond the browser's own launch deadline).
START_S = 60.0
#: Seconds without a word from a running worker (it reports every second) before it is killed.
SILENT_S = 120.0
#: Seconds the workers get to close their browsers at the end (beyond the runs' clean-up bound).
CLOSE_S = 10.0
#: A worker's program: Ctrl-C and SIGTERM ignored from the start (the parent stops it), its logging set
#: up as the command's (``-v`` given as its argument), then ``worker.main``.
WORKER_MAIN = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "from webagent.cli import configure_logging; configure_logging(int(sys.argv[1])); "
    "from webagent.batch.worker import main; main()"
)
#: Sessions one worker process carries before ``auto_workers`` adds another.
SESSIONS_PER_WORKER = 100


def auto_workers(concurrency: int, cpus: int | None = None) -> int:
    """Worker processes for ``concurrency`` sessions: one per ``SESSIONS_PER_WORKER`` (a batch below
    that runs in the command's own process: 1), at most one per CPU."""
    cpus = cpus or os.cpu_count() or 1
    return max(1, min(cpus, math.ceil(concurrency / SESSIONS_PER_WORKER)))


@dataclass(eq=False)
class _Worker:
    proc: asyncio.subprocess.Process
    share: int
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    heard: float = field(default_factory=time.monotonic)
    #: Its browser is up (``{"started": null}`` came): it is given tasks.
    ready: bool = False

    @property
    def running(self) -> int:
        """Its tasks running now (the others wait for its admission), as it last reported."""
        return min(len(self.tasks), int(self.state.get("running", len(self.tasks))))

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def read(self) -> dict[str, Any] | None:
        """The worker's next message; None once its stdout has ended (it exited or died) or says
        something that is not a message (then it is killed: handled as a death)."""
        assert self.proc.stdout is not None
        try:
            line = await self.proc.stdout.readline()
            message = json.loads(line) if line else None
        except (ValueError, ConnectionError):  # a line past the limit, or not JSON
            log.warning("batch_worker_garbled", pid=self.proc.pid)
            return None
        if not isinstance(message, dict):
            return None
        self.heard = time.monotonic()
        return message


class WorkerPool:
    """The worker processes of one batch: started (``async with``, each browser launched), tasks
    handed out, their lines and step figures yielded as they come (``results``)."""

    def __init__(
        self,
        config: AgentConfig,
        output: Path,
        limits: TaskLimits,
        *,
        workers: int,
        concurrency: int,
        admission: bool = True,
        cache: Path | None = None,
        verbosity: int = 0,
        hardened: bool = False,
    ) -> None:
        """``hardened``: each worker's first browser is of the kind guarded sessions get (its first
        task's, ``tasks.guarded``)."""
        if workers < 1:
            raise ValueError("a worker pool needs at least 1 worker")
        self.config = config
        self.output = output
        self.limits = limits
        self.workers = workers
        self.concurrency = concurrency
        self.admission = admission
        self.cache = cache
        self.verbosity = verbosity
        self.pool: list[_Worker] = []
        self.deaths = 0
        #: Each worker's (living or dead) last word on a fleet's hosts: name -> HostFigures as a list.
        self._hosts: dict[int, dict[str, list[Any]]] = {}
        self._setup = {
            "config": config_payload(config),
            "output": str(output.resolve()),
            "limits": dataclasses.asdict(limits),
            "cache": str(cache.resolve()) if cache is not None else None,
            "admission": admission,
            "hardened": hardened,
        }

    def _shares(self) -> list[int]:
        """Each worker's part of ``concurrency`` (they differ by one at most)."""
        n = min(self.workers, self.concurrency)
        return [self.concurrency // n + (i < self.concurrency % n) for i in range(n)]

    async def _spawn(self, share: int) -> _Worker:
        # The modules this process imports, not those of the directory it was started in (-P).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-c",
            WORKER_MAIN,
            str(self.verbosity),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
            env=env,
        )
        worker = _Worker(proc, share)
        worker.send({**self._setup, "ceiling": share})
        return worker

    @property
    def start_s(self) -> float:
        """Seconds a worker gets to say its browser is up: the browser's launch deadline and ``START_S``."""
        b = self.config.browser
        return b.open_timeout_s + b.command_timeout_s + START_S

    async def _started(self, worker: _Worker) -> str | None:
        """Wait for the worker's browser: None when it is up, else why not (the worker then killed)."""
        deadline = time.monotonic() + self.start_s
        while True:
            try:
                message = await asyncio.wait_for(worker.read(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                worker.kill()
                return f"a batch worker process did not start its browser within {self.start_s:g} s"
            if message is None:
                worker.kill()
                return f"a batch worker process exited while starting (exit status {await worker.proc.wait()})"
            if "started" in message:
                error: str | None = message["started"]
                worker.ready = error is None
                return error

    async def __aenter__(self) -> WorkerPool:
        try:
            for share in self._shares():
                self.pool.append(await self._spawn(share))
            errors = [e for e in await asyncio.gather(*(self._started(w) for w in self.pool)) if e]
            if errors:  # as in a local batch: a browser that cannot launch is one usage error, not N failures
                raise BrowserError(errors[0])
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        pool, self.pool = self.pool, []
        await asyncio.gather(*(self._close(w) for w in pool), return_exceptions=True)

    async def _close(self, worker: _Worker) -> None:
        """End its stdin (it abandons what runs, closes its browsers, exits); kill it if it does not."""
        if worker.proc.returncode is None and worker.proc.stdin is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                worker.proc.stdin.close()
        bound = self.limits.cleanup_timeout_s + CLOSE_S
        try:
            await asyncio.wait_for(worker.proc.wait(), bound)
        except TimeoutError:
            worker.kill()
            await worker.proc.wait()
        except asyncio.CancelledError:  # killed, and the cancel goes on
            worker.kill()
            await asyncio.shield(worker.proc.wait())
            raise

    # -- what the workers report --------------------------------------------------------------------
    def admission_state(self) -> AdmissionState | None:
        """The workers' admission taken together (each judges its own browsers)."""
        states = [w.state["admission"] for w in self.pool if w.state]
        if not states:
            return None
        held = [s for s in states if s["held"]]
        return AdmissionState(
            limit=sum(s["limit"] for s in states),
            ceiling=self.concurrency,
            held=sum(s["held"] for s in states),
            reason=(held or states)[0]["reason"],
            lowest=sum(s["lowest"] for s in states),
            highest=sum(s["highest"] for s in states),
            peak_running=sum(s["peak_running"] for s in states),
            decreases=sum(s["decreases"] for s in states),
            held_back_s=max(s["held_back_s"] for s in states),
        )

    def commands(self) -> dict[str, int]:
        total = {"answered": 0, "extended": 0, "expired": 0}
        for worker in self.pool:
            for key, value in worker.state.get("commands", {}).items():
                total[key] = total.get(key, 0) + value
        return total

    @property
    def open_sessions(self) -> int:
        return sum(w.state.get("open", 0) for w in self.pool)

    # -- the tasks ----------------------------------------------------------------------------------
    def _hand_out(self, pending: deque[TaskSpec]) -> None:
        """Each pending task to the started worker with the fewest in flight, while one has room."""
        while pending:
            room = [w for w in self.pool if w.ready and len(w.tasks) < w.share]
            if not room:
                return
            worker = min(room, key=lambda w: len(w.tasks))
            task = pending.popleft()
            worker.tasks[task.id] = task
            worker.send({"run": payload(task)})

    async def results(self, pending: deque[TaskSpec], stats: BatchStats) -> AsyncGenerator[TaskResult | StepFigures]:
        """Hand ``pending`` out, each worker up to its share at once; yield each step's figures and
        each task's line as they come (``stats``: tasks running, and handed out again after a
        worker died). Raises ``BrowserError`` once no worker is left (none could be started again):
        the tasks without a line then run again on resume."""
        deaths: dict[str, int] = {}
        readers: dict[asyncio.Task[dict[str, Any] | None], _Worker] = {}
        try:
            while pending or any(w.tasks for w in self.pool):
                if not self.pool:
                    raise BrowserError(
                        f"no batch worker process could be started again ({self.deaths} died); the {len(pending)} "
                        "tasks without a line run again when the same command is run again"
                    )
                self._hand_out(pending)
                for worker in self.pool:
                    if worker not in readers.values():
                        readers[asyncio.create_task(worker.read())] = worker
                stats.in_flight = sum(w.running for w in self.pool)
                done, _ = await asyncio.wait(readers, timeout=SILENT_S / 8, return_when=asyncio.FIRST_COMPLETED)
                for reader in done:
                    worker = readers.pop(reader)
                    message = reader.result()
                    if message is None:
                        for result in await self._lost(worker, pending, deaths, stats):
                            yield result
                    elif "step" in message:
                        yield StepFigures(*message["step"])
                    elif "result" in message:
                        try:
                            result = TaskResult.model_validate(message["result"])
                        except ValidationError:
                            log.warning("batch_worker_garbled", pid=worker.proc.pid)
                            worker.kill()  # its reader ends next: handled as a death
                            continue
                        worker.tasks.pop(result.id, None)
                        stats.in_flight = sum(w.running for w in self.pool)
                        yield result
                    elif "state" in message:
                        worker.state = message["state"]
                        self._hosts[worker.proc.pid] = message["state"].get("hosts", {})
                        stats.host_counts = merged_hosts(self._hosts.values())
                    elif "started" in message:  # a replacement's browser is up, or cannot launch
                        worker.ready = message["started"] is None
                        if not worker.ready:
                            log.warning("batch_worker_not_replaced", error=message["started"])
                            worker.kill()
                self._silence()
        finally:
            for reader in readers:
                reader.cancel()
            stats.in_flight = 0  # abandoned (the batch stops): they run again on resume

    def _silence(self) -> None:
        """Kill a worker that said nothing for ``SILENT_S`` (one starting: ``start_s``); its reader
        then ends, and it is handled as a death."""
        now = time.monotonic()
        for worker in self.pool:
            limit = SILENT_S if worker.ready else self.start_s
            if now - worker.heard > limit and worker.proc.returncode is None:
                log.warning("batch_worker_silent", pid=worker.proc.pid, silent_s=limit)
                worker.kill()

    async def _lost(
        self, worker: _Worker, pending: deque[TaskSpec], deaths: dict[str, int], stats: BatchStats
    ) -> list[TaskResult]:
        """A worker's stdout ended: it died. Its tasks go back to the queue, or end after
        ``WORKER_RETRIES`` (their lines returned, marked as the infrastructure's: a resume runs them
        again). A worker that had started is replaced (its replacement starts while the others go on);
        one that died starting is not."""
        worker.kill()
        status = await worker.proc.wait()
        self.pool.remove(worker)
        ended: list[TaskResult] = []
        if worker.ready or worker.tasks:
            self.deaths += 1
            log.warning("batch_worker_died", pid=worker.proc.pid, status=status, tasks=len(worker.tasks))
        for task in worker.tasks.values():
            deaths[task.id] = deaths.get(task.id, 0) + 1
            if deaths[task.id] > WORKER_RETRIES:
                message = f"internal error: the batch worker process running it died {deaths[task.id]} times"
                ended.append(TaskResult.failed(task, message, infrastructure=True))
            else:
                stats.retried += 1
                pending.appendleft(task)
        if worker.ready:
            try:
                self.pool.append(await self._spawn(worker.share))
            except OSError as exc:  # no process to be had (memory, limits): the others go on
                log.warning("batch_worker_not_replaced", error=str(exc))
        return ended


def merged_hosts(workers: Iterable[dict[str, list[Any]]]) -> dict[str, HostFigures]:
    """The hosts' counts of every worker's pool, added up (quarantined: by any of them)."""
    merged: dict[str, HostFigures] = {}
    for hosts in workers:
        for name, values in hosts.items():
            f = HostFigures(*values)
            m = merged.get(name)
            merged[name] = (
                f
                if m is None
                else HostFigures(
                    m.sessions + f.sessions,
                    m.crashes + f.crashes,
                    m.lost_sessions + f.lost_sessions,
                    m.quarantines + f.quarantines,
                    m.quarantined or f.quarantined,
                )
            )
    return merged
