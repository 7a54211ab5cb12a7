"""A gym-style async environment for RL: the agent's loop with the policy left to the caller.

    env = WebEnv(config)
    obs = await env.reset(task)                         # opens the start page, first observation
    obs, reward, done, info = await env.step(action)    # the policy's reply: JSON, text, or a tool call

The step runs the same code as ``Agent`` (``webagent.loop.Episode``): the localizer turns an
element description into a point (or the reply carries it, as a grounded reply does, or the
caller passes ``point=(x, y)`` in screenshot pixels),
the action is carried out, and an ``answer`` is judged — by the validator model, by the task's
reference answers, or both — giving reward 1.0 or 0.0. A rejected answer is told to the policy
at the next observation, as in the agent; the episode ends on an accepted answer, after
``max_attempts`` answers, at the final step, or on a fatal model or browser error.

Many environments share one browser pool and the model endpoints' connection pools when built
on one ``Agent``: ``agent = shared_agent(config)`` then ``WebEnv(agent=agent)`` for each.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import ValidationError

from ..actions import Answer, ClickElement, PolicyReply, SelectOption, WriteElement
from ..agent import Agent
from ..batch.tasks import TaskSpec, reference_matches
from ..browser.session import BrowserSession
from ..config import AgentConfig
from ..errors import BrowserError, ConfigError, InputError, LocalizationError, NavigationError
from ..images import Frame, Screenshot
from ..loop import Episode, Judge
from ..model.client import Message, Reply
from ..model.parsing import ReplyParseError
from ..records import ModelCall, Point, RunResult, Step, ToolCall, Verdict
from ..roles.contract import Contract, Decision
from ..runs.trajectory import RunFiles
from ..urls import normalize_url

__all__ = ["Observation", "RewardMode", "WebEnv", "shared_agent"]

log = structlog.get_logger("webagent.training")

RewardMode = Literal["validator", "reference", "both"]
"""validator: the validator model's verdict; reference: the answer contains a reference answer;
both: the validator judges (its feedback drives the episode) and the reward needs a reference match too."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What the policy sees at one step, and the prompt the agent's own policy would be sent."""

    step: int
    url: str
    title: str
    screenshot: Screenshot
    events: list[str]
    final: bool
    messages: list[Message]
    """The policy request's messages, screenshots as data URLs: with the append context (the default) the
    conversation of the current epoch (system, then a user turn per step with its screenshot and the reply
    given to it, this step's turn last); with the window context system + one user message."""


def required_roles(reward: RewardMode) -> tuple[str, ...]:
    """The model roles an environment needs (the localizer only when no points are passed)."""
    return ("validator",) if reward in ("validator", "both") else ()


def shared_agent(config: AgentConfig, *, reward: RewardMode = "validator") -> Agent:
    """An Agent whose browser pool and model endpoints many environments share."""
    return Agent(config, require=required_roles(reward))


def _task(task: TaskSpec | Mapping[str, Any]) -> TaskSpec:
    if isinstance(task, TaskSpec):
        return task
    try:
        data = dict(task)
        data.setdefault("id", "task")
        refs = data.get("reference", [])
        data["reference"] = [refs] if isinstance(refs, str) else list(refs)
        return TaskSpec.model_validate(data)
    except (ValidationError, TypeError) as exc:
        raise InputError(f"a task needs 'url' and 'goal' (and optionally 'id', 'reference'): {exc}") from None


PolicyInput = PolicyReply | Mapping[str, Any] | str
"""What ``WebEnv.step`` takes: a PolicyReply; the reply's text; its JSON as a dict, in webagent's
shape (a whole reply or just an action) or H's (``{"note", "thought", "tool_call": {...}}``); or a
native tool call (``{"name", "arguments"}``, or OpenAI's ``{"id", "type", "function": {...}}``)."""


def read_policy(
    action: PolicyInput, contract: Contract, frame: Frame
) -> tuple[Decision, str | None, tuple[ToolCall, ...]]:
    """The decision in ``action`` (its point, when it carries one, in pixels of ``frame``), with the
    reply text and tool calls the policy's conversation keeps. Raises ReplyParseError."""
    if isinstance(action, PolicyReply):
        return Decision(action), action.model_dump_json(), ()
    if isinstance(action, str):
        return contract.parse(Reply(action), frame), action, ()
    data = dict(action)
    call = _tool_call(data)
    if call is not None:
        tools = replace(contract, output="tools")
        return tools.parse(Reply("", (call,)), frame), "", (call,)
    raw = json.dumps(data, ensure_ascii=False, default=str)
    if not isinstance(data.get("action"), Mapping) and not isinstance(data.get("tool_call"), Mapping):
        data = {"action": data}  # just an action
    return contract.read(data, frame), raw, ()


def _tool_call(data: Mapping[str, Any]) -> ToolCall | None:
    nested = data.get("function")
    function: Mapping[str, Any] = nested if isinstance(nested, Mapping) else data
    if not isinstance(function.get("name"), str) or "arguments" not in function:
        return None
    arguments = function["arguments"]
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
    return ToolCall(id=str(data.get("id") or "call_0"), name=function["name"], arguments=text)


class WebEnv:
    """One browser session at a time, stepped by an external policy."""

    def __init__(
        self,
        config: AgentConfig | None = None,
        *,
        agent: Agent | None = None,
        reward: RewardMode = "validator",
    ) -> None:
        if agent is None:
            if config is None:
                raise ConfigError("WebEnv needs a config or a shared agent")
            agent = shared_agent(config, reward=reward)
            self._owns_agent = True
        else:
            agent.config.require_endpoints(required_roles(reward))
            self._owns_agent = False
        self.agent = agent
        self.reward_mode: RewardMode = reward
        self.task: TaskSpec | None = None
        self.result: RunResult | None = None
        self._episode: Episode | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._files = RunFiles(None)
        #: The running episode's browser session (None between episodes).
        self.session: BrowserSession | None = None
        self._step: Step | None = None
        self._obs: Observation | None = None

    @property
    def done(self) -> bool:
        return self._episode is None

    async def reset(self, task: TaskSpec | Mapping[str, Any], *, output_dir: str | Path | None = None) -> Observation:
        """Start ``task`` (``{"url", "goal", "reference"?}`` or a TaskSpec) in a fresh browser context.

        With ``output_dir`` the run directory is written as by ``Agent`` (exportable).
        """
        await self._end_session()
        spec = _task(task)
        url = normalize_url(spec.url)
        if not spec.goal.strip():
            raise InputError("the task has an empty goal")
        if self.reward_mode in ("reference", "both") and not spec.reference:
            raise InputError(f"reward {self.reward_mode!r} needs reference answers in the task ('reference')")
        self.task, self.result = spec, None
        self._files = RunFiles(output_dir)
        stack = contextlib.AsyncExitStack()
        self._stack = stack
        judge = self._reference_judge(list(spec.reference)) if self.reward_mode == "reference" else None
        try:
            # The same setup as Agent runs: the navigation guard, secrets, the roles, the run's budget.
            episode = await stack.enter_async_context(
                self.agent.open_episode(url, spec.goal, judge=judge, on_session=self._opened)
            )
            opened = await episode.open()
        except BaseException:
            await self._end_session()
            raise
        self._episode = episode
        if not opened:
            await self._end()
            raise NavigationError(f"the start page did not open: {episode.result and episode.result.message}")
        return await self._observe()

    async def step(
        self, action: PolicyInput, *, point: tuple[float, float] | None = None
    ) -> tuple[Observation, float, bool, dict[str, Any]]:
        """Carry out one action; returns (observation, reward, done, info).

        ``action``: a PolicyReply, the policy's reply text, its JSON as a dict (a whole reply, just
        ``{"action": ...}``, or H's ``{"tool_call": ...}`` shape), or a native tool call
        (``{"name", "arguments"}``). A grounded reply's point (``x``, ``y`` in the policy family's
        coordinates) places its click. An unusable action is a failed step (reward 0, told to the
        policy), not an exception. ``point``: where to click, in pixels of the observation's
        screenshot, instead of the reply's point or the localizer.
        """
        episode, step, obs = self._episode, self._step, self._obs
        if episode is None or step is None or obs is None:
            raise InputError("the environment has no running episode: call reset(task) first")
        episode.resume()  # the time the policy took to decide is not the run's

        contract = episode.roles.policy.contract(episode.grounding == "policy")
        raw: str | None = action if isinstance(action, str) else None
        calls: tuple[ToolCall, ...] = ()
        usable: tuple[PolicyReply, Point | None] | None = None
        try:  # before the step runs: a ConfigError (no localizer, no point) leaves the step to retry
            decision, raw, calls = read_policy(action, contract, obs.screenshot.frame)
            usable = (decision.reply, self._point(decision, obs, point))
        except (ReplyParseError, LocalizationError) as exc:
            error = str(exc)

        async def act() -> None:
            assert episode is not None and step is not None
            if usable is None:
                episode.unusable_reply(step, error, raw=raw, tool_calls=calls)
            else:
                await episode.apply(step, usable[0], point=usable[1], raw=raw, tool_calls=calls)

        await episode.run_step(step, act())
        result = episode.end_step(step)
        self._files.step(self.agent.secrets.redact_model(step))
        reference_match = self._reference_match(step)
        info: dict[str, Any] = {
            "step": step,
            "outcome": step.outcome,
            "error": step.error,
            "verdict": step.verdict,
            "reference_match": reference_match,
        }
        if result is None:
            return await self._observe(), 0.0, False, info
        info["result"] = result
        await self._end()
        needs_match = self.reward_mode == "both"
        # An accepted answer wins, at the final step too (its stop reason is then max_steps or max_time).
        won = result.success and (reference_match or not needs_match)
        return obs, 1.0 if won else 0.0, True, info

    def _point(self, decision: Decision, obs: Observation, point: tuple[float, float] | None) -> Point | None:
        needs_point = isinstance(decision.reply.action, ClickElement | WriteElement | SelectOption)
        if not needs_point:
            return None
        point = point if point is not None else decision.point
        if point is None:
            if not self.agent.config.localizer.endpoints() or not self.agent.config.localizer.model:
                raise ConfigError(
                    "no localizer model is configured: pass point=(x, y) to step() or configure [localizer]"
                )
            return None
        frame = obs.screenshot.frame
        x, y = point
        if not frame.contains(x, y):
            raise LocalizationError(
                f"the point ({x:g}, {y:g}) is outside the {frame.image_width}x{frame.image_height} screenshot"
            )
        return Point(image=(x, y), viewport=frame.to_css(x, y))

    def _reference_match(self, step: Step) -> bool | None:
        if self.task is None or not self.task.reference or not isinstance(step.action, Answer):
            return None
        if step.verdict is None:
            return None
        return reference_matches(step.action.content, list(self.task.reference))

    @staticmethod
    def _reference_judge(references: Sequence[str]) -> Judge:
        async def judge(answer: str, url: str, images: list[Screenshot]) -> tuple[Verdict, ModelCall | None]:
            if reference_matches(answer, list(references)):
                return Verdict(success=True, feedback="The answer matches the reference answer."), None
            return Verdict(success=False, feedback="The answer is not the expected one."), None

        return judge

    async def _observe(self) -> Observation:
        episode = self._episode
        assert episode is not None
        step = episode.next_step()
        try:
            state = await episode.observe(step)
        except BrowserError:
            episode.finish("error", "the browser failed while observing the page")
            await self._end()
            raise
        shots = episode.screenshots
        episode.pause()  # until the policy's action comes back (step)
        self._step = step
        self._obs = Observation(
            step=step.index,
            url=step.url,
            title=step.title,
            screenshot=shots[-1],
            events=list(step.events),
            final=step.kind == "final",
            messages=episode.policy_messages(state),
        )
        return self._obs

    def _opened(self, session: BrowserSession) -> None:
        self.session = session

    async def _end(self) -> None:
        """The episode has ended: keep its result, write its files, close its session."""
        if self._episode is not None and self._episode.result is not None:
            self.result = self.agent.secrets.redact_model(self._episode.result)
        await self._end_session()

    async def _end_session(self) -> None:
        stack, self._stack = self._stack, None
        self._episode = self._step = self._obs = self.session = None
        self._files.finish(self.result)
        self._files = RunFiles(None)
        if stack is not None:
            await stack.aclose()

    async def aclose(self) -> None:
        """End the running episode (if any); close the agent if this environment made it."""
        await self._end_session()
        if self._owns_agent:
            await self.agent.aclose()

    async def __aenter__(self) -> WebEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
