"""The policy's append-only context: one conversation per epoch, grown by a turn per step.

A server's prefix cache (vLLM's hashes the prompt in 16-token blocks, each chained to the one
before) reuses a request's leading tokens only while they are unchanged. So the policy's request
at step n is its request at step n-1, then the reply the model gave to it (the text exactly as
returned), then one user turn with the new observation (step, URL, what the previous action did,
page events, validator feedback, the current screenshot). Nothing is ever edited, and every
message object (a screenshot's ``data:`` URL included) is the one sent before, so the wire
encoding and the server's image hashes are the same too.

The conversation is bounded by epochs: after ``epoch_steps`` steps, or once the epoch's text
reaches ``epoch_max_chars``, the next step starts a new one: the system message, then one user
turn with the task, the notes, the recent actions in compact text and the step's own observation.

``webagent.training.export`` rebuilds a recorded request by feeding the recorded steps of its
epoch through the same class (``new_epoch=True`` at the epoch's first step).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import AgentSettings
from ..images import Screenshot
from ..model.client import Message
from ..prompts import render
from .policy import Policy, PolicyState, system_message

__all__ = ["NO_REPLY", "PolicyContext"]

#: The assistant turn recorded for a step whose request got no reply text at all.
NO_REPLY = "(no reply)"


class PolicyContext:
    """The messages of the policy's current epoch, and the rules that end it."""

    def __init__(
        self,
        *,
        epoch_steps: int = 6,
        epoch_max_chars: int = 0,
        secrets: Sequence[str] = (),
        restrictions: str = "",
        image_uuid: bool = False,
        uploads: Sequence[str] = (),
    ) -> None:
        self.epoch_steps = epoch_steps
        self.image_uuid = image_uuid
        self.epoch_max_chars = epoch_max_chars
        self.secrets = list(secrets)
        self.restrictions = restrictions
        self.uploads = list(uploads)
        #: The current epoch's messages: the system message, then user and assistant turns.
        self.messages: list[Message] = []
        #: The step that began the current epoch (0 before the first).
        self.epoch = 0
        self._turns = 0
        self._chars = 0
        self._feedback: str | None = None
        self._awaiting = False

    @classmethod
    def for_settings(cls, settings: AgentSettings, policy: Policy) -> PolicyContext | None:
        """The context of one episode under ``settings`` (None for the window context)."""
        if settings.context != "append":
            return None
        return cls(
            epoch_steps=settings.epoch_steps,
            epoch_max_chars=settings.epoch_max_chars,
            secrets=policy.secret_names,
            restrictions=policy.restrictions,
            image_uuid=policy.images.uuid,
            uploads=policy.uploads,
        )

    def observe(self, state: PolicyState, shot: Screenshot, *, new_epoch: bool | None = None) -> list[Message]:
        """Add the observation of ``state.step`` and return the request's messages (a new list, so
        later turns do not change it). ``new_epoch``: force (True) or forbid (False) a new epoch."""
        if self._awaiting:
            self.reply(NO_REPLY)
        if new_epoch is None:
            new_epoch = self._epoch_ended()
        if new_epoch or not self.messages:
            self.messages = [system_message()]
            self.epoch, self._turns, self._chars = state.step, 0, 0
            text = self._epoch_text(state)
        else:
            text = self._turn_text(state)
        self._feedback = state.feedback
        self.messages.append(
            {"role": "user", "content": [{"type": "text", "text": text}, shot.image_part(uuid=self.image_uuid)]}
        )
        self._turns += 1
        self._chars += len(text)
        self._awaiting = True
        return list(self.messages)

    def reply(self, text: str | None) -> str:
        """Append the model's reply to the last observation (the raw text, exactly as returned;
        None: there was none) and return the text appended."""
        text = NO_REPLY if text is None else text
        if self._awaiting:
            self.messages.append({"role": "assistant", "content": text})
            self._chars += len(text)
            self._awaiting = False
        return text

    def _epoch_ended(self) -> bool:
        if self._turns >= self.epoch_steps:
            return True
        return bool(self.epoch_max_chars) and self._chars >= self.epoch_max_chars

    def _epoch_text(self, state: PolicyState) -> str:
        return render(
            "policy_epoch.jinja",
            goal=state.goal,
            secrets=self.secrets,
            restrictions=self.restrictions,
            uploads=self.uploads,
            notes=state.notes,
            recent=state.recent,
            **_turn_vars(state, outcome=None if state.recent else state.outcome, feedback=state.feedback),
        )

    def _turn_text(self, state: PolicyState) -> str:
        # Standing validator feedback is told once, in the turn after the rejection (and at an epoch's start).
        feedback = state.feedback if state.feedback != self._feedback else None
        return render("policy_turn.jinja", **_turn_vars(state, outcome=state.outcome, feedback=feedback))


def _turn_vars(state: PolicyState, *, outcome: str | None, feedback: str | None) -> dict[str, object]:
    return {
        "step": state.step,
        "max_steps": state.max_steps,
        "url": state.url,
        "outcome": outcome,
        "progress": state.progress,
        "events": state.events,
        "feedback": feedback,
        "final": state.final,
    }
