"""What the policy is told from step to step: its notes, its recent actions and what the last step's
actions did, whether they changed anything, and its conversation (the prompt strategy's).

``Episode`` keeps one ``Briefing``: ``observe`` turns a step's observation into the ``PolicyState``
record and the request's messages; ``replied`` puts the reply into the conversation and the step's
record; ``told`` records what a step's actions did, for the next observation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from ..actions import Action
from ..config import AgentSettings
from ..guard.secrets import shorten
from ..images import Screenshot
from ..model.client import Message
from ..records import PolicyState, PromptContext, Step, Tab, ToolCall
from ..roles.policy import Policy
from .progress import ProgressTracker

__all__ = ["NOTE_MAX_CHARS", "Briefing"]

NOTE_MAX_CHARS = 400


class Briefing:
    """One episode's account of itself to the policy."""

    def __init__(self, policy: Policy, settings: AgentSettings) -> None:
        self.policy = policy
        self.settings = settings
        #: The policy's prompt strategy (the one owner of its conversation).
        self.prompt = policy.prompt(settings)
        #: The last request's messages, and the reply given to it (its text as returned, its tool calls).
        self.messages: list[Message] = []
        self.reply: tuple[str | None, tuple[ToolCall, ...]] = (None, ())
        #: Whether the step's reply came from the policy model this episode asked (not from a policy
        #: outside the process, ``WebEnv``'s, whose conversation no server of ours holds).
        self.asked = False
        self._notes: list[str] = []
        self._recent: deque[str] = deque(maxlen=max(settings.recent_actions, 1))
        self._outcomes: list[str] = []  # the last step's actions and outcomes, when it carried out several
        self._progress = ProgressTracker(settings.repeat_warning_after)

    def observe(
        self, step: Step, shot: Screenshot, *, goal: str, feedback: str | None, tabs: Sequence[Tab]
    ) -> PolicyState:
        """What the policy is told at ``step`` (whose URL, title and events are read): the record,
        and the request's messages (``messages``)."""
        progress = self._progress.observe(step.url, shot, events=bool(step.events))
        step.unchanged, step.repeated = progress.unchanged, progress.repeated
        state = self.policy.state(
            goal=goal,
            url=step.url,
            step=step.index,
            max_steps=self.settings.max_steps,
            notes=self._visible_notes(),
            recent=list(self._recent) if self.settings.recent_actions else [],
            events=list(step.events),
            feedback=feedback,
            final=step.kind == "final",
            progress=progress.line,
            outcome=self._recent[-1] if self._recent else None,
            outcomes=list(self._outcomes),
            tabs=list(tabs),
        )
        self.messages = self.prompt.observe(state, shot)
        self.asked = False
        return state

    def record(self, context: PromptContext) -> None:
        """Write what the last request was into the step's record."""
        self.prompt.record(context)

    def replied(self, step: Step, raw: str | None, tool_calls: Sequence[ToolCall] = ()) -> None:
        """The reply goes into the policy's conversation (in the modes that keep one) and the step's record."""
        self.reply = (raw, tuple(tool_calls))
        kept = self.prompt.reply(raw, tool_calls)
        if step.context is not None:
            step.context.reply = kept
            step.context.tool_calls = list(tool_calls) if kept is not None and tool_calls else None

    def noted(self, note: str) -> None:
        """A reply's note, kept (shortened) unless it repeats the last one."""
        note = shorten(" ".join(note.split()), NOTE_MAX_CHARS)
        if note and (not self._notes or self._notes[-1] != note):
            self._notes.append(note)

    def told(
        self, line: str, *, acted: Action | tuple[Action, ...] | None = None, outcomes: Sequence[str] = ()
    ) -> None:
        """What a step did, for the next observation: its ``line`` among the recent actions, what was
        carried out (``acted``: None when nothing was, or it failed) and, with several actions, each
        one's line (``outcomes``)."""
        self._recent.append(line)
        self._outcomes = list(outcomes)
        self._progress.acted(acted)

    def _visible_notes(self) -> list[str]:
        budget = self.settings.notes_max_chars
        kept: list[str] = []
        for note in reversed(self._notes):
            if budget - len(note) < 0:
                break
            budget -= len(note)
            kept.append(note)
        return kept[::-1]
