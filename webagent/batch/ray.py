"""``webagent batch --ray``: tasks fan out to Ray actors; results stream back to one results.jsonl.

Each actor owns one ``Agent`` (a browser pool and the model endpoints' connection pools) and runs
up to ``concurrency`` tasks at once as coroutines, with the batch runner's own task code (attempts,
pass@k, re-runs after a browser crash or a stall, run directories under ``DIR/runs/``). The driver
is the only writer of ``DIR/results.jsonl``, with the same atomic lines, so a killed driver resumes
like a local batch: finished ids are skipped, abandoned run directories are started clean. A task
whose actor died (its process or node was lost) is given to another actor, up to ``ACTOR_RETRIES``
times; the dead actor is replaced. Run directories are written by the actors: on a multi-node
cluster, DIR must be on a file system that every node shares.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ..agent import Agent
from ..browser.deadline import browser_load
from ..config import AgentConfig
from ..errors import BrowserError, ConfigError, WebAgentError
from .attempts import TaskAttempts, infra_cause
from .results import ResultsFile, TaskResult, resume_plan
from .runner import DEFAULT_STALL_TIMEOUT_S, BatchRunner, BatchStats, resumed_stats
from .tasks import TaskSpec

__all__ = ["ACTOR_RETRIES", "RayBatchRunner", "TaskActor"]

log = structlog.get_logger("webagent.batch")

ACTOR_RETRIES = 2
WAIT_S = 0.5
CLOSE_S = 10.0  # seconds the actors get to close their browsers at the end
CONNECT_S = 5.0  # seconds to reach a cluster's address before ray.init (which retries for minutes)


class TaskActor:
    """Runs tasks in one Ray worker process (made a Ray actor by ``RayBatchRunner``)."""

    def __init__(
        self,
        config: dict[str, Any],
        output: str,
        attempts: int,
        sample_all: bool,
        references: dict[str, list[str]],
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
    ) -> None:
        self.config = AgentConfig.model_validate(config)
        self.runner = BatchRunner(
            self.config,
            [],
            output,
            attempts=attempts,
            sample_all=sample_all,
            references=references,
            stall_timeout_s=stall_timeout_s,
        )
        self.agent: Agent | None = None
        self.attempts: TaskAttempts | None = None

    async def run(self, task: dict[str, Any]) -> str:
        """Run one task; its TaskResult as JSON (a crash is recorded, as in a local batch)."""
        if self.agent is None:
            self.agent = Agent(self.config)
        if self.attempts is None or self.attempts.agent is not self.agent:
            self.attempts = self.runner.attempts_on(self.agent)
        spec = TaskSpec.model_validate(task)
        token = browser_load.set(self.runner.load)  # deadlines judged on this actor's measured load
        try:
            result = await self.attempts.run(spec)
        except Exception as exc:
            log.exception("task_crashed", task=spec.id)
            result = TaskResult.failed(spec, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            browser_load.reset(token)
        return result.model_dump_json()

    async def pid(self) -> int:
        return os.getpid()

    async def start(self) -> str | None:
        """Launch this actor's first browser; the error text if it cannot (a usage error for the driver)."""
        if self.agent is None:
            self.agent = Agent(self.config)
        try:
            await self.agent.browsers.start()
        except WebAgentError as exc:
            return str(exc)
        return None

    async def aclose(self) -> None:
        if self.agent is not None:
            await self.agent.aclose()
            self.agent = None


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs the ray package: pip install 'webagent[ray]'") from None
    return ray


@dataclass
class _Slot:
    handle: Any
    in_flight: int = 0


class RayBatchRunner:
    """The driver: hands pending tasks to actors, appends their results, replaces dead actors."""

    def __init__(
        self,
        config: AgentConfig,
        tasks: list[TaskSpec],
        output: str | Path,
        *,
        address: str | None = None,
        actors: int = 2,
        concurrency: int = 8,
        attempts: int = 1,
        sample_all: bool = False,
        references: dict[str, list[str]] | None = None,
        on_update: Callable[[BatchStats], None] | None = None,
        init_options: dict[str, Any] | None = None,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        retry_infra: bool = True,
    ) -> None:
        if actors < 1 or concurrency < 1 or attempts < 1:
            raise ValueError("actors, concurrency and attempts must be at least 1")
        self.config = config
        self.tasks = tasks
        self.output = Path(output)
        self.address = address
        self.n_actors = actors
        self.concurrency = concurrency
        self.attempts = attempts
        self.sample_all = sample_all
        self.references = references or {}
        self.on_update = on_update or (lambda _: None)
        self.init_options = init_options or {}
        self.stall_timeout_s = stall_timeout_s
        self.retry_infra = retry_infra
        self.stopping = False
        self.stats = BatchStats(len(tasks), 0)
        self.actors: list[_Slot] = []
        self.actor_deaths = 0
        self._remote: Any = None

    def stop(self) -> None:
        """Stop handing out tasks; tasks in flight are abandoned (they rerun on resume)."""
        if not self.stopping:
            log.warning("batch_stopping")
        self.stopping = True

    def run(self) -> BatchStats:
        results = ResultsFile(self.output / "results.jsonl")
        try:
            plan = resume_plan(results.finished(), self.tasks, retry_infra=self.retry_infra)
            results.forget(plan.infra_rerun)
            pending = deque(plan.pending)
            self.stats = resumed_stats(len(self.tasks), plan)
            if plan.kept or plan.infra_rerun:  # what it found is told at once
                self.on_update(self.stats)
            if pending:
                self._run(results, pending)
        finally:
            results.close()
            self.on_update(self.stats)
        return self.stats

    def _run(self, results: ResultsFile, pending: deque[TaskSpec]) -> None:
        self.stats.phase = "ray"
        self.on_update(self.stats)
        ray = import_ray()
        started_ray = not ray.is_initialized()
        if started_ray:
            check_reachable(self.address)
            try:
                ray.init(address=self.address, log_to_driver=False, **self.init_options)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = self.address or "a new local instance"
                raise ConfigError(
                    f"cannot connect to Ray at {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                    "start a cluster (ray start --head) or pass its address to --ray"
                ) from None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            with contextlib.suppress(ValueError):  # not the main thread
                signal.signal(sig, lambda *_: self.stop())
        try:
            self.actors = [self._new_actor(ray) for _ in range(self.n_actors)]
            errors = [e for e in ray.get([slot.handle.start.remote() for slot in self.actors]) if e]
            if errors:  # as in a local batch: a browser that cannot launch is one usage error, not N failures
                raise BrowserError(errors[0])
            self.stats.phase = "run"
            self.on_update(self.stats)
            self._loop(ray, results, pending)
        finally:
            for sig, handler in previous.items():
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(sig, handler)
            with contextlib.suppress(Exception):  # close browsers cleanly, then make sure
                ray.get([slot.handle.aclose.remote() for slot in self.actors], timeout=CLOSE_S)
            for slot in self.actors:
                with contextlib.suppress(Exception):
                    ray.kill(slot.handle)
            self.actors = []
            if started_ray:
                ray.shutdown()

    def _new_actor(self, ray: Any) -> _Slot:
        if self._remote is None:
            # One CPU each, spread over the nodes; a restarted actor would lose its tasks anyway.
            self._remote = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(TaskActor)
        handle = self._remote.options(max_concurrency=self.concurrency).remote(
            _config_payload(self.config),
            str(self.output.resolve()),
            self.attempts,
            self.sample_all,
            self.references,
            self.stall_timeout_s,
        )
        return _Slot(handle)

    def _loop(self, ray: Any, results: ResultsFile, pending: deque[TaskSpec]) -> None:
        in_flight: dict[Any, tuple[TaskSpec, _Slot]] = {}
        deaths: dict[str, int] = {}
        while (pending or in_flight) and not self.stopping:
            while pending:
                slot = min(self.actors, key=lambda s: s.in_flight)
                if slot.in_flight >= self.concurrency:
                    break
                task = pending.popleft()
                in_flight[slot.handle.run.remote(task.model_dump(mode="json"))] = (task, slot)
                slot.in_flight += 1
            self.stats.in_flight = len(in_flight)
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_S)
            for ref in ready:
                task, slot = in_flight.pop(ref)
                slot.in_flight -= 1
                result = self._collect(ray, ref, task, slot, deaths, pending)
                if result is not None:
                    results.append(result)
                    self._count(result)
            self.on_update(self.stats)

    def _collect(
        self, ray: Any, ref: Any, task: TaskSpec, slot: _Slot, deaths: dict[str, int], pending: deque[TaskSpec]
    ) -> TaskResult | None:
        try:
            return TaskResult.model_validate_json(ray.get(ref))
        except ray.exceptions.RayActorError as exc:
            deaths[task.id] = deaths.get(task.id, 0) + 1
            if slot in self.actors:
                self.actor_deaths += 1
                log.warning("ray_actor_died", task=task.id, error=str(exc).splitlines()[0] if str(exc) else "")
                self.actors[self.actors.index(slot)] = self._new_actor(ray)
            if deaths[task.id] > ACTOR_RETRIES:
                return TaskResult.failed(task, f"internal error: the Ray actor running it died {deaths[task.id]} times")
            self.stats.retried += 1
            pending.appendleft(task)
            return None
        except ray.exceptions.RayError as exc:
            return TaskResult.failed(task, f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0]}")

    def _count(self, result: TaskResult) -> None:
        s = self.stats
        s.done += 1
        s.finished_now += 1
        s.succeeded += result.success
        s.errors += result.stop_reason == "error"
        s.retried += result.retried
        s.stalled += sum(a.stalled + sum(r.reason == "stalled" for r in a.reruns) for a in result.attempt_records)
        s.infra_reruns += result.infra_reruns
        for rerun in (r for a in result.attempt_records for r in a.reruns if r.reason == "infrastructure"):
            s.infra_causes[infra_cause(rerun.message)] += 1
        s.steps += result.steps
        s.tokens += sum(
            u.prompt_tokens + u.completion_tokens
            for u in (result.usage.policy, result.usage.localizer, result.usage.validator)
        )


def check_reachable(address: str | None, timeout_s: float = CONNECT_S) -> None:
    """Fail fast, with a one-line ConfigError, on a ``host:port`` (or ``ray://host:port``) where
    nothing listens: ``ray.init`` would keep retrying for about two minutes first. ``None``, ``auto``,
    ``local`` and anything else without a port are left for ``ray.init`` to judge."""
    if not address:
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except TimeoutError:
        reason = f"no answer within {timeout_s:g} s"
    except OSError as exc:  # refused, unreachable, an unknown host
        reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
    raise ConfigError(
        f"cannot connect to Ray at {address}: {reason}; start a cluster (ray start --head) or pass its address to --ray"
    )


def _config_payload(config: AgentConfig) -> dict[str, Any]:
    """The config as JSON for the actors, with secret values (a JSON dump masks them as ******)."""
    data: dict[str, Any] = config.model_dump(mode="json")
    data["secrets"] = {name: value.get_secret_value() for name, value in config.secrets.items()}
    return data
