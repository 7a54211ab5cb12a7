"""One task on one page: observe → policy → localize → act → (answer → validate), one Step per turn.

``Episode`` is the one loop driver. ``steps()`` runs a whole task with the policy model (what
``Agent`` streams); ``WebEnv`` drives the same episode a step at a time with a policy outside the
process, through the same four calls: ``next_step`` (the step and whether it is the final one),
``observe``, ``run_step`` (the step's work under the run's time limit; a fatal error is kept, not
raised) and ``end_step`` (accounting, and the result when the step ends the run). The stop reason
and the result are worked out in one place, whoever drives.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence

import structlog

from ..budget import Budget
from ..config import AgentSettings
from ..errors import (
    BrowserError,
    BudgetExceeded,
    ConfigError,
    ModelError,
)
from ..files.uploads import AllowedFiles
from ..images import Screenshot
from ..model.client import Message
from ..records import DownloadedFile, PolicyState, RunResult, Step, StopReason
from ..replay import StepReplay
from .acting import Hands
from .briefing import Briefing
from .clock import RunClock
from .human import HumanHandler
from .meter import Meter
from .page import PageDriver, Roles
from .task import TaskCheck, TaskHook
from .turn import StepWork
from .verdicts import Judge, Verdicts

__all__ = ["Episode"]

log = structlog.get_logger("webagent.loop")
#: The final answer is asked for when less than this share of ``max_time_s`` is left (at most
#: ``FINAL_RESERVE_MAX_S``); at ``max_time_s`` the run ends wherever it is.
FINAL_RESERVE = 0.25
FINAL_RESERVE_MAX_S = 60.0


class Episode(StepWork):
    """One task on one page. Iterate ``steps()`` (or drive it step by step); ``result`` is set when it ends."""

    def __init__(
        self,
        roles: Roles,
        page: PageDriver,
        settings: AgentSettings,
        *,
        url: str,
        goal: str,
        judge: Judge | None = None,
        expect: str | None = None,
        replay: StepReplay | None = None,
        budgets: Sequence[Budget] = (),
        navigate: bool = True,
        task: TaskHook | None = None,
        uploads: AllowedFiles | None = None,
        human: HumanHandler | None = None,
        downloads: Callable[[], Sequence[DownloadedFile]] | None = None,
    ) -> None:
        """``navigate``: open ``url`` first (False: start from the page as it is, ``url`` being its URL);
        ``task``: a task that rewards itself (``loop.task``): started once the page is open, checked
        after each step; its verdict ends the run and is the run's success and reward; ``uploads``:
        the files ``upload_file`` may name; ``human``: who answers ``ask_user`` (``loop.human``;
        None: the run ends ``needs_human``); ``downloads``: the files the pages downloaded and the
        session kept so far (the result lists them)."""
        self.uploads = uploads
        self.human = human
        self._downloads = downloads
        self.roles = roles
        self.navigate = navigate
        self.replay = replay
        self.meter = Meter(budgets)
        self.page = page
        self.settings = settings
        self.url = url
        self.goal = goal
        self.result: RunResult | None = None
        self.task = task
        #: What the task's page said after the last step (None without a task, or before its first check).
        self.task_state: TaskCheck | None = None
        #: Whether the policy places its own clicks (one request per step) or the localizer does.
        self.grounding = roles.policy.grounding(settings)
        self._grounded = self.grounding == "policy"
        #: How many actions one reply may carry (``max_actions_per_turn``).
        self.max_actions = roles.policy.max_actions(settings)
        self._hands = Hands(page, roles.localizer, self.meter, uploads, grounded=self._grounded)
        # One capture per step, at the size the role that reads its coordinates needs.
        self._frame = roles.policy.frame(*page.viewport) if self._grounded else roles.localizer.frame(*page.viewport)
        self._shots: deque[Screenshot] = deque(
            maxlen=max(settings.screenshots_in_context, settings.validator_screenshots)
        )
        self.verdicts = Verdicts(roles.validator, self.meter, goal=goal, judge=judge, expect=expect)
        self.clock = RunClock(settings.max_time_s)
        self._t0 = 0.0
        self._index = 0
        self._out_of_steps = False
        self._stop: tuple[StopReason, str] | None = None
        self._opened: bool | None = None  # what open() returned (None: not yet)
        self._limit: asyncio.Timeout | None = None  # the step's time limit, moved on by a person's answer
        self._infrastructure = False  # the error that stops the run is the infrastructure's (errors.py)
        #: The error that ended the run, if one did (a crash, a model server down: what a batch re-runs for).
        self.error: ModelError | BrowserError | None = None
        #: What the policy is told: its notes, recent actions, progress and conversation.
        self._told = Briefing(roles.policy, settings)
        #: What the validator judges answers in: the policy's conversation, or a request of its own.
        self.judging = roles.policy.spec.judged_in(settings.validator_context, roles.validator.follows_policy)
        if self.judging == "conversation" and roles.validator.client.model != roles.policy.client.model:
            raise ConfigError(
                "agent.validator_context = 'conversation' needs the validator to be the policy's model "
                f"({roles.policy.client.model}), not {roles.validator.client.model}: set validator.model to it, "
                "or agent.validator_context = 'separate'"
            )

    @property
    def success(self) -> bool:
        """Whether an answer was accepted."""
        return self.verdicts.success

    @property
    def attempts(self) -> int:
        """Answers judged so far."""
        return self.verdicts.attempts

    @property
    def screenshots(self) -> list[Screenshot]:
        """The screenshots the policy is shown (oldest first, the current one last)."""
        return list(self._shots)

    def policy_messages(self, state: PolicyState) -> list[Message]:
        """The policy request of the step last observed (``state``: what ``observe`` returned)."""
        return list(self._told.messages)

    # -- driving ---------------------------------------------------------------------------------

    async def steps(self) -> AsyncGenerator[Step, None]:
        """Run the task with the policy model. The start URL is opened first (NavigationError if it
        cannot be), unless the episode starts from the page as it is. The run ends at ``max_time_s`` wherever it is (stop reason ``max_time``), a step
        in progress included."""
        if not await self.open():
            return
        try:
            while True:
                step = self.next_step()
                await self.run_step(step, self._turn(step))
                ended = self.end_step(step)
                yield step
                if ended is not None:
                    return
        finally:
            if self.result is None:  # closed early by the consumer
                self.finish("error", "the run was interrupted")

    async def open(self) -> bool:
        """Open the start URL within the run's time limit; False (the result set) if the limit passed.

        An episode that does not navigate starts its clock here and opens nothing. Once opened,
        ``open`` (and ``steps``, which calls it) says so again without opening anything."""
        if self._opened is None:
            self._opened = await self._open()
        return self._opened

    async def _open(self) -> bool:
        self.clock.start()
        if not self.navigate:
            return True
        limit = self.clock.limit()
        t = time.perf_counter()
        try:
            async with limit:
                await self.page.goto(self.url, start=True)
                if self.task is not None:
                    goal = await self.task.start(self.page)
                    if goal:
                        self.goal = self.verdicts.goal = goal
        except TimeoutError:
            if not limit.expired():
                raise
            self.finish("max_time", self._out_of_time("while opening the start page"))
            return False
        finally:
            self.meter.browser_s += time.perf_counter() - t
        return True

    def next_step(self) -> Step:
        """The next step: ``kind == "final"`` when only an answer is asked for (out of steps or time)."""
        limit = self.settings.max_time_s
        reserve = min(FINAL_RESERVE * limit, FINAL_RESERVE_MAX_S)
        # max_steps counts every step, the final one too: "Step 3 of 3" asks for the answer
        self._out_of_steps = self._index + 1 >= self.settings.max_steps
        final = self._out_of_steps or self.clock.elapsed() >= limit - reserve
        self._index += 1
        return Step(index=self._index, kind="final" if final else "action", url=self.page.url)

    async def run_step(self, step: Step, work: Awaitable[None]) -> None:
        """Run a step's work within the run's time limit; what ends the run is kept for ``end_step``."""
        limit = self._limit = self.clock.limit()
        try:
            async with limit:
                await work
                if self.task is not None:
                    await self._check_task()
        except TimeoutError:
            if not limit.expired():
                raise
            self._stop = ("max_time", self._out_of_time(f"during step {step.index}"))
            step.error = f"the run's time limit ({self.settings.max_time_s:g} s) ran out during this step"
            step.outcome = step.outcome or "stopped: out of time"
        except (ModelError, BrowserError) as exc:
            self.meter.charge_failed(step, exc)
            step.error = str(exc)
            self._stop = ("error", str(exc))
            self._infrastructure = exc.infrastructure
            self.error = exc
            log.warning("run_error", error=str(exc))
        except BudgetExceeded as exc:
            step.outcome = f"stopped: {exc}"
            self._stop = ("budget", str(exc))
        finally:
            step.recoveries += self.page.drain_recoveries()
            self.meter.account(step)
            if self.replay is not None:
                self.replay.observe(step)

    def end_step(self, step: Step) -> RunResult | None:
        """The run's result if ``step`` ended it (an error, a spent budget, an accepted answer, the
        last answer allowed, the final step), else None."""
        stop = self._stop
        if stop is None and step.kind == "final":
            if self._out_of_steps:
                steps = f"{self._index} step" + ("s" if self._index != 1 else "")
                stop = ("max_steps", f"stopped after {steps}; " + self.verdicts.summary())
            else:
                stop = ("max_time", f"stopped after {self.settings.max_time_s:g} s; " + self.verdicts.summary())
        if stop is None and self.verdicts.ended(self.settings.max_attempts):
            stop = ("answered", self.verdicts.summary())
        return None if stop is None else self.finish(*stop, infrastructure=self._infrastructure)

    async def _check_task(self) -> None:
        """Ask the task's page whether the episode is over (an error, a budget or time running out
        having ended it already leaves it so)."""
        assert self.task is not None
        t = time.perf_counter()
        try:
            state = self.task_state = await self.task.check(self.page)
        finally:
            self.meter.browser_s += time.perf_counter() - t
        if state.done and self._stop is None:
            self._stop = ("answered", state.message or f"the task ended with reward {state.reward:g}")

    def finish(self, reason: StopReason, message: str, *, infrastructure: bool = False) -> RunResult:
        """End the run: set and return ``result`` (``infrastructure``: an error of the machinery under
        the run, not the task's: ``WebAgentError.infrastructure``)."""
        task = self.task_state
        self.result = RunResult(
            success=self.verdicts.success if self.task is None else task is not None and task.success,
            reward=task.reward if task is not None else None,
            answer=self.verdicts.answer,
            stop_reason=reason,
            message=message or "the run was interrupted",
            infrastructure=reason == "error" and infrastructure,
            url=self.url,
            final_url=self._safe_url(),
            goal=self.goal,
            steps=self._index,
            attempts=self.verdicts.attempts,
            feedback=self.verdicts.feedbacks,
            usage=self.meter.usage,
            duration_s=round(self.clock.wall_s(), 3),
            model_s=round(self.meter.model_s, 3),
            browser_s=round(self.meter.browser_s, 3),
            started_at=self.clock.started_at,
            replayed_steps=self.replay.replayed if self.replay else 0,
            calls_saved=self.replay.calls_saved if self.replay else 0,
            grounding=self.grounding,
            downloads=list(self._downloads()) if self._downloads is not None else [],
        )
        return self.result

    def pause(self) -> None:
        """Stop the run's clock while a policy outside the process decides (``WebEnv``)."""
        self.clock.pause()

    def resume(self) -> None:
        self.clock.resume()

    def _out_of_time(self, during: str) -> str:
        return f"stopped at the {self.settings.max_time_s:g} s time limit {during}; " + self.verdicts.summary()

    def _safe_url(self) -> str:
        try:
            return self.page.url
        except Exception:
            return ""
