"""The ``web`` fixture's objects: ``AsyncWeb`` (async tests) and ``Web`` (sync tests).

Both drive a ``Pilot`` (``Agent.pilot``) on the test's page and turn its answers into test
outcomes: an ``act`` that does not reach its goal and a ``check`` that does not hold raise
``AssertionError`` with the validator's feedback and the path of the call's ``report.html``; any
other error of webagent (an extraction that does not validate, a spent budget, a model server that
does not answer) keeps its type and gets that path as a note. ``Web`` runs the same coroutines on
Playwright's event loop from the sync test (``bridge.run``), each with a deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from playwright.sync_api import Page as SyncPage
from pydantic import BaseModel

from ..errors import WebAgentError
from ..guard.secrets import shorten
from ..inputs import terminal_text
from ..pilot import Pilot
from ..records import CheckResult, RunResult
from .artifacts import RunFolder
from .bridge import run as run_on_page_loop

__all__ = ["AsyncWeb", "Deadlines", "Web", "act_failure", "check_failure"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class Deadlines:
    """Backstops of whole calls, above the run's own limits (every browser and model call inside
    is bounded already): an ``act`` gets the run's ``max_time_s`` and then some."""

    def __init__(self, act_s: float, look_s: float) -> None:
        self.act_s = act_s
        self.look_s = look_s


def _quote(text: str, limit: int = 200) -> str:
    return repr(shorten(" ".join(text.split()), limit))


def act_failure(goal: str, result: RunResult, report: str | None) -> str:
    """The message of an ``act`` that did not reach its goal."""
    lines = [f"web.act did not reach its goal {_quote(goal)}"]
    plural = "s" if result.steps != 1 else ""
    lines.append(f"stopped: {result.stop_reason} ({result.message or f'after {result.steps} step{plural}'})")
    if result.answer:
        lines.append(f"last answer: {_quote(result.answer)}")
    if result.feedback:
        lines.append(f"validator: {result.feedback[-1]}")
    lines.append(f"report: {report}" if report else "report: none (--webagent-runs off)")
    return terminal_text("\n".join(lines))  # pytest shows it on the terminal: a model's words


def check_failure(statement: str, check: CheckResult, report: str | None) -> str:
    """The message of a ``check`` whose statement does not hold."""
    lines = [f"web.check failed: {_quote(statement)}", f"validator: {check.feedback}"]
    if check.url:
        lines.append(f"page: {check.url}")
    lines.append(f"report: {report}" if report else "report: none (--webagent-runs off)")
    return terminal_text("\n".join(lines))


class AsyncWeb:
    """Natural-language steps and checks on the test's page: ``await web.act(...)``."""

    def __init__(self, pilot: Pilot, runs: RunFolder) -> None:
        self.pilot = pilot
        self.runs = runs

    @property
    def reports(self) -> list[str]:
        """The reports written so far by this test's calls (paths as shown in messages)."""
        return [r for r in (self.runs.report(p) for p in self.pilot.run_dirs) if r]

    def _latest_report(self, before: int) -> str | None:
        written = self.pilot.run_dirs[before:]
        return self.runs.report(written[-1]) if written else None

    async def _call(self, call: Callable[[], Awaitable[T]]) -> tuple[T, str | None]:
        """Run one pilot call; a webagent error gets the path of the call's report as a note."""
        __tracebackhide__ = True
        before = len(self.pilot.run_dirs)
        try:
            value = await call()
        except WebAgentError as exc:
            report = self._latest_report(before)
            if report:
                exc.add_note(f"report: {report}")
            raise
        return value, self._latest_report(before)

    async def act(self, goal: str, *, max_steps: int | None = None) -> RunResult:
        """Run the agent toward ``goal`` from the page as it is; AssertionError if it does not get there."""
        __tracebackhide__ = True
        result, report = await self._call(lambda: self.pilot.act(goal, max_steps=max_steps))
        if not result.success:
            raise AssertionError(act_failure(goal, result, report))
        return result

    async def check(self, statement: str) -> CheckResult:
        """Assert that ``statement`` holds on the page as it is now (the validator judges)."""
        __tracebackhide__ = True
        check, report = await self._call(lambda: self.pilot.check(statement))
        if not check.holds:
            raise AssertionError(check_failure(statement, check, report))
        return check

    async def extract(self, what: str, *, schema: type[M]) -> M:
        """``what``, read off the page, as a validated ``schema`` instance (ExtractionError if it is not)."""
        __tracebackhide__ = True
        value, _ = await self._call(lambda: self.pilot.extract(what, schema=schema))
        return value

    async def goto(self, url: str) -> None:
        """Open ``url`` under webagent's navigation policy (``page.goto`` works as well)."""
        __tracebackhide__ = True
        await self._call(lambda: self.pilot.goto(url))

    async def screenshot(self) -> bytes:
        """A PNG of the page's viewport."""
        return await self.pilot.screenshot()


class Web:
    """The same calls from a sync test (pytest-playwright's ``page``): ``web.act(...)``."""

    def __init__(self, page: SyncPage, web: AsyncWeb, deadlines: Deadlines) -> None:
        self.page = page
        self._web = web
        self._deadlines = deadlines

    @property
    def pilot(self) -> Pilot:
        return self._web.pilot

    @property
    def reports(self) -> list[str]:
        return self._web.reports

    def _run(self, coroutine: Any, timeout_s: float, what: str) -> Any:
        __tracebackhide__ = True
        return run_on_page_loop(self.page, coroutine, timeout_s=timeout_s, what=what)

    def act(self, goal: str, *, max_steps: int | None = None) -> RunResult:
        """Run the agent toward ``goal`` from the page as it is; AssertionError if it does not get there."""
        __tracebackhide__ = True
        result: RunResult = self._run(
            self._web.act(goal, max_steps=max_steps), self._deadlines.act_s, f"web.act({_quote(goal, 80)})"
        )
        return result

    def check(self, statement: str) -> CheckResult:
        """Assert that ``statement`` holds on the page as it is now (the validator judges)."""
        __tracebackhide__ = True
        check: CheckResult = self._run(
            self._web.check(statement), self._deadlines.look_s, f"web.check({_quote(statement, 80)})"
        )
        return check

    def extract(self, what: str, *, schema: type[M]) -> M:
        """``what``, read off the page, as a validated ``schema`` instance (ExtractionError if it is not)."""
        __tracebackhide__ = True
        value: M = self._run(
            self._web.extract(what, schema=schema), self._deadlines.look_s, f"web.extract({_quote(what, 80)})"
        )
        return value

    def goto(self, url: str) -> None:
        """Open ``url`` under webagent's navigation policy (``page.goto`` works as well)."""
        __tracebackhide__ = True
        self._run(self._web.goto(url), self._deadlines.look_s, f"web.goto({url!r})")

    def screenshot(self) -> bytes:
        """A PNG of the page's viewport."""
        png: bytes = self._run(self._web.screenshot(), self._deadlines.look_s, "web.screenshot()")
        return png
