"""The agent loop: observe → policy → localize → act → (answer → validate), one Step per turn.

The policy's context is bounded: the last ``screenshots_in_context`` screenshots, the last
``recent_actions`` actions and notes within ``notes_max_chars`` — so prompts do not grow with
the step count. Failures inside a step (an unusable reply, a point off the image, an action the
page refused) are recorded and told to the policy; only an unreachable model or a dead browser
end the run early, with stop reason ``error``; a spent budget ends it with ``budget``.

With a ``StepReplay`` each observation is fingerprinted; while it matches the recording the step is
replayed (recorded action, point and verdict; no model call), and from the first mismatch on the
models plan as usual.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, assert_never

import structlog

from .actions import (
    Action,
    Answer,
    ClickElement,
    GoBack,
    Goto,
    PolicyReply,
    PressKey,
    Refresh,
    Scroll,
    SelectOption,
    Wait,
    WriteElement,
    describe_action,
)
from .budget import Budget
from .config import AgentSettings
from .errors import ActionError, BrowserError, BudgetExceeded, LocalizationError, ModelError, ModelReplyError
from .images import Frame, Screenshot
from .records import ModelCall, Point, PromptContext, RunResult, Step, StopReason, Usage, Verdict
from .replay import CachedStep, StepReplay, fingerprint
from .roles.localizer import Localizer
from .roles.policy import Policy, PolicyState
from .roles.validator import Validator
from .urls import normalize_url

__all__ = ["Episode", "Judge", "PageDriver", "Roles"]

log = structlog.get_logger("webagent.loop")
NOTE_MAX_CHARS = 400
#: The final answer is asked for when less than this share of ``max_time_s`` is left (at most
#: ``FINAL_RESERVE_MAX_S``); at ``max_time_s`` the run ends wherever it is.
FINAL_RESERVE = 0.25
FINAL_RESERVE_MAX_S = 60.0


class PageDriver(Protocol):
    """What the loop needs from a browser session (``BrowserSession`` implements it)."""

    viewport: tuple[int, int]

    @property
    def url(self) -> str: ...
    async def title(self) -> str: ...
    async def page_text(self) -> str: ...
    async def screenshot(self, frame: Frame) -> Screenshot: ...
    def drain_events(self) -> list[str]: ...
    def drain_recoveries(self) -> list[str]: ...
    async def goto(self, url: str, *, start: bool = False) -> None: ...
    async def go_back(self) -> None: ...
    async def refresh(self) -> None: ...
    async def click(self, x: float, y: float) -> None: ...
    async def write(self, x: float, y: float, text: str, *, press_enter: bool) -> None: ...
    async def scroll(self, direction: str) -> None: ...
    async def press(self, key: str) -> None: ...
    async def select_option(self, x: float, y: float, option: str) -> str: ...
    async def wait(self, seconds: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Roles:
    policy: Policy
    localizer: Localizer
    validator: Validator


#: A judge other than the validator model: (answer, url, screenshots) -> (verdict, model call or None).
Judge = Callable[[str, str, list[Screenshot]], Awaitable[tuple[Verdict, ModelCall | None]]]


class _Stop(Exception):
    def __init__(self, reason: StopReason, message: str) -> None:
        self.reason = reason
        self.message = message


class Episode:
    """One task on one page. Iterate ``steps()``; ``result`` is set when it ends."""

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
    ) -> None:
        self.roles = roles
        self.judge = judge
        self.expect = expect
        self.replay = replay
        self.budgets = list(budgets)
        self._reserved = 0
        self.page = page
        self.settings = settings
        self.url = url
        self.goal = goal
        self.result: RunResult | None = None
        self.usage = Usage()
        self._frame = roles.localizer.frame(*page.viewport)
        self._shots: deque[Screenshot] = deque(maxlen=settings.screenshots_in_context)
        self._notes: list[str] = []
        self._recent: deque[str] = deque(maxlen=max(settings.recent_actions, 1))
        self._feedback: str | None = None
        self._feedbacks: list[str] = []
        self._attempts = 0
        self._answer: str | None = None
        self._success = False
        self._model_s = 0.0
        self._browser_s = 0.0
        self._started = time.monotonic()
        self._started_at = ""
        self._t0 = 0.0

    @property
    def success(self) -> bool:
        """Whether an answer was accepted."""
        return self._success

    @property
    def attempts(self) -> int:
        """Answers judged so far."""
        return self._attempts

    async def start(self) -> None:
        """Open the start URL (NavigationError if it cannot be)."""
        self._started = time.monotonic()
        self._started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        t = time.perf_counter()
        try:
            await self.page.goto(self.url, start=True)
        finally:
            self._browser_s += time.perf_counter() - t

    def out_of_budget(self, steps_done: int) -> tuple[bool, bool]:
        """(out of steps, out of time) before the next step: out of time once the final answer's
        reserve of ``max_time_s`` is reached."""
        limit = self.settings.max_time_s
        reserve = min(FINAL_RESERVE * limit, FINAL_RESERVE_MAX_S)
        return steps_done >= self.settings.max_steps, time.monotonic() - self._started >= limit - reserve

    def _time_limit(self) -> asyncio.Timeout:
        """The hard wall-clock limit of the run: ``max_time_s`` after its start."""
        left = self._started + self.settings.max_time_s - time.monotonic()
        return asyncio.timeout(max(0.0, left))

    def _out_of_time(self, during: str) -> _Stop:
        limit = self.settings.max_time_s
        return _Stop("max_time", f"stopped at the {limit:g} s time limit {during}; " + self._verdict())

    async def steps(self) -> AsyncIterator[Step]:
        """Run the task. The start URL is opened first (NavigationError if it cannot be). The run
        ends at ``max_time_s`` wherever it is (stop reason ``max_time``), a step in progress included."""
        self._started = time.monotonic()
        limit = self._time_limit()
        try:
            async with limit:
                await self.start()
        except TimeoutError:
            if not limit.expired():
                raise
            self.finish("max_time", self._out_of_time("while opening the start page").message, 0)
            return
        reason: StopReason = "error"
        message = ""
        index = 0
        try:
            while True:
                out_of_steps, out_of_time = self.out_of_budget(index)
                final = out_of_steps or out_of_time
                index += 1
                step = Step(index=index, kind="final" if final else "action", url=self.page.url)
                fatal: Exception | None = None
                limit = self._time_limit()
                try:
                    async with limit:
                        await self._turn(step, final)
                except TimeoutError:
                    if not limit.expired():
                        raise
                    fatal = self._out_of_time(f"during step {index}")
                    step.error = f"the run's time limit ({self.settings.max_time_s:g} s) ran out during this step"
                    step.outcome = step.outcome or "stopped: out of time"
                except (ModelError, BrowserError) as exc:
                    self.record_failed_call(step, exc)
                    fatal = exc
                    step.error = str(exc)
                except BudgetExceeded as exc:
                    fatal = _Stop("budget", str(exc))
                    step.outcome = f"stopped: {exc}"
                finally:
                    step.recoveries += self.page.drain_recoveries()
                    self.account(step)
                    if self.replay is not None:
                        self.replay.observe(step)
                yield step
                if fatal is not None:
                    raise fatal
                if final:
                    if out_of_steps:
                        raise _Stop("max_steps", f"stopped after {self.settings.max_steps} steps; " + self._verdict())
                    raise _Stop("max_time", f"stopped after {self.settings.max_time_s:g} s; " + self._verdict())
                if self._success or self._attempts >= self.settings.max_attempts:
                    raise _Stop("answered", self._verdict())
        except _Stop as stop:
            reason, message = stop.reason, stop.message
        except (ModelError, BrowserError) as exc:
            reason, message = "error", str(exc)
            log.warning("run_error", error=message)
        finally:
            self.finish(reason, message, index)

    def finish(self, reason: StopReason, message: str, steps: int) -> RunResult:
        """Set and return ``result``."""
        self.result = RunResult(
            success=self._success,
            answer=self._answer,
            stop_reason=reason,
            message=message or "the run was interrupted",
            url=self.url,
            final_url=self._safe_url(),
            goal=self.goal,
            steps=steps,
            attempts=self._attempts,
            feedback=self._feedbacks,
            usage=self.usage,
            duration_s=round(time.monotonic() - self._started, 3),
            model_s=round(self._model_s, 3),
            browser_s=round(self._browser_s, 3),
            started_at=self._started_at,
            replayed_steps=self.replay.replayed if self.replay else 0,
            calls_saved=self.replay.calls_saved if self.replay else 0,
        )
        return self.result

    def verdict_text(self) -> str:
        return self._verdict()

    def _verdict(self) -> str:
        if self._success:
            return "the validator accepted the answer"
        if self._attempts:
            return f"the validator rejected {self._attempts} answer(s)"
        return "no answer was given"

    def _safe_url(self) -> str:
        try:
            return self.page.url
        except Exception:
            return ""

    async def _turn(self, step: Step, final: bool) -> None:
        """One step; raises _Stop-worthy errors (ModelError other than bad replies, BrowserError)."""
        state = await self.observe(step, final)
        if self.replay is not None:
            cached = await self._replayable(step)
            if cached is not None:
                reply = PolicyReply(note=cached.note, thought="(replayed from the cache)", action=cached.action)
                await self.apply(step, reply, final, point=cached.point, verdict=cached.verdict)
                return
        self.check_budget()
        t1 = time.perf_counter()
        try:
            reply, call = await self.roles.policy.decide(state, list(self._shots))
        except ModelReplyError as exc:
            self.record_failed_call(step, exc)
            self.unusable_reply(step, str(exc))
            return
        finally:
            step.timings.policy_s = time.perf_counter() - t1
        self._add_call(step, call)
        await self.apply(step, reply, final)

    async def _replayable(self, step: Step) -> CachedStep | None:
        """Fingerprint the observation; the recorded step to replay if it matches."""
        assert self.replay is not None and step.image is not None
        text = await self.page.page_text()
        step.fingerprint = fingerprint(step.url, step.title, text, step.image, start_url=self.url)
        cached = self.replay.lookup(step.fingerprint)
        step.replayed = cached is not None
        return cached

    async def observe(self, step: Step, final: bool) -> PolicyState:
        """Screenshot, title and events into ``step``; the policy's inputs for it."""
        self._t0 = t0 = time.perf_counter()
        shot = await self.page.screenshot(self._frame)
        self._shots.append(shot)
        step.image = shot
        step.image_size = (shot.frame.image_width, shot.frame.image_height)
        step.title = await self.page.title()
        step.events = self.page.drain_events()
        step.timings.observe_s = time.perf_counter() - t0
        state = PolicyState(
            goal=self.goal,
            url=step.url,
            step=step.index,
            max_steps=self.settings.max_steps,
            notes=self._visible_notes(),
            recent=list(self._recent) if self.settings.recent_actions else [],
            events=step.events,
            feedback=self._feedback,
            final=final,
        )
        step.context = PromptContext(
            max_steps=state.max_steps,
            notes=state.notes,
            recent=state.recent,
            feedback=state.feedback,
            screenshots=len(self._shots),
            localizer_profile=self.roles.localizer.profile.name,
            secrets=list(self.roles.policy.secret_names),
            restrictions=self.roles.policy.restrictions,
            expect=self.expect,
        )
        return state

    @property
    def screenshots(self) -> list[Screenshot]:
        """The screenshots the policy is shown (oldest first, the current one last)."""
        return list(self._shots)

    def unusable_reply(self, step: Step, error: str) -> None:
        """Record a policy reply that could not be used; the policy is told at the next step."""
        step.error = error
        step.outcome = "failed: the policy's reply was unusable"
        self._recent.append(f"step {step.index}: (no valid action) -> {step.outcome}")

    async def apply(
        self, step: Step, reply: PolicyReply, final: bool, *, point: Point | None = None, verdict: Verdict | None = None
    ) -> None:
        """Carry out the policy's reply (``point``: skip the localizer; ``verdict``: skip the validator)."""
        step.note, step.thought, step.action = reply.note, reply.thought, reply.action
        note = " ".join(reply.note.split())[:NOTE_MAX_CHARS]
        if note and (not self._notes or self._notes[-1] != note):
            self._notes.append(note)
        action = reply.action
        if final and not isinstance(action, Answer):
            step.outcome = "no answer given at the final step"
            return
        try:
            step.outcome = await self._perform(step, action, point, verdict)
        except (ActionError, LocalizationError, ModelReplyError) as exc:
            if isinstance(exc, ModelReplyError | LocalizationError):
                self.record_failed_call(step, exc)
            step.error = str(exc)
            step.outcome = f"failed: {exc}"
        self._recent.append(f"step {step.index}: {describe_action(action)} -> {step.outcome}")
        step.timings.total_s = time.perf_counter() - self._t0

    async def _perform(
        self, step: Step, action: Action, point: Point | None = None, verdict: Verdict | None = None
    ) -> str:
        if isinstance(action, Answer):
            return await self._validate(step, action, verdict)
        if isinstance(action, ClickElement | WriteElement | SelectOption):
            step.element = action.element
        if point is not None:
            step.point = point
        elif isinstance(action, ClickElement | WriteElement | SelectOption):
            self.check_budget()
            t = time.perf_counter()
            try:
                point, call = await self.roles.localizer.locate(action.element, self._shots[-1])
                self._add_call(step, call)
            finally:
                step.timings.localize_s = time.perf_counter() - t
            step.point = point
        before = self.page.url
        t = time.perf_counter()
        try:
            outcome = await self._act(action, point)
        finally:
            step.timings.act_s = time.perf_counter() - t
        after = self.page.url
        if after != before:
            outcome += f", now at {after}"
        return outcome

    async def _act(self, action: Action, point: Point | None) -> str:
        x, y = point.viewport if point else (0.0, 0.0)
        match action:
            case ClickElement():
                await self.page.click(x, y)
            case WriteElement(content=content, press_enter=enter):
                await self.page.write(x, y, content, press_enter=enter)
            case SelectOption(option=option):
                label = await self.page.select_option(x, y, option)
                return f"ok, selected {label!r}"
            case Scroll(direction=direction):
                await self.page.scroll(direction)
            case PressKey(key=key):
                await self.page.press(key)
            case Goto(url=url):
                await self.page.goto(normalize_url(url, error=ActionError))
            case GoBack():
                await self.page.go_back()
            case Refresh():
                await self.page.refresh()
            case Wait(seconds=seconds):
                await self.page.wait(seconds)
            case Answer():  # pragma: no cover - handled by _perform
                raise AssertionError("answers are validated, not acted")
            case _:
                assert_never(action)
        return "ok"

    async def _validate(self, step: Step, answer: Answer, cached: Verdict | None = None) -> str:
        if cached is None and self.judge is None:
            self.check_budget()
        self._attempts += 1
        self._answer = answer.content
        images = list(self._shots)[-self.settings.validator_screenshots :]
        url = self.page.url
        if step.context is not None:
            step.context.validator_url, step.context.validator_screenshots = url, len(images)
        if cached is not None:
            verdict = cached
        else:
            t = time.perf_counter()
            try:
                if self.judge is not None:
                    verdict, judged = await self.judge(answer.content, url, images)
                else:
                    verdict, judged = await self.roles.validator.judge(
                        self.goal, answer.content, url, images, expect=self.expect
                    )
            finally:
                step.timings.validate_s = time.perf_counter() - t
            if judged is not None:
                self._add_call(step, judged)
        step.verdict = verdict
        self._feedbacks.append(verdict.feedback)
        if verdict.success:
            self._success = True
            self._feedback = None
            return "accepted by the validator"
        self._feedback = verdict.feedback
        return "rejected by the validator"

    def _visible_notes(self) -> list[str]:
        budget = self.settings.notes_max_chars
        kept: list[str] = []
        for note in reversed(self._notes):
            if budget - len(note) < 0:
                break
            budget -= len(note)
            kept.append(note)
        return kept[::-1]

    def record_failed_call(self, step: Step, exc: Exception) -> None:
        call = getattr(exc, "call", None)
        if isinstance(call, ModelCall) and all(c is not call for c in step.calls):
            self._add_call(step, call)

    def _add_call(self, step: Step, call: ModelCall) -> None:
        step.calls.append(call)
        self._reserved = max(0, self._reserved - 1)
        for budget in self.budgets:
            budget.charge(call)

    def check_budget(self) -> None:
        """Reserve a model call in every budget; BudgetExceeded if one does not allow it."""
        checked: list[Budget] = []
        try:
            for budget in self.budgets:
                budget.check()
                checked.append(budget)
        except BudgetExceeded:
            for budget in checked:
                budget.release()
            raise
        if self.budgets:
            self._reserved += 1

    def _release_reservations(self) -> None:
        """A call that failed without a record leaves its reservation: give it back at the step's end."""
        if self._reserved:
            for budget in self.budgets:
                budget.release(self._reserved)
            self._reserved = 0

    def account(self, step: Step) -> None:
        """Add the step's calls and timings to the run's usage."""
        self._release_reservations()
        t = step.timings
        if not t.total_s:
            t.total_s = t.observe_s + t.policy_s + t.localize_s + t.act_s + t.validate_s
        for call in step.calls:
            self.usage.add_call(call)
        self._model_s += t.model_s
        self._browser_s += t.observe_s + t.act_s
