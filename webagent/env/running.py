"""What ``WebEnv`` holds of a running episode (``Running``), what it returns of each step
(``Observation``, ``StepResult``), and how an ended episode's reward and flags are read (``outcome``)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import structlog

from ..browser.session import BrowserSession
from ..images import Screenshot
from ..loop import Episode, TaskCheck
from ..model.client import Message
from ..records import RunResult, Step
from .clock import PageClock
from .lease import SessionLease
from .rewards import RewardMode

__all__ = ["FAILURES", "Box", "Observation", "Running", "StepResult", "outcome"]

log = structlog.get_logger("webagent.env")

StepResult = tuple["Observation", float, bool, bool, dict[str, Any]]

#: Stop reasons that mean the environment could not run the episode to a verdict.
FAILURES = ("error", "budget")


@dataclass(frozen=True, slots=True)
class Observation:
    """What the policy sees at one step, and the prompt the agent's own policy would be sent."""

    step: int
    url: str
    title: str
    goal: str
    screenshot: Screenshot
    events: list[str]
    final: bool
    messages: list[Message]
    """The policy request's messages, screenshots as data URLs: with the append context (the default) the
    conversation of the current epoch (system, then a user turn per step with its screenshot and the reply
    given to it, this step's turn last); with the window context system + one user message."""


class Box:
    """Where the episode's session is told (not the environment itself: its lease must not keep it alive)."""

    def __init__(self) -> None:
        self.session: BrowserSession | None = None

    def set(self, session: BrowserSession) -> None:
        self.session = session


@dataclass
class Running:
    """The episode in progress."""

    episode: Episode
    lease: SessionLease
    box: Box
    finalizer: weakref.finalize[Any, Any]
    clock: PageClock | None = None
    step: Step | None = None
    obs: Observation | None = None


def outcome(
    obs: Observation, result: RunResult, info: dict[str, Any], task: TaskCheck | None, reward: RewardMode
) -> StepResult:
    """What the step that ended the episode returns: terminated when it reached a verdict (an
    answer accepted or judged, the task's page saying it is over), else truncated, with the cause
    (``truncated_by``) and, when the environment could not run it to a verdict, ``failure``."""
    terminated = result.success or result.stop_reason == "answered" or (task is not None and task.done)
    if not terminated:
        info["truncated_by"] = result.stop_reason
        info["failure"] = result.message if result.stop_reason in FAILURES else None
        if info["failure"]:
            log.warning("episode_failed", reason=result.stop_reason, failure=result.message)
        return obs, 0.0, False, True, info
    if task is not None:
        return obs, task.reward, True, False, info
    # An accepted answer wins, at the final step too (its stop reason is then max_steps or max_time).
    won = result.success and (info["reference_match"] or reward != "both")
    return obs, 1.0 if won else 0.0, True, False, info
