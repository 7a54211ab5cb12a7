"""One browser per Ray node (``webagent batch --ray`` with ``[browser] provider = "local"``): instead
of a Chromium in each actor, a small actor (``NodeBrowser``) pinned to each node that holds enough
actors for it to save memory (``AUTO_ACTORS``; ``[browser] node_browser = true``: ``MIN_ACTORS``;
Ray's node affinity, not soft) launches one Chromium exactly as the local provider launches it
(``launcher.launch_browser``: webagent's flags, and the guard's hardened switches when a task of the
batch is guarded), with a DevTools port on 127.0.0.1, and the node's actors reach it as a browser
host (``[browser] provider = "hosts"``, ``providers.FleetPool``): their sessions are placed, probed,
quarantined and re-run there as on any host (docs/deploy.md, "One pool per node").

If that Chromium dies, the node's actor launches it again on the same port (a Chromium that does
not answer there, the port taken meanwhile, is a failed launch, tried again), and each actor's pool,
which quarantined the host at the disconnect (its sessions' tasks re-run as a browser's crash),
takes it back at its next probe. If the node's actor itself dies (its process killed, out of memory)
while its node stays, its Chromium goes with it; the driver, which asks each node's actor for its
pid every ``WATCH_S`` (``NodeBrowsers``), starts another on the same node on the same port (tried
``REPLACES`` times, each failure's actor killed), and the actors' pools take the host back as
above. A node lost takes its actors with it, and the batch re-runs their tasks on the others as
before.

A DevTools port that other local users could reach is refused when the batch holds secrets or a
signed-in state (docs/security.md; ``runtime.checked_sessions`` turns ``direct_cdp`` off then):
such a batch, or one with ``direct_cdp`` off, another provider or a remote browser, or
``[browser] node_browser = false``, keeps a Chromium per actor (``node_browser_refusal``); the log
and ``summary.json``'s ``run.ray_browsers`` say where the browsers are, and why, in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import socket
from collections import Counter
from collections.abc import Iterable
from typing import Any

import aiohttp
import structlog
from playwright.async_api import Browser, Playwright, async_playwright

from ..browser.devtools import free_port
from ..browser.launcher import launch_browser
from ..config import AgentConfig, BrowserConfig
from ..errors import BrowserError, WebAgentError
from ..runtime import private_outputs
from ..tasks import TaskSpec
from .worker import config_payload

__all__ = [
    "AUTO_ACTORS",
    "MIN_ACTORS",
    "NodeBrowser",
    "NodeBrowsers",
    "node_browser_refusal",
    "node_host",
    "on_node_browser",
]

log = structlog.get_logger("webagent.batch")

#: Measured (benchmarks/node_actor.py, 2026-12-05): the PSS of a node's browser actor beside its
#: Chromium (a Ray worker with webagent imported, 123 MiB, and its Playwright driver, 123 MiB), and
#: what each Chromium not launched saves with 3 sessions open (benchmarks/node_pool.py, docs/deploy.md).
NODE_ACTOR_MIB = 245
SAVED_MIB = 61
#: Actors on one node from which they share a browser: where it saves memory (``node_browser =
#: "auto"``: (actors - 1) × SAVED_MIB > NODE_ACTOR_MIB), or at all (``true``: one actor alone gains nothing).
AUTO_ACTORS = 2 + NODE_ACTOR_MIB // SAVED_MIB
MIN_ACTORS = 2
#: Launches tried when the node's Chromium died, and the pause between two.
RELAUNCHES = 10
RELAUNCH_PAUSE_S = 1.0
#: Seconds the nodes' browsers get to close at the end, and a node's actor to start its browser
#: (to be placed, to start Playwright, to launch Chromium).
CLOSE_S = 10.0
START_S = 120.0
#: Seconds between two looks at a node's browser actor from the driver, the most one look waits (on
#: the actor, on Ray's list of nodes), and the actors started in a lost one's place before giving up.
WATCH_S = 2.0
LOOK_S = 10.0
REPLACES = 3
#: Seconds a launched Chromium gets to answer on its DevTools port (it starts without the port when
#: the port is taken: that launch is a failure, not a restart).
PORT_CHECK_S = 5.0


def node_browser_refusal(config: AgentConfig, tasks: Iterable[TaskSpec]) -> str | None:
    """Why the actors of a batch with ``config`` and ``tasks`` keep a Chromium each; None when each
    node's actors may share one."""
    browser = config.browser
    if browser.node_browser is False:
        return "[browser] node_browser is false"
    if browser.provider != "local":
        return f"[browser] provider is {browser.provider}: the actors lease its hosts"
    if browser.remote:
        return "a remote browser is configured (ws_endpoint or cdp_endpoint)"
    if private_outputs(config, (task.browser for task in tasks)):
        return (
            "the batch holds secrets or a signed-in state, and a shared browser needs a DevTools port "
            "that other local users could reach (docs/security.md)"
        )
    if not browser.direct_cdp:
        return "[browser] direct_cdp is false: no DevTools port"
    return None


def node_host(endpoint: str, sessions: int, node_id: str) -> dict[str, Any]:
    """The ``[[browser.hosts]]`` entry of a node's browser, for the actors on that node."""
    return {"url": endpoint, "sessions": sessions, "name": f"node-{node_id[:8]}"}


def on_node_browser(config: AgentConfig, host: dict[str, Any]) -> AgentConfig:
    """``config`` with its browsers leased from the node's browser ``host`` (``node_host``)."""
    fields = config.browser.model_dump(exclude_unset=True)
    browser = BrowserConfig.model_validate({**fields, "provider": "hosts", "hosts": [host]})
    return config.model_copy(update={"browser": browser})


class NodeBrowser:
    """One Chromium on this Ray node, for the actors on it (made a Ray actor by ``RayPool``)."""

    def __init__(self, config: dict[str, Any], hardened: bool, port: int | None = None) -> None:
        """``port``: a lost actor's (its replacement's browser answers where the actors look)."""
        self.config = AgentConfig.model_validate(config).browser
        self.hardened = hardened
        self.port = free_port() if port is None else port
        #: A lost actor's port, which its dying Chromium may hold a moment: launches tried again.
        self._launches = 1 if port is None else RELAUNCHES
        self.restarts = 0
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._closing = False
        self._relaunching: asyncio.Task[None] | None = None

    async def start(self) -> tuple[str | None, str | None]:
        """Launch the Chromium: its DevTools endpoint, or the error text when it cannot launch."""
        try:
            self._playwright = await asyncio.wait_for(async_playwright().start(), self.config.open_timeout_s)
            for launch in range(self._launches):
                try:
                    await self._launch()
                    break
                except WebAgentError as exc:
                    if launch + 1 == self._launches:
                        raise
                    log.warning("node_browser_relaunch_failed", port=self.port, error=str(exc))
                    await asyncio.sleep(RELAUNCH_PAUSE_S)
        except TimeoutError:
            return None, f"Playwright did not start within {self.config.open_timeout_s:g} s"
        except WebAgentError as exc:
            return None, str(exc)
        log.info("node_browser_started", port=self.port, hardened=self.hardened)
        return f"http://127.0.0.1:{self.port}", None

    async def _launch(self) -> None:
        assert self._playwright is not None
        if not _free(self.port):  # a browser answering there would not be this one
            raise BrowserError(f"DevTools port 127.0.0.1:{self.port} is taken")
        # The port on loopback, always the same one: the actors' pools probe it and find it again.
        # --enable-automation: it tells its command line, where the actors' pools check the hardening.
        port = [f"--remote-debugging-port={self.port}", "--remote-debugging-address=127.0.0.1"]
        options = {"args": [*port, "--enable-automation"]}
        browser = await launch_browser(self._playwright, self.config, options=options, hardened=self.hardened)
        if not await self._answers():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), self.config.open_timeout_s)
            raise BrowserError(f"Chromium started without its DevTools port 127.0.0.1:{self.port} (taken?)")
        browser.on("disconnected", self._died)
        self._browser = browser

    async def _answers(self) -> bool:
        """Whether a browser answers on the port (``/json/version``) within ``PORT_CHECK_S``."""
        url = f"http://127.0.0.1:{self.port}/json/version"
        deadline = asyncio.get_running_loop().time() + PORT_CHECK_S
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                    async with http.get(url) as reply:
                        if reply.status == 200 and "webSocketDebuggerUrl" in await reply.json(content_type=None):
                            return True
                if asyncio.get_running_loop().time() >= deadline:
                    return False
                await asyncio.sleep(0.1)

    def _died(self, browser: Browser) -> None:
        if self._closing or browser is not self._browser:
            return
        log.warning("node_browser_died", port=self.port)
        self._relaunching = asyncio.get_running_loop().create_task(self._relaunch())

    async def _relaunch(self) -> None:
        """Launch the Chromium again on the same port, a few times if the port is not free yet."""
        for _ in range(RELAUNCHES):
            await asyncio.sleep(RELAUNCH_PAUSE_S)
            if self._closing:
                return
            try:
                await self._launch()
            except WebAgentError as exc:
                log.warning("node_browser_relaunch_failed", port=self.port, error=str(exc))
                continue
            self.restarts += 1
            log.info("node_browser_restarted", port=self.port, restarts=self.restarts)
            return
        log.error("node_browser_lost", port=self.port)

    async def pid(self) -> int:
        """This actor's process (its Chromium runs below it)."""
        return os.getpid()

    async def aclose(self) -> None:
        self._closing = True
        if self._relaunching is not None:
            self._relaunching.cancel()
        if self._browser is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._browser.close(), self.config.open_timeout_s)
            self._browser = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._playwright.stop(), self.config.open_timeout_s)
            self._playwright = None


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def _get(ref: Any) -> Any:
    return await asyncio.wrap_future(ref.future())


class NodeBrowsers:
    """The node browsers of one batch, from the driver: one ``NodeBrowser`` actor on each node of
    ``AUTO_ACTORS`` actors or more (``node_browser = true``: ``MIN_ACTORS``), its capacity those
    actors × ``concurrency``; each watched, one that died on a node still alive replaced on its
    port. ``note``: where the browsers are, in one line (and the actors replaced)."""

    def __init__(self, ray: Any, config: AgentConfig, hardened: bool, concurrency: int) -> None:
        self._ray = ray
        self.config = config_payload(config)
        self.least = MIN_ACTORS if config.browser.node_browser is True else AUTO_ACTORS
        self.where = ""
        self.hardened = hardened
        self.concurrency = concurrency
        #: Node id -> its browser's ``[[browser.hosts]]`` entry, and its actor.
        self.hosts: dict[str, dict[str, Any]] = {}
        self.handles: dict[str, Any] = {}
        #: Node actors started in a lost one's place.
        self.replaced = 0
        self._remote: Any = None
        self._watches: list[asyncio.Task[None]] = []
        self._closing = False

    @property
    def note(self) -> str:
        replaced = f"; {self.replaced} node browser actor(s) lost and replaced" if self.replaced else ""
        return self.where + replaced

    async def _node(self, actor: Any) -> str:
        return str(await _get(actor.node.remote())).split()[0]

    async def place(self, actors: list[Any]) -> list[dict[str, Any] | None]:
        """Start a browser on each node that holds ``MIN_ACTORS`` of ``actors`` or more; each actor's
        host (None: it launches its own). A browser that cannot launch is a ``BrowserError``."""
        nodes = list(await asyncio.gather(*(self._node(actor) for actor in actors)))
        counts = Counter(nodes)
        shared = [node for node, n in counts.items() if n >= self.least]
        errors = await asyncio.gather(*(self._start(node, counts[node]) for node in shared))
        if any(errors):
            raise BrowserError(next(e for e in errors if e))
        why = f"fewer than {self.least} actors on the node" + (
            " (a node's browser saves memory from there; [browser] node_browser = true shares from 2)"
            if self.least > MIN_ACTORS
            else ""
        )
        if len(shared) == len(counts):
            self.where = "one per node"
        elif shared:
            self.where = f"one per node on {len(shared)} of {len(counts)} nodes, one per actor elsewhere: {why}"
        else:
            self.where = f"one per actor: {why}"
        log.info("ray_browsers", where=self.where, nodes=len(counts), actors=len(actors))
        self._watches = [asyncio.create_task(self._watch(node)) for node in shared]
        return [self.hosts.get(node) for node in nodes]

    async def _start(self, node: str, actors: int) -> str | None:
        endpoint, error = await self._spawn(node, None)
        if endpoint is not None:
            self.hosts[node] = node_host(endpoint, actors * self.concurrency, node)
        return error

    async def _spawn(self, node: str, port: int | None) -> tuple[str | None, str | None]:
        """A node's browser actor pinned to ``node`` (on ``port``: a lost one's), its browser
        launched: its endpoint, or why not."""
        strategies = importlib.import_module("ray.util.scheduling_strategies")
        pinned = strategies.NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        if self._remote is None:  # no CPU of its own: the node's actors have them
            self._remote = self._ray.remote(num_cpus=0, max_restarts=0)(NodeBrowser)
        handle = self._remote.options(scheduling_strategy=pinned).remote(self.config, self.hardened, port)
        self.handles[node] = handle  # before any await: aclose ends it, whatever happens next
        try:
            endpoint, error = await asyncio.wait_for(_get(handle.start.remote()), START_S)
        except TimeoutError:
            return None, f"the browser of Ray node {node[:8]} did not start within {START_S:g} s"
        except self._ray.exceptions.RayError as exc:  # its actor died (its node lost) before it answered
            return None, f"the browser of Ray node {node[:8]} could not start: {type(exc).__name__}"
        return (None, str(error)) if error is not None else (str(endpoint), None)

    async def _watch(self, node: str) -> None:
        """Ask ``node``'s browser actor for its pid every ``WATCH_S``; one dead while its node is alive
        is replaced. Ends with the node, or when no replacement starts."""
        while not self._closing:
            await asyncio.sleep(WATCH_S)
            try:
                await asyncio.wait_for(_get(self.handles[node].pid.remote()), LOOK_S)
                continue
            except self._ray.exceptions.ActorDiedError as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            except (TimeoutError, self._ray.exceptions.RayError):
                continue  # busy, or not known to be dead: looked at again
            if not await self._node_alive(node):
                log.info("node_browser_node_lost", node=node[:8])
                return  # its actors went with it: the batch re-runs their tasks elsewhere
            log.warning("node_browser_actor_lost", node=node[:8], error=reason)
            if not await self._replace(node):
                return

    async def _node_alive(self, node: str) -> bool:
        """Whether Ray counts ``node`` alive (true when it cannot tell within ``LOOK_S``)."""
        try:
            nodes = await asyncio.wait_for(asyncio.to_thread(self._ray.nodes), LOOK_S)
        except Exception:  # not known to be gone: a replacement is tried
            return True
        return any(n.get("NodeID") == node and n.get("Alive") for n in nodes)

    async def _replace(self, node: str) -> bool:
        """A node's browser actor in a lost one's place, on its port, ``REPLACES`` tries at most (each
        one that fails ended); whether one started."""
        port = int(str(self.hosts[node]["url"]).rsplit(":", 1)[1])
        for attempt in range(1, REPLACES + 1):
            with contextlib.suppress(Exception):
                self._ray.kill(self.handles[node])  # the lost one, or the last try
            if self._closing or not await self._node_alive(node):
                return False
            endpoint, error = await self._spawn(node, port)
            if endpoint is not None:
                self.replaced += 1
                log.info("node_browser_actor_replaced", node=node[:8], port=port, attempt=attempt)
                return True
            log.warning("node_browser_actor_replace_failed", node=node[:8], port=port, attempt=attempt, error=error)
            await asyncio.sleep(WATCH_S)
        with contextlib.suppress(Exception):
            self._ray.kill(self.handles[node])
        log.error("node_browser_actor_given_up", node=node[:8], port=port, attempts=REPLACES)
        return False

    async def host_of(self, actor: Any) -> dict[str, Any] | None:
        """The browser host of ``actor``'s node (a replacement's), None when its node has none."""
        return self.hosts.get(await self._node(actor))

    async def aclose(self) -> None:
        """Stop watching (a replacement being started is ended below), close the nodes' browsers,
        then end their actors."""
        self._closing = True
        for watch in self._watches:
            watch.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*self._watches, return_exceptions=True), CLOSE_S)
        with contextlib.suppress(Exception):
            closing = asyncio.gather(*(_get(h.aclose.remote()) for h in self.handles.values()), return_exceptions=True)
            await asyncio.wait_for(closing, CLOSE_S)
        for handle in self.handles.values():
            with contextlib.suppress(Exception):
                self._ray.kill(handle)
        self.handles.clear()
        self.hosts.clear()
