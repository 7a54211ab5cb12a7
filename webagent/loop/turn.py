"""The work of one step of an ``Episode``: observe, ask the policy (or replay), act, judge an answer.

``StepWork`` is the half of ``Episode`` (``webagent.loop.episode``) that fills one ``Step``; the
other half drives the run (its time limit, its end, its result). Its state is the episode's, set up
by ``Episode.__init__``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence

import structlog

from ..actions import Action, Answer, AskUser, PolicyReply, describe_action
from ..config import AgentSettings
from ..errors import ActionError, LocalizationError, ModelReplyError
from ..families import Grounding, ValidatorContext
from ..images import Frame, Screenshot
from ..records import Acted, Point, PolicyState, PromptContext, Step, StopReason, ToolCall, Verdict
from ..replay import CachedStep, StepReplay, fingerprint
from ..roles.prompting import reply_text
from .acting import Hands, batch_line, batch_outcome
from .briefing import Briefing
from .clock import RunClock
from .human import HumanHandler, HumanRequest, ask_person
from .meter import Meter
from .page import PageDriver, Placed, Roles
from .verdicts import Verdicts

__all__ = ["StepWork"]

log = structlog.get_logger("webagent.loop")


class StepWork:
    """What one step does (``Episode`` is one)."""

    roles: Roles
    page: PageDriver
    settings: AgentSettings
    meter: Meter
    replay: StepReplay | None
    verdicts: Verdicts
    human: HumanHandler | None
    clock: RunClock
    url: str
    goal: str
    grounding: Grounding
    judging: ValidatorContext
    max_actions: int
    _grounded: bool
    _hands: Hands
    _told: Briefing
    _frame: Frame
    _shots: deque[Screenshot]
    _t0: float
    _stop: tuple[StopReason, str] | None
    _limit: asyncio.Timeout | None

    async def _turn(self, step: Step) -> None:
        """One step with the policy model (or a replayed recording)."""
        await self.observe(step)
        if self.replay is not None:
            cached = await self._replayable(step)
            if cached is not None:
                more = tuple(a.action for a in cached.more)
                reply = PolicyReply(
                    note=cached.note, thought="(replayed from the cache)", action=cached.action, more=more
                )
                rest = [Placed(a.point, a.target_point) for a in cached.more]
                await self.apply(
                    step, reply, point=cached.point, target=cached.target_point, rest=rest, verdict=cached.verdict
                )
                return
        self.meter.reserve()
        t1 = time.perf_counter()
        frame = self._shots[-1].frame
        try:
            decision, call = await self.roles.policy.decide(
                self._told.messages, frame, grounded=self._grounded, actions=self.max_actions
            )
        except ModelReplyError as exc:
            self.meter.charge_failed(step, exc)
            failed = exc.call
            raw = failed.raw[-1] if failed and failed.raw else None
            self.unusable_reply(step, str(exc), raw=raw, tool_calls=failed.tool_calls if failed else ())
            return
        finally:
            step.timings.policy_s = time.perf_counter() - t1
        self.meter.charge(step, call)
        self._told.asked = True
        spots = [Placed(self._on_screen(s.point), self._on_screen(s.target)) for s in decision.spots]
        await self.apply(
            step,
            decision.reply,
            point=spots[0].point,
            target=spots[0].target,
            rest=spots[1:],
            raw=call.raw[-1] if call.raw else None,
            tool_calls=call.tool_calls,
            dropped=decision.dropped,
        )

    def _on_screen(self, image: tuple[float, float] | None) -> Point | None:
        """A point a grounded reply gave in pixels of the current screenshot, in both spaces."""
        return None if image is None else Point(image=image, viewport=self._shots[-1].frame.to_css(*image))

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
        step.events = [*self._hands.held, *self.page.drain_events()]
        self._hands.held = []
        tabs = await self.page.tabs()
        step.timings.observe_s = time.perf_counter() - t0
        state = self._told.observe(step, shot, goal=self.goal, feedback=self.verdicts.standing, tabs=tabs)
        policy = self.roles.policy
        step.context = PromptContext(
            policy=state,
            family=policy.family,
            output=policy.output,
            actions=self.max_actions if self.max_actions > 1 else None,
            grounding=self.grounding,
            localizer_profile=None if self._grounded else self.roles.localizer.profile.name,
            expect=self.verdicts.expect,
        )
        self._told.record(step.context)
        return state

    def unusable_reply(
        self, step: Step, error: str, *, raw: str | None = None, tool_calls: Sequence[ToolCall] = ()
    ) -> None:
        """Record a policy reply that could not be used (``raw``: its text; ``tool_calls``: its native
        tool calls); the policy is told at the next step."""
        self._told.replied(step, raw, tool_calls)
        step.error = error
        step.outcome = "failed: the policy's reply was unusable"
        self._told.told(f"step {step.index}: (no valid action) -> {step.outcome}")

    async def apply(
        self,
        step: Step,
        reply: PolicyReply,
        *,
        point: Point | None = None,
        target: Point | None = None,
        rest: Sequence[Placed] = (),
        verdict: Verdict | None = None,
        raw: str | None = None,
        tool_calls: Sequence[ToolCall] = (),
        dropped: int = 0,
    ) -> None:
        """Carry out the policy's reply (``point``: where its element is, the localizer skipped;
        ``target``: where a drag is released; ``rest``: the points of the reply's further actions;
        ``verdict``: skip the validator; ``raw``: the reply's text as the model gave it, else its
        JSON; ``tool_calls``: its native tool calls; ``dropped``: its actions past
        ``max_actions_per_turn``, not read)."""
        self._told.replied(step, reply.model_dump_json() if raw is None and not tool_calls else raw, tool_calls)
        step.note, step.thought, step.action = reply.note, reply.thought, reply.action
        self._told.noted(reply.note)
        actions = reply.actions
        places = [Placed(point, target), *rest, *([Placed()] * (len(actions) - 1 - len(rest)))]
        if step.kind == "final":  # only an answer is asked for: the reply's answer, if it gives one
            answer = next((a for a in actions if isinstance(a, Answer)), None)
            if answer is None:
                step.outcome = "no answer given at the final step"
                self._told.told(f"step {step.index}: {describe_action(reply.action)} -> {step.outcome}")
                return
            actions, places = (answer,), [Placed()]
            step.action = answer
        unread = f"; {dropped} more action(s) not read: at most {self.max_actions} a step" if dropped else ""
        if len(actions) > 1:
            await self._several(step, actions, places, verdict, unread)
        else:
            action = actions[0]
            try:
                step.outcome = await self._perform(step, step, action, places[0], verdict)
            except (ActionError, LocalizationError, ModelReplyError) as exc:
                step.outcome = self._failed(step, step, exc)
            step.outcome += unread
            line = f"step {step.index}: {describe_action(action)} -> {step.outcome}"
            self._told.told(line, acted=action if step.error is None else None)
        step.timings.total_s = time.perf_counter() - self._t0

    async def _several(
        self, step: Step, actions: Sequence[Action], places: Sequence[Placed], verdict: Verdict | None, unread: str
    ) -> None:
        """Carry out a reply's list of actions in order, up to the first that changes the page."""

        async def perform(record: Acted, action: Action, placed: Placed, done: Sequence[Acted]) -> str:
            try:
                return await self._perform(step, record, action, placed, verdict, done=done)
            except (ActionError, LocalizationError, ModelReplyError) as exc:
                return self._failed(step, record, exc)

        acted = await self._hands.several(actions, places, perform, lambda: self._stop is not None)
        first = acted[0]
        step.actions = acted
        step.element, step.point, step.target_point = first.element, first.point, first.target_point
        step.error = next((a.error for a in acted if a.error is not None), None)
        step.outcome = batch_outcome(acted) + unread
        done = tuple(a.action for a in acted if a.error is None and not a.outcome.startswith("not carried out"))
        outcomes = [f"{describe_action(a.action)} -> {a.outcome}" for a in acted]
        line = f"step {step.index}: {batch_line(acted)}{unread}"
        self._told.told(line, acted=done if step.error is None else None, outcomes=outcomes)

    def _failed(self, step: Step, record: Step | Acted, exc: Exception) -> str:
        """An action that failed: recorded, the policy told why (its outcome)."""
        if isinstance(exc, ModelReplyError | LocalizationError):
            self.meter.charge_failed(step, exc)
        record.error = str(exc)
        return f"failed: {exc}"

    async def _perform(
        self,
        step: Step,
        record: Step | Acted,
        action: Action,
        placed: Placed,
        verdict: Verdict | None = None,
        *,
        done: Sequence[Acted] = (),
    ) -> str:
        """One action: an answer judged, a question asked, or a browser action carried out (its
        points into ``record``; ``done``: the actions of the list before it)."""
        if isinstance(action, Answer):
            before = [f"{describe_action(a.action)} -> {a.outcome}" for a in done]
            return await self._validate(step, action, verdict, before)
        if isinstance(action, AskUser):
            return await self._ask(step, action)
        return await self._hands.act(step, record, action, placed, self._shots[-1])

    async def _ask(self, step: Step, action: AskUser) -> str:
        """Hand the question to a person (the run's clock paused meanwhile); their answer is the
        outcome. No one to ask, no answer, or none in time: the run ends ``needs_human``."""
        question = action.question
        if self.human is None:
            self._stop = ("needs_human", f"the agent needs a person to go on: {question}")
            return "stopped: a person is needed (no one to ask in this run)"
        request = HumanRequest(question=question, goal=self.goal, url=step.url, title=step.title, step=step.index)
        timeout_s = self.settings.ask_user_timeout_s
        answer, why = await ask_person(self.human, request, timeout_s=timeout_s, clock=self.clock, limit=self._limit)
        if answer is None:
            self._stop = ("needs_human", f"the agent needs a person to go on ({why}): {question}")
            return f"stopped: {why}"
        log.info("ask_user_answered", step=step.index)
        return f"the user answered: {' '.join(answer.split())}"

    async def _validate(
        self, step: Step, answer: Answer, cached: Verdict | None = None, before: Sequence[str] = ()
    ) -> str:
        url = self.page.url
        context = step.context
        if context is not None:
            context.validator_url = url
        if self.judging == "conversation" and self.verdicts.judge is None and self._told.asked:
            # The policy's request and this reply, continued by the validator's turn: a request that
            # extends the one just answered, its screenshots those the policy saw. (An answer from a
            # policy outside the process is judged on its own: that conversation was never sent to
            # the validator's server, and a reward must not rest on the policy's account of itself.)
            text, calls = self._told.reply
            conversation = self.roles.policy.continuation(
                self._told.messages, text, calls, grounded=self._grounded, actions=self.max_actions, outcomes=before
            )
            if context is not None:
                context.validator_context, context.validator_screenshots = "conversation", context.screenshots
                if context.reply is None:  # the window context keeps no reply: the record does
                    context.reply, context.tool_calls = reply_text(text, calls), list(calls) or None
            return await self.verdicts.judge_answer(step, answer, url, [], cached, conversation)
        images = list(self._shots)[-self.settings.validator_screenshots :]
        if context is not None:
            context.validator_context, context.validator_screenshots = "separate", len(images)
        return await self.verdicts.judge_answer(step, answer, url, images, cached)
