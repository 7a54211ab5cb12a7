"""The policy role: screenshots + task + memory in, one action out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ..actions import PolicyReply
from ..config import AgentConfig
from ..families import HOLOTRON_MAX_NUM_TILES, Family, family_extra_body
from ..images import Screenshot
from ..model.client import Message, ModelClient
from ..model.parsing import parse_reply
from ..model.schema import response_format, strict_schema
from ..prompts import render
from ..records import ModelCall

__all__ = ["Policy", "PolicyImages", "PolicyState", "policy_messages", "system_message"]

SCHEMA_NAME = "policy_reply"


@dataclass(slots=True)
class PolicyState:
    """What the policy is told at one step (besides the screenshots)."""

    goal: str
    url: str
    step: int
    max_steps: int
    notes: list[str] = field(default_factory=list)
    recent: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    feedback: str | None = None
    final: bool = False
    progress: str | None = None
    """The previous action changed nothing visible (or was repeated to no effect), in words."""
    outcome: str | None = None
    """The previous step's action and outcome (the last recent-action line); shown in append mode."""


@dataclass(frozen=True, slots=True)
class PolicyImages:
    """How the policy's screenshots are sent, for its model family (``[policy] family``). They are
    the localizer's (one capture per step): the server's processor sizes them for the model."""

    family: Family = "holo1.5"
    max_num_tiles: int = HOLOTRON_MAX_NUM_TILES
    uuid: bool = False
    """Whether each image part carries a stable ``uuid`` (vLLM 0.10.2+)."""
    explicit: bool = True
    """Whether the family was set (``[policy] family``). Only then do requests carry the family's
    fields: a family taken from the localizer profile says nothing of the policy's server, which
    may be one that refuses fields it does not know (a hosted API)."""

    @classmethod
    def from_config(cls, config: AgentConfig) -> PolicyImages:
        family = config.policy.resolved_family(config.localizer)
        explicit = config.policy.family is not None
        return cls(family, config.policy.max_num_tiles, config.policy.image_uuid, explicit)

    @property
    def extra_body(self) -> dict[str, Any] | None:
        """What the family adds to each policy request (None: nothing)."""
        return family_extra_body(self.family, self.max_num_tiles) if self.explicit else None


class Policy:
    """Renders the policy prompt, calls the model and parses its action."""

    def __init__(
        self,
        client: ModelClient,
        *,
        secret_names: Sequence[str] = (),
        restrictions: str = "",
        images: PolicyImages | None = None,
        uploads: Sequence[str] = (),
    ) -> None:
        self.client = client
        self.secret_names = list(secret_names)
        #: The names of the files ``upload_file`` may give.
        self.uploads = list(uploads)
        #: What the navigation policy refuses, in words ("" when nothing is).
        self.restrictions = restrictions
        self.images = images or PolicyImages()
        self._extra_body = self.images.extra_body

    @property
    def system_prompt(self) -> str:
        return _system_prompt()

    def messages(self, state: PolicyState, images: Sequence[Screenshot]) -> list[Message]:
        return policy_messages(
            state,
            images,
            secrets=self.secret_names,
            restrictions=self.restrictions,
            uuid=self.images.uuid,
            uploads=self.uploads,
        )

    async def decide(
        self, state: PolicyState, images: Sequence[Screenshot], *, messages: Sequence[Message] | None = None
    ) -> tuple[PolicyReply, ModelCall]:
        """Ask for the next action (``messages``: an append-mode request, built by ``PolicyContext``).

        Raises ModelError (with ``.call``) on failure."""
        return await self.client.call(
            self.messages(state, images) if messages is None else messages,
            lambda text: parse_reply(text, PolicyReply),
            response_format=_response_format(),
            extra_body=self._extra_body,
            repair_hint='Reply with a JSON object {"note": ..., "thought": ..., "action": {"action": ..., ...}} '
            "following the schema in the system message.",
        )


def policy_messages(
    state: PolicyState,
    images: Sequence[Screenshot],
    *,
    secrets: Sequence[str] = (),
    restrictions: str = "",
    uuid: bool = False,
    uploads: Sequence[str] = (),
) -> list[Message]:
    """The policy request's messages (also rebuilt from run directories by ``webagent.training.export``)."""
    text = render(
        "policy_user.jinja",
        goal=state.goal,
        url=state.url,
        step=state.step,
        max_steps=state.max_steps,
        notes=state.notes,
        recent=state.recent,
        events=state.events,
        feedback=state.feedback,
        final=state.final,
        progress=state.progress,
        n_images=len(images),
        secrets=list(secrets),
        restrictions=restrictions,
        uploads=list(uploads),
    )
    content: list[dict[str, object]] = [{"type": "text", "text": text}]
    content += [shot.image_part(uuid=uuid) for shot in images]
    return [system_message(), {"role": "user", "content": content}]


def system_message() -> Message:
    """The policy's system message (the same text in both context modes)."""
    return {"role": "system", "content": _system_prompt()}


@cache
def _system_prompt() -> str:
    # Stable across steps and sessions: rendered once, so a server prefix cache can hit.
    schema = json.dumps(strict_schema(PolicyReply), separators=(",", ":"), sort_keys=True)
    return render("policy_system.jinja", schema=schema)


@cache
def _response_format() -> dict[str, Any]:
    return response_format(SCHEMA_NAME, PolicyReply)
