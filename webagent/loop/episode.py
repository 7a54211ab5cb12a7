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
from collections.abc import AsyncIterator, Awaitable, Sequence

import structlog

from ..actions import Action, Answer, AskUser, ElementAction, PolicyReply, describe_action
from ..budget import Budget
from ..config import AgentSettings
from ..errors import (
    ActionError,
    BrowserError,
    BudgetExceeded,
    ConfigError,
    LocalizationError,
    ModelError,
    ModelReplyError,
)
from ..images import Screenshot
from ..model.client import Message
from ..records import Point, PolicyState, PromptContext, RunResult, Step, StopReason, ToolCall
from ..replay import CachedStep, StepReplay, fingerprint
from ..roles.prompting import reply_text
from ..secrets import shorten
from ..uploads import AllowedFiles
from .clock import RunClock
from .human import HumanHandler, HumanRequest
from .meter import Meter
from .page import PageDriver, Roles, perform
from .progress import ProgressTracker
from .task import TaskCheck, TaskHook
from .verdicts import Judge, Verdicts

__all__ = ["Episode"]

log = structlog.get_logger("webagent.loop")
NOTE_MAX_CHARS = 400
#: The final answer is asked for when less than this share of ``max_time_s`` is left (at most
#: ``FINAL_RESERVE_MAX_S``); at ``max_time_s`` the run ends wherever it is.
FINAL_RESERVE = 0.25
FINAL_RESERVE_MAX_S = 60.0


class Episode:
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
    ) -> None:
        """``navigate``: open ``url`` first (False: start from the page as it is, ``url`` being its URL);
        ``task``: a task that rewards itself (``loop.task``): started once the page is open, checked
        after each step; its verdict ends the run and is the run's success and reward; ``uploads``:
        the files ``upload_file`` may name; ``human``: who answers ``ask_user`` (``loop.human``;
        None: the run ends ``needs_human``)."""
        self.uploads = uploads
        self.human = human
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
        # One capture per step, at the size the role that reads its coordinates needs.
        self._frame = roles.policy.frame(*page.viewport) if self._grounded else roles.localizer.frame(*page.viewport)
        self._shots: deque[Screenshot] = deque(
            maxlen=max(settings.screenshots_in_context, settings.validator_screenshots)
        )
        self._notes: list[str] = []
        self._recent: deque[str] = deque(maxlen=max(settings.recent_actions, 1))
        self._progress = ProgressTracker(settings.repeat_warning_after)
        self.verdicts = Verdicts(roles.validator, self.meter, goal=goal, judge=judge, expect=expect)
        self.clock = RunClock(settings.max_time_s)
        self._t0 = 0.0
        self._index = 0
        self._out_of_steps = False
        self._stop: tuple[StopReason, str] | None = None
        self._opened: bool | None = None  # what open() returned (None: not yet)
        self._limit: asyncio.Timeout | None = None  # the step's time limit, moved on by a person's answer
        self._infrastructure = False  # the error that stops the run is the infrastructure's (errors.py)
        #: The policy's prompt strategy (the one owner of its conversation); ``_messages``: its last
        #: request; ``_reply``: the reply given to it (its text as returned, its tool calls).
        self._prompt = roles.policy.prompt(settings)
        self._messages: list[Message] = []
        self._reply: tuple[str | None, tuple[ToolCall, ...]] = (None, ())
        #: Whether the step's reply came from the policy model this episode asked (not from a policy
        #: outside the process, ``WebEnv``'s, whose conversation no server of ours holds).
        self._asked = False
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
        return list(self._messages)

    # -- driving ---------------------------------------------------------------------------------

    async def steps(self) -> AsyncIterator[Step]:
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

    # -- one step ----------------------------------------------------------------------------------

    async def _turn(self, step: Step) -> None:
        """One step with the policy model (or a replayed recording)."""
        await self.observe(step)
        if self.replay is not None:
            cached = await self._replayable(step)
            if cached is not None:
                reply = PolicyReply(note=cached.note, thought="(replayed from the cache)", action=cached.action)
                await self.apply(step, reply, point=cached.point)  # an answer: judged again, never by the cache
                return
        self.meter.reserve()
        t1 = time.perf_counter()
        frame = self._shots[-1].frame
        try:
            decision, call = await self.roles.policy.decide(self._messages, frame, grounded=self._grounded)
        except ModelReplyError as exc:
            self.meter.charge_failed(step, exc)
            failed = exc.call
            raw = failed.raw[-1] if failed and failed.raw else None
            self.unusable_reply(step, str(exc), raw=raw, tool_calls=failed.tool_calls if failed else ())
            return
        finally:
            step.timings.policy_s = time.perf_counter() - t1
        self.meter.charge(step, call)
        self._asked = True
        point = None
        if decision.point is not None:
            point = Point(image=decision.point, viewport=frame.to_css(*decision.point))
        await self.apply(
            step, decision.reply, point=point, raw=call.raw[-1] if call.raw else None, tool_calls=call.tool_calls
        )

    async def _replayable(self, step: Step) -> CachedStep | None:
        """Fingerprint the observation; the recorded step to replay if it matches."""
        assert self.replay is not None and step.image is not None
        text = await self.page.page_text()
        step.fingerprint = fingerprint(step.url, step.title, text, step.image, start_url=self.url)
        cached = self.replay.lookup(step.fingerprint)
        step.replayed = cached is not None
        return cached

    async def observe(self, step: Step) -> PolicyState:
        """Screenshot, title and events into ``step``; the policy's inputs for it."""
        self._t0 = t0 = time.perf_counter()
        shot = await self.page.screenshot(self._frame)
        self._shots.append(shot)
        step.image = shot
        step.image_size = (shot.frame.image_width, shot.frame.image_height)
        step.grounding = self.grounding
        step.title = await self.page.title()
        step.events = self.page.drain_events()
        progress = self._progress.observe(step.url, shot, events=bool(step.events))
        step.unchanged, step.repeated = progress.unchanged, progress.repeated
        step.timings.observe_s = time.perf_counter() - t0
        state = self.roles.policy.state(
            goal=self.goal,
            url=step.url,
            step=step.index,
            max_steps=self.settings.max_steps,
            notes=self._visible_notes(),
            recent=list(self._recent) if self.settings.recent_actions else [],
            events=list(step.events),
            feedback=self.verdicts.standing,
            final=step.kind == "final",
            progress=progress.line,
            outcome=self._recent[-1] if self._recent else None,
        )
        self._messages = self._prompt.observe(state, shot)
        self._asked = False
        policy = self.roles.policy
        step.context = PromptContext(
            policy=state,
            family=policy.family,
            output=policy.output,
            grounding=self.grounding,
            localizer_profile=None if self._grounded else self.roles.localizer.profile.name,
            expect=self.verdicts.expect,
        )
        self._prompt.record(step.context)
        return state

    def unusable_reply(
        self, step: Step, error: str, *, raw: str | None = None, tool_calls: Sequence[ToolCall] = ()
    ) -> None:
        """Record a policy reply that could not be used (``raw``: its text; ``tool_calls``: its native
        tool calls); the policy is told at the next step."""
        self._replied(step, raw, tool_calls)
        step.error = error
        step.outcome = "failed: the policy's reply was unusable"
        self._recent.append(f"step {step.index}: (no valid action) -> {step.outcome}")

    async def apply(
        self,
        step: Step,
        reply: PolicyReply,
        *,
        point: Point | None = None,
        raw: str | None = None,
        tool_calls: Sequence[ToolCall] = (),
    ) -> None:
        """Carry out the policy's reply (``point``: where its element is, the localizer skipped;
        ``raw``: the reply's text as the model gave it, else its JSON; ``tool_calls``: its native
        tool calls). An answer is always judged (by the validator, or the caller's judge)."""
        self._replied(step, reply.model_dump_json() if raw is None and not tool_calls else raw, tool_calls)
        step.note, step.thought, step.action = reply.note, reply.thought, reply.action
        note = shorten(" ".join(reply.note.split()), NOTE_MAX_CHARS)
        if note and (not self._notes or self._notes[-1] != note):
            self._notes.append(note)
        action = reply.action
        if step.kind == "final" and not isinstance(action, Answer):
            step.outcome = "no answer given at the final step"
            return
        try:
            step.outcome = await self._perform(step, action, point)
        except (ActionError, LocalizationError, ModelReplyError) as exc:
            if isinstance(exc, ModelReplyError | LocalizationError):
                self.meter.charge_failed(step, exc)
            step.error = str(exc)
            step.outcome = f"failed: {exc}"
        self._progress.acted(action if step.error is None else None)
        self._recent.append(f"step {step.index}: {describe_action(action)} -> {step.outcome}")
        step.timings.total_s = time.perf_counter() - self._t0

    async def _perform(self, step: Step, action: Action, point: Point | None = None) -> str:
        if isinstance(action, Answer):
            return await self._validate(step, action)
        if isinstance(action, AskUser):
            return await self._ask(step, action)
        if isinstance(action, ElementAction):
            step.element = action.element
            frame = self._shots[-1].frame
            if point is not None and not frame.contains(*point.image):
                x, y = point.image
                raise LocalizationError(
                    f"the policy placed {action.element!r} at ({x:g}, {y:g}), outside the "
                    f"{frame.image_width}x{frame.image_height} screenshot"
                )
        if point is not None:
            step.point = point
        elif isinstance(action, ElementAction):
            self.meter.reserve()
            t = time.perf_counter()
            try:
                point, call = await self.roles.localizer.locate(action.element, self._shots[-1])
                self.meter.charge(step, call)
            finally:
                step.timings.localize_s = time.perf_counter() - t
            step.point = point
        before = self.page.url
        t = time.perf_counter()
        try:
            outcome = await perform(self.page, action, point, self.uploads)
        finally:
            step.timings.act_s = time.perf_counter() - t
        after = self.page.url
        if after != before:
            outcome += f", now at {after}"
        return outcome

    async def _ask(self, step: Step, action: AskUser) -> str:
        """Hand the question to a person (the run's clock paused meanwhile); their answer is the
        outcome. No one to ask, no answer, or none in time: the run ends ``needs_human``."""
        question = action.question
        if self.human is None:
            self._stop = ("needs_human", f"the agent needs a person to go on: {question}")
            return "stopped: a person is needed (no one to ask in this run)"
        request = HumanRequest(question=question, goal=self.goal, url=step.url, title=step.title, step=step.index)
        timeout_s = self.settings.ask_user_timeout_s
        # The person's time is not the run's: the clock and the step's limit stop while they answer.
        limit = self._limit
        deadline = limit.when() if limit is not None else None
        if limit is not None:
            limit.reschedule(None)
        t0 = time.monotonic()
        self.clock.pause()
        try:
            async with asyncio.timeout(timeout_s):
                answer = await self.human(request)
        except TimeoutError:
            answer, why = None, f"no answer within {timeout_s:g} s"
        else:
            why = "the person did not answer"
        finally:
            self.clock.resume()
            if limit is not None and deadline is not None:
                limit.reschedule(deadline + (time.monotonic() - t0))
        if answer is None or not answer.strip():
            self._stop = ("needs_human", f"the agent needs a person to go on ({why}): {question}")
            return f"stopped: {why}"
        log.info("ask_user_answered", step=step.index)
        return f"the user answered: {' '.join(answer.split())}"

    async def _validate(self, step: Step, answer: Answer) -> str:
        url = self.page.url
        context = step.context
        if context is not None:
            context.validator_url = url
        if self.judging == "conversation" and self.verdicts.judge is None and self._asked:
            # The policy's request and this reply, continued by the validator's turn: a request that
            # extends the one just answered, its screenshots those the policy saw. (An answer from a
            # policy outside the process is judged on its own: that conversation was never sent to
            # the validator's server, and a reward must not rest on the policy's account of itself.)
            text, calls = self._reply
            conversation = self.roles.policy.continuation(self._messages, text, calls, grounded=self._grounded)
            if context is not None:
                context.validator_context, context.validator_screenshots = "conversation", context.screenshots
                if context.reply is None:  # the window context keeps no reply: the record does
                    context.reply, context.tool_calls = reply_text(text, calls), list(calls) or None
            return await self.verdicts.judge_answer(step, answer, url, [], conversation)
        images = list(self._shots)[-self.settings.validator_screenshots :]
        if context is not None:
            context.validator_context, context.validator_screenshots = "separate", len(images)
        return await self.verdicts.judge_answer(step, answer, url, images)

    def _replied(self, step: Step, raw: str | None, tool_calls: Sequence[ToolCall] = ()) -> None:
        """The reply goes into the policy's conversation (in the modes that keep one) and the step's record."""
        self._reply = (raw, tuple(tool_calls))
        kept = self._prompt.reply(raw, tool_calls)
        if step.context is not None:
            step.context.reply = kept
            step.context.tool_calls = list(tool_calls) if kept is not None and tool_calls else None

    def _visible_notes(self) -> list[str]:
        budget = self.settings.notes_max_chars
        kept: list[str] = []
        for note in reversed(self._notes):
            if budget - len(note) < 0:
                break
            budget -= len(note)
            kept.append(note)
        return kept[::-1]
