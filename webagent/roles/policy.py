"""The policy role: what it is told (a prompt strategy's messages) in, one action out.

The policy speaks its model family's contract (``webagent.families``): how it is asked (the
system prompt, the fields each request carries), how it replies and which context mode it uses by
default. A family set in ``[policy] family`` brings its contract; without one the policy speaks
webagent's generic contract (a JSON reply constrained by ``response_format``, nothing added to the
requests), which any OpenAI-compatible server understands.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..actions import PolicyReply
from ..config import AgentConfig, AgentSettings
from ..families import AGENT_MAX_NUM_TILES, DEFAULT_PROFILE, GENERIC_POLICY, ContextMode, PolicyContract, get_family
from ..images import Screenshot
from ..model.client import Message, ModelClient
from ..model.parsing import parse_reply
from ..model.schema import response_format, strict_schema
from ..prompts import render
from ..records import ModelCall, PolicyState, PromptContext
from .prompting import PROMPTS, PolicyPrompt, PromptOptions, Speaker, window_messages

__all__ = ["Policy", "PolicyImages", "PolicyState", "speaker_for", "system_message"]

SCHEMA_NAME = "policy_reply"


@dataclass(frozen=True, slots=True)
class PolicyImages:
    """The policy's model family (``[policy] family``) and how its screenshots are sent. They are
    the grounding role's (one capture per step): the server's processor sizes them for the model."""

    family: str = DEFAULT_PROFILE
    max_num_tiles: int = AGENT_MAX_NUM_TILES
    uuid: bool = False
    """Whether each image part carries a stable ``uuid`` (vLLM 0.10.2+)."""
    explicit: bool = True
    """Whether the family was set (``[policy] family``). Only then does the policy speak the family's
    contract and do its requests carry the family's fields: a family taken from the localizer
    profile says nothing of the policy's server, which may be one that refuses fields it does not
    know (a hosted API)."""

    @classmethod
    def from_config(cls, config: AgentConfig) -> PolicyImages:
        family = config.policy.resolved_family(config.localizer)
        explicit = config.policy.family is not None
        return cls(family, config.policy.max_num_tiles, config.policy.image_uuid, explicit)

    @property
    def extra_body(self) -> dict[str, Any] | None:
        """What the family adds to each policy request (None: nothing)."""
        return get_family(self.family).request_fields("agent", self.max_num_tiles) if self.explicit else None

    @property
    def contract(self) -> PolicyContract:
        """The policy contract spoken: the family's when set, else webagent's generic one."""
        return get_family(self.family).policy if self.explicit else GENERIC_POLICY


class _JsonSpeaker:
    """webagent's JSON contract: the schema in the system prompt, the reply's text kept as returned."""

    def system_message(self) -> Message:
        return system_message()

    def assistant(self, text: str) -> list[Message]:
        return [{"role": "assistant", "content": text}]


class Policy:
    """Calls the policy model with a prompt strategy's messages and parses its action."""

    def __init__(
        self,
        client: ModelClient,
        *,
        secret_names: Sequence[str] = (),
        restrictions: str = "",
        images: PolicyImages | None = None,
    ) -> None:
        self.client = client
        self.secret_names = list(secret_names)
        #: What the navigation policy refuses, in words ("" when nothing is).
        self.restrictions = restrictions
        self.images = images or PolicyImages()
        self.contract = self.images.contract
        self.speaker = _JsonSpeaker()
        self._extra_body = self.images.extra_body

    @property
    def system_prompt(self) -> str:
        return _system_prompt()

    def context_mode(self, settings: AgentSettings) -> ContextMode:
        """The context mode of an episode under ``settings``: the one set, else the contract's."""
        return settings.context or self.contract.context

    def prompt(self, settings: AgentSettings) -> PolicyPrompt:
        """The prompt strategy of one episode (the one owner of its conversation)."""
        options = PromptOptions.from_settings(settings, image_uuid=self.images.uuid)
        return PROMPTS[self.context_mode(settings)](self.speaker, options)

    def state(self, **told: Any) -> PolicyState:
        """The record of what the policy is told at a step (its secrets and rules added)."""
        return PolicyState(secrets=list(self.secret_names), restrictions=self.restrictions, **told)

    def messages(self, state: PolicyState, images: Sequence[Screenshot]) -> list[Message]:
        """A window-context request for ``state`` and ``images``."""
        return window_messages(self.speaker, state, images, uuid=self.images.uuid)

    async def decide(self, messages: Sequence[Message]) -> tuple[PolicyReply, ModelCall]:
        """Ask for the next action with a strategy's ``messages``.

        Raises ModelError (with ``.call``) on failure."""
        return await self.client.call(
            messages,
            lambda text: parse_reply(text, PolicyReply),
            response_format=_response_format(),
            extra_body=self._extra_body,
            repair_hint='Reply with a JSON object {"note": ..., "thought": ..., "action": {"action": ..., ...}} '
            "following the schema in the system message.",
        )


def speaker_for(context: PromptContext) -> Speaker:
    """The speaker of a recorded policy request (how an export speaks the contract it was sent in)."""
    return _JsonSpeaker()


def system_message() -> Message:
    """The policy's system message (the same text in every context mode)."""
    return {"role": "system", "content": _system_prompt()}


@cache
def _system_prompt() -> str:
    # Stable across steps and sessions: rendered once, so a server prefix cache can hit.
    schema = json.dumps(strict_schema(PolicyReply), separators=(",", ":"), sort_keys=True)
    return render("policy_system.jinja", schema=schema)


@cache
def _response_format() -> dict[str, Any]:
    return response_format(SCHEMA_NAME, PolicyReply)
