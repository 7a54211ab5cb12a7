"""An episode as ``WebEnv`` holds it: what the policy sees (``Observation``), the episode in progress
(``Running``) and where its session is told (``SessionBox``)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from ..browser.session import BrowserSession
from ..images import Screenshot
from ..loop import Episode
from ..model.client import Message
from ..records import Step
from .clock import PageClock
from .lease import SessionLease

__all__ = ["Observation", "Running", "SessionBox", "StepResult"]


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


#: What a step returns: gymnasium's five-tuple (observation, reward, terminated, truncated, info).
StepResult = tuple[Observation, float, bool, bool, dict[str, Any]]


class SessionBox:
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
    box: SessionBox
    finalizer: weakref.finalize[Any, Any]
    clock: PageClock | None = None
    step: Step | None = None
    obs: Observation | None = None
