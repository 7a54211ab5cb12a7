"""The policy's prompt strategies: one per context mode, each the one owner of its conversation.

What the policy is told at a step is one typed record, :class:`~webagent.records.PolicyState`
(goal, URL, notes, recent actions, progress, validator feedback, ...). A strategy turns the
records of an episode's steps, their screenshots and the replies given to them into each request's
messages; the same class rebuilds a recorded request for ``webagent.training.export`` (its steps
fed through it again, :meth:`PolicyPrompt.replay_from` saying from which step). How the model
replies (the system prompt, what an assistant turn and an action's outcome look like) is the
policy contract's, a :class:`Speaker`.

- ``window``: each request rebuilt, system + one user message with the whole state and the last
  ``screenshots_in_context`` screenshots.
- ``append``: one conversation per epoch that only grows: the request at step n is the request at
  n-1, the reply given to it (the text exactly as returned) and one user turn with the new
  observation. After ``epoch_steps`` steps, or once the epoch's text reaches ``epoch_max_chars``,
  a new epoch starts from the task, the notes, the recent actions and the current screenshot.
  Nothing is ever edited, so a server's prefix cache reuses every earlier token.
- ``history``: H Company's agent-loop layout: one conversation for the run, observations as user
  turns, at most ``history_screenshots`` screenshots, older ones replaced by a text placeholder
  inside their ``<observation>`` wrapper. ``history_pruning = "step"`` does it at every step (H's
  per-step pruning: the oldest kept screenshot's turn changes, so a prefix cache reuses nothing
  after it); ``"epoch"`` only when the conversation would hold one screenshot too many, and then
  all but the current one at once, so that every request in between extends the last one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from ..config import AgentSettings
from ..families import ContextMode
from ..images import Screenshot
from ..model.client import Message
from ..prompts import render
from ..records import PolicyState, PromptContext, ToolCall

__all__ = [
    "NO_REPLY",
    "PLACEHOLDER",
    "PROMPTS",
    "AppendPrompt",
    "HistoryPrompt",
    "PolicyPrompt",
    "PromptOptions",
    "Speaker",
    "WindowPrompt",
    "answered",
    "reply_text",
    "window_messages",
]

#: The assistant turn recorded for a step whose request got no reply text at all.
NO_REPLY = "(no reply)"
#: What an older screenshot becomes in the history context (inside its ``<observation>`` wrapper).
PLACEHOLDER = "(screenshot removed: only the most recent ones are kept)"
#: What the answer tool's call is answered with when the conversation goes on to judge the answer.
SUBMITTED = "submitted: the answer is checked next"
_OPEN, _CLOSE = "<observation>", "</observation>"


class Speaker(Protocol):
    """The policy contract's side of a conversation (``webagent.roles.contract.Contract``): what the
    model is told first, and how its reply and the outcome of its action go back into it."""

    def system_message(self) -> Message: ...
    def assistant(self, text: str, tool_calls: Sequence[ToolCall] = ()) -> list[Message]:
        """The messages a reply becomes in the conversation (its text exactly as returned)."""
        ...

    def tool_results(
        self, tool_calls: Sequence[ToolCall], outcome: str | None, outcomes: Sequence[str] = ()
    ) -> list[Message]:
        """The answers to a reply's tool calls, told before the next observation (``outcomes``: each
        call's own, when the step carried out several actions)."""
        ...


@dataclass(frozen=True, slots=True)
class PromptOptions:
    """What a strategy needs besides the speaker: the settings of its mode and the image ids."""

    epoch_steps: int = 6
    epoch_max_chars: int = 0
    window: int = 3
    keep: int = 3
    pruning: Literal["epoch", "step"] = "epoch"
    image_uuid: bool = False

    @classmethod
    def from_settings(cls, settings: AgentSettings, *, image_uuid: bool = False) -> PromptOptions:
        return cls(
            epoch_steps=settings.epoch_steps,
            epoch_max_chars=settings.epoch_max_chars,
            window=settings.screenshots_in_context,
            keep=settings.history_screenshots,
            pruning=settings.history_pruning,
            image_uuid=image_uuid,
        )

    @classmethod
    def from_record(cls, context: PromptContext) -> PromptOptions:
        """The options a recorded request was built with (enough to build it again)."""
        kept = context.kept or 1
        return cls(window=kept, keep=kept, pruning=context.pruning or "epoch")


class PolicyPrompt(ABC):
    """The messages of one episode's policy requests in one context mode."""

    mode: ClassVar[ContextMode]

    def __init__(self, speaker: Speaker, options: PromptOptions | None = None) -> None:
        self.speaker = speaker
        self.options = options or PromptOptions()
        #: The conversation so far (the last request's messages, the reply given to it once told).
        self.messages: list[Message] = []
        #: The step that began the current conversation (or its last rewrite); 0 before the first.
        self.epoch = 0
        self._awaiting = False
        self._shown_feedback: str | None = None
        #: The tool calls of the last reply, answered (with its action's outcome) before the next turn.
        self._calls: tuple[ToolCall, ...] = ()

    @abstractmethod
    def observe(self, state: PolicyState, shot: Screenshot, *, new_epoch: bool | None = None) -> list[Message]:
        """Add the observation of ``state.step`` and return the request's messages (a new list, so
        later turns do not change it). ``new_epoch``: force (True) or forbid (False) the mode's
        restart or rewrite (how an export follows a recorded run)."""

    def reply(self, text: str | None, tool_calls: Sequence[ToolCall] = ()) -> str | None:
        """Append the model's reply to the last observation (the raw text, exactly as returned;
        None: there was none; and its native tool calls) and return the text appended (None: this
        mode keeps no replies)."""
        if not self._awaiting:
            return None
        text = reply_text(text, tool_calls)
        self.messages += self.speaker.assistant(text, tool_calls)
        self._calls = tuple(tool_calls)
        self._awaiting = False
        self._replied(text)
        return text

    def record(self, context: PromptContext) -> None:
        """Write what the last request was into the step's record."""
        context.mode = self.mode
        context.epoch = self.epoch or None
        context.screenshots = sum(_image_count(m) for m in self.messages)

    @classmethod
    def replay_from(cls, index: int, context: PromptContext) -> int:
        """The first step an export must feed through this class to rebuild step ``index``'s request."""
        return context.epoch or index

    def _replied(self, text: str) -> None:  # noqa: B027 - a hook the append mode uses
        """A reply was appended (the append mode counts its text)."""

    def _image(self, shot: Screenshot) -> dict[str, object]:
        return shot.image_part(uuid=self.options.image_uuid)

    def _turn_text(self, state: PolicyState) -> str:
        """A later turn's text; the last reply's tool calls are answered first (their result is the
        previous action's outcome, then not repeated in the turn)."""
        outcome = state.outcome
        if self._calls:
            self.messages += self.speaker.tool_results(self._calls, outcome, state.outcomes)
            self._calls, outcome = (), None
        # Standing validator feedback is told once, in the turn after the rejection.
        feedback = state.feedback if state.feedback != self._shown_feedback else None
        self._shown_feedback = state.feedback
        return render("policy_turn.jinja", state=state, outcome=outcome, feedback=feedback)


def reply_text(text: str | None, tool_calls: Sequence[ToolCall] = ()) -> str:
    """The text a reply is kept as in a conversation (``NO_REPLY`` when it had neither text nor calls)."""
    return NO_REPLY if text is None and not tool_calls else text or ""


def answered(
    speaker: Speaker,
    messages: Sequence[Message],
    text: str | None,
    tool_calls: Sequence[ToolCall] = (),
    outcomes: Sequence[str] = (),
) -> list[Message]:
    """A policy request followed by the reply given to it, as its conversation goes on when the
    answer in that reply is judged next (its tool calls answered: the answer was submitted;
    ``outcomes``: what the reply's actions before it did)."""
    kept = reply_text(text, tool_calls)
    results = speaker.tool_results(tool_calls, SUBMITTED, [*outcomes, SUBMITTED] if outcomes else ())
    return [*messages, *speaker.assistant(kept, tool_calls), *results]


def window_messages(
    speaker: Speaker, state: PolicyState, images: Sequence[Screenshot], *, uuid: bool = False
) -> list[Message]:
    """The window context's request: system + one user message with the state and the screenshots."""
    text = render("policy_user.jinja", state=state, n_images=len(images))
    content: list[dict[str, object]] = [{"type": "text", "text": text}]
    content += [shot.image_part(uuid=uuid) for shot in images]
    return [speaker.system_message(), {"role": "user", "content": content}]


class WindowPrompt(PolicyPrompt):
    mode = "window"

    def __init__(self, speaker: Speaker, options: PromptOptions | None = None) -> None:
        super().__init__(speaker, options)
        self._shots: deque[Screenshot] = deque(maxlen=self.options.window)

    def observe(self, state: PolicyState, shot: Screenshot, *, new_epoch: bool | None = None) -> list[Message]:
        self._shots.append(shot)
        self.messages = window_messages(self.speaker, state, list(self._shots), uuid=self.options.image_uuid)
        self.epoch = 0
        self._awaiting = False  # nothing of the reply is kept
        return list(self.messages)

    def record(self, context: PromptContext) -> None:
        super().record(context)
        context.kept = self.options.window

    @classmethod
    def replay_from(cls, index: int, context: PromptContext) -> int:
        return max(1, index - (context.kept or 1) + 1)


class AppendPrompt(PolicyPrompt):
    mode = "append"

    def __init__(self, speaker: Speaker, options: PromptOptions | None = None) -> None:
        super().__init__(speaker, options)
        self._turns = 0
        self._chars = 0

    def observe(self, state: PolicyState, shot: Screenshot, *, new_epoch: bool | None = None) -> list[Message]:
        if self._awaiting:
            self.reply(NO_REPLY)
        if new_epoch is None:
            new_epoch = self._epoch_ended()
        if new_epoch or not self.messages:
            self.messages = [self.speaker.system_message()]
            self.epoch, self._turns, self._chars, self._calls = state.step, 0, 0, ()
            self._shown_feedback = state.feedback
            outcome = None if state.recent else state.outcome
            text = render("policy_epoch.jinja", state=state, outcome=outcome, feedback=state.feedback)
        else:
            text = self._turn_text(state)
        self.messages.append({"role": "user", "content": [{"type": "text", "text": text}, self._image(shot)]})
        self._turns += 1
        self._chars += len(text)
        self._awaiting = True
        return list(self.messages)

    def _replied(self, text: str) -> None:
        self._chars += len(text)

    def _epoch_ended(self) -> bool:
        if self._turns >= self.options.epoch_steps:
            return True
        return bool(self.options.epoch_max_chars) and self._chars >= self.options.epoch_max_chars


class HistoryPrompt(PolicyPrompt):
    mode = "history"

    def __init__(self, speaker: Speaker, options: PromptOptions | None = None) -> None:
        super().__init__(speaker, options)
        #: Indexes in ``messages`` of the user turns that still carry their screenshot, oldest first.
        self._with_image: list[int] = []

    def observe(self, state: PolicyState, shot: Screenshot, *, new_epoch: bool | None = None) -> list[Message]:
        if self._awaiting:
            self.reply(NO_REPLY)
        if not self.messages:
            self.messages = [self.speaker.system_message()]
            self.epoch = state.step
            self._shown_feedback = state.feedback
            text = render("policy_history.jinja", state=state, outcome=None, feedback=state.feedback)
        else:
            text = self._turn_text(state)
        self.messages.append(_observation(text, self._image(shot)))
        self._with_image.append(len(self.messages) - 1)
        self._prune(state.step, new_epoch)
        self._awaiting = True
        return list(self.messages)

    def _prune(self, step: int, new_epoch: bool | None) -> None:
        keep = self.options.keep
        if self.options.pruning == "step":
            drop = len(self._with_image) - keep
        elif new_epoch or (new_epoch is None and len(self._with_image) > keep):
            drop = len(self._with_image) - 1
        else:
            drop = 0
        if drop <= 0:
            return
        for index in self._with_image[:drop]:
            self.messages[index] = _without_image(self.messages[index])
        self._with_image = self._with_image[drop:]
        self.epoch = step

    def record(self, context: PromptContext) -> None:
        super().record(context)
        context.kept, context.pruning = self.options.keep, self.options.pruning

    @classmethod
    def replay_from(cls, index: int, context: PromptContext) -> int:
        return 1


def _observation(text: str, image: dict[str, object]) -> Message:
    return {
        "role": "user",
        "content": [{"type": "text", "text": f"{text}\n{_OPEN}"}, image, {"type": "text", "text": _CLOSE}],
    }


def _without_image(message: Message) -> Message:
    """An observation turn with its screenshot replaced by the placeholder (a new message object)."""
    content: list[dict[str, Any]] = [
        {"type": "text", "text": PLACEHOLDER} if part.get("type") == "image_url" else part
        for part in message["content"]
    ]
    return {**message, "content": content}


def _image_count(message: Message) -> int:
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if isinstance(part, dict) and part.get("type") == "image_url")


#: The strategy of each context mode.
PROMPTS: dict[ContextMode, type[PolicyPrompt]] = {
    "window": WindowPrompt,
    "append": AppendPrompt,
    "history": HistoryPrompt,
}
