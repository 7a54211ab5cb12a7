"""MiniWoB++ with its own rewards: the ``miniwob`` package's task pages, served by webagent.

``miniwob/<name>`` (``miniwob/click-button``) opens ``<name>.html`` from a local HTTP server
started on first use (one per process, on 127.0.0.1, serving the package's ``html`` folder; set
``MINIWOB_URL`` to the ``.../miniwob/`` folder of another server to use that one instead). A task
starts as BrowserGym starts it: ``Math.seedrandom(seed)``, no time limit of the page's own
(``core.EPISODE_MAX_TIME`` 1,000,000 ms), ``core.startEpisodeReal()``, then waits for
``WOB_TASK_READY``; its goal is ``core.getUtterance()``. The page's reward, timer and click displays
are hidden, as BrowserGym removes them (the goal stays shown). After each step the page's globals are
read as MiniWoB's and BrowserGym's environments read them: the episode is over when
``WOB_DONE_GLOBAL`` is true, and the reward is BrowserGym's, 1.0 when the raw reward
(``WOB_RAW_REWARD_GLOBAL``, without MiniWoB's time scaling) is positive, else 0.0 (both raw and
time-scaled rewards are kept in the check's ``info``). A page that left the task's URL ends the
episode with reward 0, as in BrowserGym. A task whose seed is None gets a random one (in ``info``).
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import importlib.util
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from ..errors import BrowserError, ConfigError, InputError
from ..loop import PageDriver, TaskCheck
from .benchmarks import BenchmarkTask, TaskSet, shown

__all__ = ["EPISODE_MAX_TIME_MS", "MiniWoBServer", "MiniWoBTask", "MiniWoBTasks", "miniwob_server"]

log = structlog.get_logger("webagent.tasks")

#: The page's own time limit (ms): BrowserGym's, long enough never to end an episode by itself.
EPISODE_MAX_TIME_MS = 1_000_000
#: Seconds a task's page gets to say it is ready after its start.
READY_TIMEOUT_S = 10.0

_START = """([seed, maxTime]) => {
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxTime;
  core.startEpisodeReal();
  // As BrowserGym: no reward, timer or click display (the goal stays shown in #query).
  for (const id of ["reward-display", "click-canvas"]) {
    const e = document.getElementById(id);
    if (e) e.style.visibility = "hidden";
  }
}"""
# The goal once the task is ready, else null: polled from Python, so that a page whose clock is
# paused (a seeded environment's, ``webagent.env.clock``) is waited for in real time.
_GOAL = """() => {
  if (!WOB_TASK_READY) return null;
  const u = core.getUtterance();
  return typeof u === "string" ? u : u.utterance;
}"""
_POLL_S = 0.02

_STATE = """() => ({
  done: WOB_DONE_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, env_reward: WOB_REWARD_GLOBAL,
  reason: WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON), episode: WOB_EPISODE_ID,
})"""


@functools.cache
def _html_root() -> Path:
    spec = importlib.util.find_spec("miniwob")  # its pages only: the package itself imports selenium
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "MiniWoB++ tasks need the miniwob package: pip install 'webagent[rl]' (or pip install miniwob)"
        )
    root = Path(next(iter(spec.submodule_search_locations))).resolve() / "html"
    if not (root / "miniwob").is_dir():
        raise ConfigError(f"the miniwob package has no task pages at {root / 'miniwob'}")
    return root


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A context closed while its page still loaded (an episode ended, a reset) drops its
        # connections: no fault of the server's, and no traceback on the environment server's stderr.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        log.warning("miniwob_server_error", client=str(client_address), error=repr(sys.exc_info()[1]))


class MiniWoBServer:
    """The task pages over HTTP on 127.0.0.1 (a daemon thread; ``close`` stops it)."""

    def __init__(self, root: Path | None = None, *, port: int = 0) -> None:
        self.root = root or _html_root()
        handler = functools.partial(_Quiet, directory=str(self.root))
        self._httpd = _Server(("127.0.0.1", port), handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="webagent-miniwob", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """The URL of the folder of task pages (ends with ``/miniwob/``)."""
        return f"http://127.0.0.1:{self.port}/miniwob/"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


_server: MiniWoBServer | None = None
_server_lock = threading.Lock()


def miniwob_server() -> MiniWoBServer:
    """The process's MiniWoB server, started on first use."""
    global _server
    with _server_lock:
        if _server is None:
            _server = MiniWoBServer()
            log.info("miniwob_server_started", url=_server.base_url)
        return _server


class MiniWoBTask(BenchmarkTask):
    """One MiniWoB++ task with its seed (see the module docstring)."""

    def __init__(self, name: str, *, base_url: str, seed: int | None = None) -> None:
        seed = random.randrange(1_000_000) if seed is None else seed
        super().__init__(f"miniwob/{name}", url=f"{base_url}{name}.html", goal=f"MiniWoB++ task {name}", seed=seed)
        self.name = name

    async def start(self, page: PageDriver) -> str:
        await page.evaluate(_START, [self.seed, EPISODE_MAX_TIME_MS])
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not isinstance(goal := await page.evaluate(_GOAL), str):
            if time.monotonic() > deadline:
                raise BrowserError(f"the MiniWoB task {self.name} did not get ready within {READY_TIMEOUT_S:g} s")
            await asyncio.sleep(_POLL_S)
        self.goal = goal
        return goal

    async def check(self, page: PageDriver) -> TaskCheck:
        if page.url.split("#")[0] != self.url:
            return TaskCheck(done=True, message=f"the page left the task (now at {page.url}); reward 0")
        state = await page.evaluate(_STATE)
        if not isinstance(state, dict):
            raise BrowserError(f"the MiniWoB page gave no state: {state!r}")
        raw = float(state.get("raw_reward") or 0.0)
        done = bool(state.get("done"))
        reward = 1.0 if done and raw > 0 else 0.0
        message = f"the task ended: reward {reward:g} (MiniWoB raw reward {raw:g})" if done else ""
        info = {"raw_reward": raw, "env_reward": float(state.get("env_reward") or 0.0), "reason": state.get("reason")}
        return TaskCheck(done=done, reward=reward, success=reward > 0, message=message, info=info)


@functools.cache
def _names() -> list[str]:
    return sorted(p.stem for p in (_html_root() / "miniwob").glob("*.html"))


class MiniWoBTasks(TaskSet):
    """The ``miniwob`` task set: every page of the package (``names()``)."""

    name = "miniwob"

    def __init__(self, base_url: str | None = None) -> None:
        self._base_url = base_url or os.environ.get("MINIWOB_URL") or None

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            self._base_url = miniwob_server().base_url
        return self._base_url if self._base_url.endswith("/") else self._base_url + "/"

    def names(self) -> list[str]:
        return _names()

    def task(self, name: str, seed: int | None) -> MiniWoBTask:
        if name.endswith(".html"):
            name = name[: -len(".html")]
        if name not in self.names():
            raise InputError(f"no MiniWoB++ task named {shown(name)!r} (e.g. click-button; see MiniWoBTasks().names())")
        return MiniWoBTask(name, base_url=self.base_url, seed=seed)
