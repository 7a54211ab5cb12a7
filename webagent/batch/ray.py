"""``webagent batch --ray`` (and ``webagent test --ray``): tasks fan out to Ray actors; their lines
come back to the one ``BatchRunner`` that writes ``results.jsonl``.

Each actor owns one ``Agent`` (a browser pool and the model endpoints' connection pools) and runs
up to ``concurrency`` tasks at once as coroutines, each through the one task runner (``TaskRunner``).
The driver is the only writer of ``DIR/results.jsonl``, with the same atomic lines, so a killed
driver resumes like a local batch. A task whose actor died (its process or node was lost) is given
to another actor, up to ``ACTOR_RETRIES`` times; the dead actor is replaced, and given tasks once it
has started (a lost node's replacement may find no room: the others go on). Off the driver's node,
actors send each task's run directory back with its line (``shipping.py``): no shared disk. The
actors of a node share one Chromium where they may (``nodebrowser.py``). The hosts' counts of each
actor's fleet of browser hosts come back with each line and are added up per host.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import socket
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ..agent import Agent
from ..browser.deadline import browser_load
from ..browser.load import BrowserLoad
from ..browser.providers import FleetPool
from ..config import AgentConfig
from ..errors import BrowserError, ConfigError, WebAgentError
from ..records import Step
from ..replay import ReplayCache
from ..tasks import TaskSpec
from .attempts import TaskLimits, TaskRunner
from .nodebrowser import NodeBrowsers, on_node_browser
from .processes import merged_hosts
from .results import TaskResult
from .shipping import node_output, pack, ships_runs, unpack
from .stats import BatchStats, StepFigures
from .worker import config_payload, payload

__all__ = ["ACTOR_RETRIES", "RayCluster", "RayPool", "TaskActor", "check_reachable"]

log = structlog.get_logger("webagent.batch")

ACTOR_RETRIES = 2
CLOSE_S = 10.0  # seconds the actors get to close their browsers at the end
CONNECT_S = 5.0  # seconds to reach a cluster's address before ray.init (which retries for minutes)


@dataclass(frozen=True)
class RayCluster:
    """Where a batch's tasks run on Ray: ``address`` (None: a new local instance; ``auto``: the one
    ``ray start`` made here; ``host:port``), ``actors`` (each an ``Agent`` running ``concurrency``
    sessions), and options for ``ray.init``."""

    address: str | None = None
    actors: int = 2
    init_options: dict[str, Any] = field(default_factory=dict)
    #: Send each task's run directory from its actor to the driver (no shared disk needed); None:
    #: when the cluster has more than one node.
    ship_runs: bool | None = None


class TaskActor:
    """Runs tasks in one Ray worker process (made a Ray actor by ``RayPool``)."""

    def __init__(
        self,
        config: dict[str, Any],
        output: str,
        limits: dict[str, Any],
        cache: str | None = None,
        ship: bool = False,
    ) -> None:
        """``ship``: runs go to a folder of this node, each task's sent back packed with its line."""
        self.config = AgentConfig.model_validate(config)
        self.ship = ship
        self.output = node_output() if ship else Path(output)
        self.limits = TaskLimits(**limits)
        self.cache = ReplayCache(cache) if cache is not None else None
        #: What this actor's browsers' answers say about its machine (its deadlines read it).
        self.load = BrowserLoad()
        self.agent: Agent | None = None
        self.runner: TaskRunner | None = None
        self.steps: dict[str, list[StepFigures]] = {}

    def _stepped(self, task: TaskSpec, step: Step) -> None:
        self.steps.setdefault(task.id, []).append(StepFigures.of(step))

    async def run(self, task: dict[str, Any]) -> tuple[str, bytes | None]:
        """Run one task; its TaskResult, the figures of its steps and the counts of this actor's
        browser hosts, as JSON; with its run directory packed (``ship``)."""
        if self.agent is None:
            self.agent = Agent(self.config)
        if self.runner is None or self.runner.agent is not self.agent:
            self.runner = TaskRunner(self.agent, self.output, self.limits, cache=self.cache, on_step=self._stepped)
        spec = TaskSpec.model_validate(task)
        self.steps[spec.id] = []
        token = browser_load.set(self.load)  # deadlines judged on this actor's measured load
        try:
            result = await self.runner.run(spec)
        finally:
            browser_load.reset(token)
            steps = self.steps.pop(spec.id, [])
        hosts = self.agent.browsers.host_figures() if isinstance(self.agent.browsers, FleetPool) else {}
        line = {
            "result": result.model_dump(mode="json"),
            "steps": [dataclasses.astuple(s) for s in steps],
            "hosts": {name: dataclasses.astuple(f) for name, f in hosts.items()},
        }
        files = await asyncio.to_thread(pack, self.output, spec.id) if self.ship else None
        return json.dumps(line), files

    async def pid(self) -> int:
        return os.getpid()

    async def start(self, hardened: bool = False, host: dict[str, Any] | None = None) -> str | None:
        """Launch this actor's first browser (``hardened``: for guarded sessions), or reach its node's
        (``host``: ``nodebrowser.node_host``); the error text if it cannot (a usage error for the driver)."""
        if host is not None and self.agent is None:
            self.config = on_node_browser(self.config, host)
        if self.agent is None:
            self.agent = Agent(self.config)
        try:
            await self.agent.browsers.start(hardened=hardened)
        except WebAgentError as exc:
            return str(exc)
        return None

    async def node(self) -> str:
        """The Ray node this actor runs on, and the folder its runs are written to."""
        return f"{import_ray().get_runtime_context().get_node_id()} {self.output}"

    async def aclose(self) -> None:
        if self.agent is not None:
            await self.agent.aclose()
            self.agent = None
        if self.ship:  # what was left here: an abandoned run's, or one too large to send
            await asyncio.to_thread(shutil.rmtree, self.output, True)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs the ray package: pip install 'webagent[ray]'") from None
    return ray


@dataclass(eq=False)
class _Slot:
    handle: Any
    in_flight: int = 0
    #: Started (its browser launched): given tasks. A replacement starts in the background.
    ready: bool = True
    starting: asyncio.Future[Any] | None = None


async def _get(ref: Any) -> Any:
    """The value of a Ray object, awaited without blocking the event loop."""
    return await asyncio.wrap_future(ref.future())


class RayPool:
    """The actors of one batch: Ray started or joined (``async with``), tasks handed out as
    places free up, their lines and step figures yielded as they come back (``results``)."""

    def __init__(
        self,
        cluster: RayCluster,
        config: AgentConfig,
        output: Path,
        limits: TaskLimits,
        concurrency: int,
        *,
        cache: Path | None = None,
        hardened: bool = False,
        staged: bool = False,
        per_actor: str | None = "not asked to share",
        node_hardened: bool = False,
    ) -> None:
        """``hardened``: each actor's first browser is of the kind guarded sessions get; ``staged``:
        ``output`` is the staging folder of a URL output, on this machine only; ``per_actor``: why each
        actor keeps a Chromium (``node_browser_refusal``; None: they may share ``nodes``' ones)."""
        self.cluster = cluster
        self.hardened = hardened
        self.config = config
        self.output = output
        self.limits = limits
        self.concurrency = concurrency
        self.cache = cache
        self.staged = staged
        self.per_actor = per_actor
        self.node_hardened = node_hardened
        self.nodes: NodeBrowsers | None = None
        self.actors: list[_Slot] = []
        self.actor_deaths = 0
        #: Run directories sent back by the actors (``RayCluster.ship_runs``, or several nodes).
        self.ship = False
        #: Each actor's (living or dead) last word on its fleet's hosts: name -> HostFigures as a list.
        self._hosts: dict[int, dict[str, list[Any]]] = {}
        self._ray: Any = None
        self._remote: Any = None
        self._started_ray = False

    async def __aenter__(self) -> RayPool:
        ray = self._ray = import_ray()
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            address = self.cluster.address
            check_reachable(address)
            try:
                ray.init(address=address, log_to_driver=False, **self.cluster.init_options)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = address or "a new local instance"
                raise ConfigError(
                    f"cannot connect to Ray at {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                    "start a cluster (ray start --head) or pass its address to --ray"
                ) from None
        try:
            nodes = sum(bool(n.get("Alive")) for n in ray.nodes())
            client = ray.util.client.ray.is_connected()
            self.ship = ships_runs(self.cluster.ship_runs, nodes, client=client, staged=self.staged)
            self.actors = [self._new_actor() for _ in range(self.cluster.actors)]
            hosts = zip(self.actors, await self._node_hosts(), strict=True)
            started = await asyncio.gather(*(_get(s.handle.start.remote(self.hardened, h)) for s, h in hosts))
            errors = [e for e in started if e]
            if errors:  # as in a local batch: a browser that cannot launch is one usage error, not N failures
                raise BrowserError(errors[0])
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        ray = self._ray
        with contextlib.suppress(Exception):  # close browsers cleanly, then make sure
            closing = asyncio.gather(*(_get(slot.handle.aclose.remote()) for slot in self.actors))
            await asyncio.wait_for(closing, CLOSE_S)
        for slot in self.actors:
            if slot.starting is not None:
                slot.starting.cancel()
            with contextlib.suppress(Exception):
                ray.kill(slot.handle)
        self.actors = []
        if self.nodes is not None:
            await self.nodes.aclose()
        if self._started_ray:
            ray.shutdown()

    def _new_actor(self) -> _Slot:
        ray = self._ray
        if self._remote is None:
            # One CPU each, spread over the nodes; a restarted actor would lose its tasks anyway.
            self._remote = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(TaskActor)
        handle = self._remote.options(max_concurrency=self.concurrency).remote(
            config_payload(self.config),
            str(self.output.resolve()),
            dataclasses.asdict(self.limits),
            str(self.cache.resolve()) if self.cache is not None else None,
            self.ship,
        )
        return _Slot(handle)

    def _replace(self, slot: _Slot) -> None:
        """A new actor in a dead one's place, given tasks once its browser has launched: on a cluster
        that lost a node there may be no room for it, and the others go on meanwhile."""
        new = _Slot(self._new_actor().handle, ready=False)
        new.starting = asyncio.ensure_future(self._start(new))

        def started(future: asyncio.Future[Any]) -> None:
            if not future.cancelled() and future.exception() is None and not future.result():
                new.ready = True
            else:  # it could not launch a browser, or died before: the batch goes on without it
                log.warning("ray_actor_not_replaced", error=str(future.exception() or future.result() or "cancelled"))
            new.starting = None

        new.starting.add_done_callback(started)
        self.actors[self.actors.index(slot)] = new

    async def _node_hosts(self) -> list[dict[str, Any] | None]:
        """Each actor's node's browser host (None: its own Chromium), the nodes' browsers started."""
        if self.per_actor is not None:
            log.info("ray_browsers", where=self.browsers)
            return [None] * len(self.actors)
        self.nodes = NodeBrowsers(self._ray, self.config, self.node_hardened, self.concurrency)
        return await self.nodes.place([slot.handle for slot in self.actors])

    @property
    def browsers(self) -> str:  # where the actors' browsers are, and why, in one line
        return self.nodes.note if self.nodes is not None else f"one per actor: {self.per_actor}"

    async def _start(self, slot: _Slot) -> Any:  # a replacement: on its node's browser when there is one
        host = await self.nodes.host_of(slot.handle) if self.nodes is not None else None
        return await _get(slot.handle.start.remote(self.hardened, host))

    async def results(
        self, pending: deque[TaskSpec], stats: BatchStats
    ) -> AsyncGenerator[tuple[TaskResult, list[StepFigures]]]:
        """Hand ``pending`` out to the actors, each up to ``concurrency`` at once; yield each task's
        line and its steps' figures as it finishes (``stats``: tasks in flight, and re-run after
        an actor died)."""
        in_flight: dict[asyncio.Future[Any], tuple[TaskSpec, _Slot]] = {}
        deaths: dict[str, int] = {}
        try:
            while pending or in_flight:
                while pending:
                    ready = [s for s in self.actors if s.ready]
                    slot = min(ready, key=lambda s: s.in_flight) if ready else None
                    if slot is None or slot.in_flight >= self.concurrency:
                        break
                    task = pending.popleft()
                    ref = slot.handle.run.remote(payload(task))
                    in_flight[asyncio.wrap_future(ref.future())] = (task, slot)
                    slot.in_flight += 1
                stats.in_flight = len(in_flight)
                waiting = [s.starting for s in self.actors if s.starting is not None]
                if not in_flight and not waiting:  # every actor lost, none to come
                    for task in pending:
                        yield TaskResult.failed(task, "internal error: no Ray actor is left to run it"), []
                    pending.clear()
                    break
                done, _ = await asyncio.wait([*in_flight, *waiting], return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    if future not in in_flight:  # an actor started (or failed to): hand out again
                        continue
                    task, slot = in_flight.pop(future)
                    slot.in_flight -= 1
                    outcome = self._collect(future, task, slot, deaths, stats)
                    if outcome is None:
                        stats.retried += 1
                        pending.appendleft(task)
                    else:
                        stats.in_flight = len(in_flight)
                        yield outcome
        finally:
            for future in in_flight:  # abandoned (the batch stops): the actors are killed next
                future.cancel()

    def _collect(
        self, future: asyncio.Future[Any], task: TaskSpec, slot: _Slot, deaths: dict[str, int], stats: BatchStats
    ) -> tuple[TaskResult, list[StepFigures]] | None:
        """A finished task's line and step figures (its run directory put in place when sent, its
        actor's host counts added up); None when its actor died and it is to run again."""
        ray = self._ray
        try:
            text, files = future.result()
            data = json.loads(text)
            result = TaskResult.model_validate(data["result"])
            if data["hosts"]:
                self._hosts[id(slot)] = data["hosts"]
                stats.host_counts = merged_hosts(self._hosts.values())
            stats.ray_browsers = self.browsers  # with the node browser actors replaced so far
            if files is not None:
                unpack(files, self.output, task.id)
            return result, [StepFigures(*s) for s in data["steps"]]
        except ray.exceptions.RayActorError as exc:
            deaths[task.id] = deaths.get(task.id, 0) + 1
            if slot in self.actors:
                self.actor_deaths += 1
                log.warning("ray_actor_died", task=task.id, error=str(exc).splitlines()[0] if str(exc) else "")
                self._replace(slot)
            if deaths[task.id] > ACTOR_RETRIES:
                message = f"internal error: the Ray actor running it died {deaths[task.id]} times"
                return TaskResult.failed(task, message), []
            return None
        except ray.exceptions.RayError as exc:
            message = f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            return TaskResult.failed(task, message), []
        except WebAgentError as exc:  # its run files could not be put in place (ShippingError)
            return TaskResult.failed(task, f"internal error: {exc}"), []


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
