"""What the plugin keeps for a whole pytest run (one per xdist worker), and what it makes per test.

``WebSession`` holds the settings, the agent's config and, from the first test that asks for
``web``, one ``Agent`` (its model clients' connection pools are shared by all the tests of the run,
on the event loop they run on: Playwright's own under the sync API, the session loop under
pytest-playwright-asyncio) and the session's budget. ``open_test`` makes a test's ``AsyncWeb``:
a pilot on its page with its replay cache, its budgets and its run folder.

**Budgets.** A test's budget is a plain ``Budget`` shared by its ``act``/``check``/``extract``
calls. The session's budget must hold for the whole ``pytest -n 4`` run, not per worker:
``SharedBudget`` keeps its counts in a small JSON file in the run's temporary directory (the one
xdist's workers share), read and written under an exclusive ``flock`` at each reservation and
charge, so the call limit is exact across processes. The lock is held for a read and a write of
the file; it is asked for without blocking (the event loop runs on), again every few milliseconds,
and after ``LOCK_WAIT_S`` the call fails saying which file stayed locked. A test's reservations
still held at its end (a call interrupted between its reservation and its charge) are given back
then (``finish_test``), so the other workers do not count them as in flight for the rest of the
run. Without ``fcntl`` (Windows) it counts in this process only.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import structlog
from playwright.async_api import Page as AsyncPage

from ..agent import Agent
from ..browser.launcher import find_chromium
from ..budget import Budget, BudgetLimits
from ..config import AgentConfig
from ..errors import WebAgentError
from ..files.disk import write_atomic
from ..records import ROLES, ModelCall
from .artifacts import RunFolder, cache_path, display_path, node_name, open_cache
from .options import PluginSettings, fail_with
from .web import AsyncWeb, Deadlines

if sys.platform != "win32":  # Windows has no fcntl: there a session's budget counts in its own process
    import fcntl

__all__ = [
    "SharedBudget",
    "TestState",
    "WebSession",
    "per_session_budget",
    "per_test_budget",
]

log = structlog.get_logger("webagent.pytest")


_FIELDS = ("calls", "tokens", "usd", "in_flight")
#: How long a reservation or a charge waits for the budget file's lock, and how often it asks.
LOCK_WAIT_S = 10.0
_LOCK_POLL_S = 0.005


class SharedBudget(Budget):
    """A ``Budget`` whose counts live in ``path``, shared by the processes that use the same file."""

    def __init__(
        self,
        limits: BudgetLimits,
        price: Callable[[ModelCall], float],
        path: Path,
        *,
        scope: str = "session",
        hint: str | None = None,
        lock_wait_s: float = LOCK_WAIT_S,
    ) -> None:
        super().__init__(limits, price, scope=scope, hint=hint)
        self.path = path
        self.lock_wait_s = lock_wait_s
        self._lock_path = path.with_name(path.name + ".lock")
        self._held = False  # inside _shared() already (charge() calls release())
        self.reserved = 0  # this process's reservations not charged or released yet

    @contextlib.contextmanager
    def _shared(self) -> Iterator[None]:
        """Load the shared counts, let the caller change them, store them: all under the file lock."""
        if sys.platform == "win32" or self._held:
            yield
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a+") as lock:
            self._lock(lock.fileno())
            self._held = True
            try:
                self._load()
                yield
                write_atomic(self.path, json.dumps({name: getattr(self, name) for name in _FIELDS}))
            finally:
                self._held = False
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _lock(self, fd: int) -> None:
        """Take the file lock without blocking for long; WebAgentError after ``lock_wait_s``."""
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise WebAgentError(
                        f"the session budget file {self.path} stayed locked for {self.lock_wait_s:g} s "
                        f"(another pytest process holding {self._lock_path.name}?)"
                    ) from None
                time.sleep(_LOCK_POLL_S)

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:  # a torn file cannot happen (atomic writes); be safe anyway
            log.warning("shared_budget_unreadable", path=str(self.path), error=str(exc))
            return
        self.calls = int(data.get("calls", 0))
        self.tokens = int(data.get("tokens", 0))
        self.usd = float(data.get("usd", 0.0))
        self.in_flight = int(data.get("in_flight", 0))

    def check(self) -> None:
        with self._shared():
            super().check()
        self.reserved += 1

    def release(self, reserved: int = 1) -> None:
        with self._shared():
            super().release(reserved)
        self.reserved = max(0, self.reserved - reserved)

    def release_held(self) -> None:
        """Give back what this process reserved and neither charged nor released (an interrupted call)."""
        if self.reserved:
            log.info("shared_budget_released", path=str(self.path), reservations=self.reserved)
            self.release(self.reserved)

    def charge(self, call: ModelCall) -> None:
        with self._shared():
            super().charge(call)


def per_test_budget(calls: int | None, price: Callable[[ModelCall], float]) -> Budget | None:
    """The budget of one test (None when unlimited)."""
    if calls is None:
        return None
    return Budget(BudgetLimits(calls=calls), price, scope="test", hint="--webagent-max-calls-per-test")


def per_session_budget(calls: int | None, price: Callable[[ModelCall], float], shared_dir: Path) -> Budget | None:
    """The budget of the whole run, shared by its xdist workers through ``shared_dir`` (None when unlimited)."""
    if calls is None:
        return None
    return SharedBudget(
        BudgetLimits(calls=calls),
        price,
        shared_dir / "webagent-session-budget.json",
        scope="session",
        hint="--webagent-max-calls-per-session",
    )


#: Beyond the run's own limits, what a whole call may take (opening, closing, writing the report).
_MARGIN_S = 60.0


@dataclass
class TestState:
    """One test's ``web``: its pilot's runs and where they go."""

    web: AsyncWeb
    runs: RunFolder
    cache_file: Path | None
    budgets: list[Budget] = field(default_factory=list)


class WebSession:
    """The plugin's state for one pytest run (per worker under xdist)."""

    def __init__(self, settings: PluginSettings, config: AgentConfig, *, shared_dir: Path, invocation_dir: Path):
        self.settings = settings
        self.config = config
        self.invocation_dir = invocation_dir
        self.budget = per_session_budget(settings.max_calls_per_session, config.price, shared_dir)
        self._agent: Agent | None = None
        browser = config.browser
        self.deadlines = Deadlines(
            act_s=config.agent.max_time_s + browser.open_timeout_s + _MARGIN_S,
            look_s=max(  # a check asks the validator's endpoint, an extraction the policy's
                role.timeout_s * (role.max_retries + 2) for role in (config.policy, config.validator)
            )
            + browser.capture_timeout_s
            + browser.open_timeout_s
            + _MARGIN_S,
        )

    @classmethod
    def from_settings(cls, settings: PluginSettings, *, shared_dir: Path, invocation_dir: Path) -> WebSession:
        """Load the config; a bad one (or a configured Chromium that is not there) fails the tests
        that use ``web`` with its one-line message, and them only (``browser_type_launch_args``)."""
        try:
            config = settings.load_config()
            if config.browser.executable_path:  # what the launch arguments were left without
                find_chromium(config.browser)
        except WebAgentError as exc:
            fail_with(exc)
        return cls(settings, config, shared_dir=shared_dir, invocation_dir=invocation_dir)

    @property
    def agent(self) -> Agent:
        """The run's agent (made on first use: a config without endpoints fails the test in one line)."""
        if self._agent is None:
            try:
                self._agent = Agent(self.config)
            except WebAgentError as exc:
                fail_with(exc)
        return self._agent

    def open_test(self, item: pytest.Item, page: AsyncPage, output_path: str | Path) -> TestState:
        """The ``web`` of one test on ``page``."""
        runs = RunFolder(output_path, self.settings.runs, self.invocation_dir)
        cache_file = cache_path(item.path, node_name(item)) if self.settings.cache != "off" else None
        try:
            cache = open_cache(self.settings.cache, cache_file) if cache_file is not None else None
        except WebAgentError as exc:
            fail_with(exc)
        own = per_test_budget(self.settings.max_calls_per_test, self.config.price)
        budgets = [b for b in (own, self.budget) if b is not None]
        pilot = self.agent.pilot(page, output_dir=runs.output_dir, replay=cache, budgets=budgets)
        return TestState(web=AsyncWeb(pilot, runs), runs=runs, cache_file=cache_file, budgets=budgets)

    def finish_test(self, item: pytest.Item, state: TestState, failed: bool) -> None:
        """At a test's end: keep or remove its run folders, and name the reports kept in its report."""
        kept = state.runs.finish(failed)
        for report in kept:
            item.user_properties.append(("webagent_report", display_path(report, self.invocation_dir)))
        usage = state.web.pilot.usage
        calls = sum(usage.role(role).calls for role in ROLES)
        item.user_properties.append(("webagent_model_calls", calls))
        for budget in state.budgets:  # a call interrupted between its reservation and its charge
            if isinstance(budget, SharedBudget):
                budget.release_held()

    async def aclose(self) -> None:
        """Close the agent's connection pools (on the loop they were used on)."""
        if isinstance(self.budget, SharedBudget):  # a test interrupted before its own teardown
            self.budget.release_held()
        if self._agent is not None:
            agent, self._agent = self._agent, None
            await agent.aclose()
