"""One worker process of a batch (``worker.main``; ``processes.py`` starts them, with the command's
logging configured as in the process that started it).

A worker owns one ``Agent`` (its browser pool, its Playwright driver, the model endpoints' connection
pools) and its own admission control (``Admission`` on its own browsers' measured load), and runs the
tasks its parent hands it as coroutines, each through the one task runner (``TaskRunner``): what a
local batch does in one process, on a share of the sessions. The parent alone writes
``results.jsonl``; a worker writes its runs' directories, as a Ray actor does.

The wire is JSON lines. Parent to worker, on stdin: first the set-up (``config``, ``output``,
``limits``, ``cache``, ``ceiling``, ``admission``, ``hardened``), then ``{"run": TASK}`` per task.
Worker to parent, on the stdout it had at start (``sys.stdout`` is pointed at stderr, so nothing
else can write there): ``{"started": ERROR|null}`` once its browser is up (or cannot launch),
``{"step": [FIGURES]}`` as each step ends, ``{"result": LINE}`` as each task ends, and every
``TICK_S`` ``{"state": ...}`` (its admission, its browsers' commands, sessions open, a fleet's
hosts' counts; with a fleet also right before each line). The end of
stdin (the parent closed it, stopped or died) stops the worker: tasks in flight are abandoned (they
run again on resume, as in a local batch), the browsers closed, the process gone. SIGINT and SIGTERM
are ignored: the parent decides (a terminal's Ctrl-C, or a service manager's SIGTERM, reaches every
process of the group); SIGKILL ends a worker, and its parent then hands its tasks out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path, PurePath
from typing import Any

from pydantic import BaseModel, SecretStr

from ..agent import Agent
from ..browser.deadline import browser_load
from ..browser.load import BrowserLoad
from ..browser.providers import FleetPool
from ..config import AgentConfig
from ..errors import WebAgentError
from ..records import Step
from ..replay import ReplayCache
from ..tasks import TaskSpec
from .admission import INITIAL, TICK_S, Admission
from .attempts import TaskLimits, TaskRunner
from .results import TaskResult
from .stats import StepFigures

__all__ = ["LINE_LIMIT", "config_payload", "main", "payload", "serve"]

#: Seconds the last messages get to leave at the end.
CLOSE_DRAIN_S = 5.0
#: The longest line either side reads (a task's results line with its attempts' records).
LINE_LIMIT = 64 * 1024 * 1024


def payload(model: BaseModel) -> dict[str, Any]:
    """A model as JSON for another process (a worker, a Ray actor) that rebuilds it as it is here:
    only the fields set, at every level, so that what was decided stays decided and a default stays a
    default there (``direct_cdp`` set or not; a task's ``browser`` block over the config's naming only
    what the task set), and every value as it is (a JSON dump masks secrets, passwords among them, as
    ******). A section never set but changed since (``config.browser.args = [...]``) goes with what
    was changed in it. ``model_validate`` of it gives equal values with the same fields set below."""
    data: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            inner = payload(value)
            if inner or name in model.model_fields_set:
                data[name] = inner
        elif name in model.model_fields_set:
            data[name] = _plain(value)
    return data


def config_payload(config: AgentConfig) -> dict[str, Any]:
    """The config for another process (``payload``): its secrets' values, what it set."""
    return payload(config)


def _plain(value: Any) -> Any:
    """A value as JSON's types: models as their ``payload``, secrets as their values, paths as strings."""
    if isinstance(value, BaseModel):
        return payload(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, PurePath):
        return str(value)
    return value


class Worker:
    """The tasks of one worker process, on one agent, through its own admission."""

    def __init__(self, setup: dict[str, Any], send: asyncio.StreamWriter) -> None:
        self.config = AgentConfig.model_validate(setup["config"])
        limits = TaskLimits(**setup["limits"])
        cache = ReplayCache(setup["cache"]) if setup.get("cache") else None
        ceiling = int(setup["ceiling"])
        self.admit = bool(setup.get("admission", True))
        self.hardened = bool(setup.get("hardened", False))
        self.load = BrowserLoad()
        self.admission = Admission(ceiling, self.load, initial=INITIAL if self.admit else ceiling)
        self.agent = Agent(self.config)
        self.stopping = False
        self.runner = TaskRunner(
            self.agent,
            Path(setup["output"]),
            limits,
            cache=cache,
            on_step=self._stepped,
            stopping=lambda: self.stopping,
        )
        self.send = send
        self.runs: set[asyncio.Task[None]] = set()

    def _write(self, message: dict[str, Any]) -> None:
        self.send.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def _stepped(self, task: TaskSpec, step: Step) -> None:
        self._write({"step": dataclasses.astuple(StepFigures.of(step))})

    async def start(self) -> bool:
        """Launch the first browser; say so (or why it cannot launch: a usage error for the parent)."""
        try:
            await self.agent.browsers.start(hardened=self.hardened)
        except WebAgentError as exc:
            self._write({"started": str(exc)})
            return False
        self._write({"started": None})
        return True

    def run(self, task: dict[str, Any]) -> None:
        spec = TaskSpec.model_validate(task)
        run = asyncio.create_task(self._run(spec), name=f"webagent-task-{spec.id}")
        self.runs.add(run)
        run.add_done_callback(self.runs.discard)

    async def _run(self, task: TaskSpec) -> None:
        async with self.admission.place():  # a new session only while this worker's browsers keep up
            result: TaskResult = await self.runner.run(task)
        if isinstance(self.agent.browsers, FleetPool):  # the hosts' counts as of this line
            self._write({"state": self.state()})
        self._write({"result": result.model_dump(mode="json")})

    def state(self) -> dict[str, Any]:
        load = self.load
        return {
            "admission": dataclasses.asdict(self.admission.state()),
            "running": self.admission.running,
            "commands": {"answered": load.answered, "extended": load.extended, "expired": load.expired},
            "open": self.agent.browsers.open_sessions,
            "hosts": {name: dataclasses.astuple(f) for name, f in self.agent.browsers.host_figures().items()}
            if isinstance(self.agent.browsers, FleetPool)
            else {},
        }

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            if self.admit:
                self.admission.update(self.agent.browsers.waiting_to_open)
            self._write({"state": self.state()})

    async def aclose(self) -> None:
        """Abandon the tasks in flight (no line: they run again on resume), then close the browsers."""
        self.stopping = True
        for run in list(self.runs):
            run.cancel()
        if self.runs:
            await asyncio.wait(self.runs, timeout=self.runner.limits.cleanup_timeout_s)
        for run in list(self.runner.left_behind):
            run.cancel()
        await self.agent.aclose()


async def serve(receive: asyncio.StreamReader, send: asyncio.StreamWriter) -> None:
    """Take the set-up and the tasks from ``receive`` until it ends; answer on ``send``."""
    first = await receive.readline()
    if not first:
        return
    setup = json.loads(first)
    worker = Worker(setup, send)
    token = browser_load.set(worker.load)  # every bounded browser wait of this worker is measured
    ticking: asyncio.Task[None] | None = None
    try:
        if await worker.start():
            ticking = asyncio.create_task(worker.tick(), name="webagent-worker-tick")
            # Read on whatever is unsent: the end of stdin must be seen even when the parent reads no more.
            while line := await receive.readline():
                message = json.loads(line)
                if "run" in message:
                    worker.run(message["run"])
    finally:
        if ticking is not None:
            ticking.cancel()
        await worker.aclose()
        browser_load.reset(token)
        with contextlib.suppress(ConnectionError, TimeoutError):
            await asyncio.wait_for(send.drain(), CLOSE_DRAIN_S)


async def _pipes() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The parent's pipes as streams: stdin, and the stdout this process had at start (fd 1 then
    points at stderr, so a stray print cannot corrupt the wire)."""
    loop = asyncio.get_running_loop()
    wire = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, wire)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def _main() -> None:
    receive, send = await _pipes()
    await serve(receive, send)


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):  # ignored from the first statement (``processes.WORKER_MAIN``)
        signal.signal(sig, signal.SIG_IGN)  # the parent stops the batch; it ends this worker's stdin
    with contextlib.suppress(BrokenPipeError, ConnectionError):
        asyncio.run(_main())
