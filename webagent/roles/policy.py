"""The policy role: what it is told (a prompt strategy's messages) in, one action out.

The policy speaks its model family's contract (``webagent.families``): how it is asked (the
system prompt, the fields each request carries), how it replies and which context mode it uses by
default. A family set in ``[policy] family`` brings its contract; without one the policy speaks
webagent's generic contract (a JSON reply constrained by ``response_format``, nothing added to the
requests), which any OpenAI-compatible server understands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..config import AgentConfig, AgentSettings
from ..errors import ConfigError
from ..families import (
    AGENT_MAX_NUM_TILES,
    DEFAULT_PROFILE,
    FAMILIES,
    GENERIC_POLICY,
    ContextMode,
    Grounding,
    Output,
    PolicyContract,
    get_family,
)
from ..images import Frame, Screenshot, frame_for
from ..model.client import Message, ModelClient
from ..records import ModelCall, PolicyState, PromptContext, ToolCall
from .contract import Contract, Decision
from .prompting import PROMPTS, PolicyPrompt, PromptOptions, answered, window_messages
from .validator import Continuation

__all__ = ["Decision", "Policy", "PolicyImages", "PolicyState", "contract_for", "speaker_for", "system_message"]


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
        """What the family adds to each policy request (None: nothing): agent mode's fields."""
        return get_family(self.family).request_fields("agent", self.max_num_tiles) if self.explicit else None

    @property
    def single_body(self) -> dict[str, Any] | None:
        """What the family adds to a single-shot request to the policy's model (an extraction)."""
        return get_family(self.family).request_fields("single", self.max_num_tiles) if self.explicit else None

    @property
    def contract(self) -> PolicyContract:
        """The policy contract spoken: the family's when set, else webagent's generic one."""
        return get_family(self.family).policy if self.explicit else GENERIC_POLICY


class Policy:
    """Calls the policy model with a prompt strategy's messages and reads its action (and, grounded,
    the point it clicks)."""

    def __init__(
        self,
        client: ModelClient,
        *,
        secret_names: Sequence[str] = (),
        restrictions: str = "",
        images: PolicyImages | None = None,
        output: Output | None = None,
        uploads: Sequence[str] = (),
    ) -> None:
        self.client = client
        self.secret_names = list(secret_names)
        #: The names of the files ``upload_file`` may give.
        self.uploads = list(uploads)
        #: What the navigation policy refuses, in words ("" when nothing is).
        self.restrictions = restrictions
        self.images = images or PolicyImages()
        self.spec = self.images.contract
        #: The contract's family (None: webagent's generic contract).
        self.family: str | None = self.images.family if self.images.explicit else None
        self.output: Output = output or self.spec.outputs[0]
        if self.output not in self.spec.outputs:
            raise ConfigError(f"policy.output = {self.output!r} is not a reply format of the policy's family")
        self._extra_body = self.images.extra_body
        #: The contracts spoken (grounded or not, actions a turn), each with its requests' fields.
        self._contracts: dict[tuple[bool, int], tuple[Contract, dict[str, Any] | None]] = {}

    def _spoken(self, grounded: bool, actions: int) -> tuple[Contract, dict[str, Any] | None]:
        spoken = self._contracts.get((grounded, actions))
        if spoken is None:
            contract = contract_for(self.family, self.output, grounded, actions)
            spoken = self._contracts[grounded, actions] = (contract, _merge(contract.request_fields, self._extra_body))
        return spoken

    @property
    def speaker(self) -> Contract:
        """The contract spoken with a separate localizer, one action a turn."""
        return self.contract(False)

    @property
    def system_prompt(self) -> str:
        return str(self.speaker.system_message()["content"])

    def grounding(self, settings: AgentSettings) -> Grounding:
        """Who places an episode's clicks under ``settings``: the one set, else the contract's default."""
        grounding = settings.grounding or self.spec.grounding
        if grounding == "policy" and self.spec.point is None:
            raise ConfigError(
                "agent.grounding = 'policy' needs a policy family that places its own clicks (policy.family); "
                "set agent.grounding = 'localizer'"
            )
        return grounding

    def contract(self, grounded: bool, actions: int = 1) -> Contract:
        """The contract spoken: grounded or not, with ``actions`` actions a turn at most."""
        return self._spoken(grounded, actions)[0]

    def max_actions(self, settings: AgentSettings) -> int:
        """Actions one reply may carry under ``settings``: the one set, else the contract's default."""
        return settings.max_actions_per_turn or self.spec.max_actions

    def frame(self, viewport_width: int, viewport_height: int) -> Frame:
        """The frame a grounding policy's screenshots have (its family's image processor's size)."""
        return frame_for(viewport_width, viewport_height, get_family(self.images.family).rule)

    def context_mode(self, settings: AgentSettings) -> ContextMode:
        """The context mode of an episode under ``settings``: the one set, else the contract's."""
        return settings.context or self.spec.context

    def prompt(self, settings: AgentSettings) -> PolicyPrompt:
        """The prompt strategy of one episode (the one owner of its conversation)."""
        options = PromptOptions.from_settings(settings, image_uuid=self.images.uuid)
        speaker = self.contract(self.grounding(settings) == "policy", self.max_actions(settings))
        return PROMPTS[self.context_mode(settings)](speaker, options)

    def state(self, **told: Any) -> PolicyState:
        """The record of what the policy is told at a step (its secrets, rules and uploads added)."""
        return PolicyState(
            secrets=list(self.secret_names), restrictions=self.restrictions, uploads=list(self.uploads), **told
        )

    def messages(self, state: PolicyState, images: Sequence[Screenshot]) -> list[Message]:
        """A window-context request for ``state`` and ``images``."""
        return window_messages(self.speaker, state, images, uuid=self.images.uuid)

    def continuation(
        self,
        messages: Sequence[Message],
        text: str | None,
        tool_calls: Sequence[ToolCall] = (),
        *,
        grounded: bool,
        actions: int = 1,
        outcomes: Sequence[str] = (),
    ) -> Continuation:
        """The conversation of the request ``messages`` and the reply given to it, for the validator
        to judge that reply's answer in: with what the request carried that the server renders into
        the prompt or its image processor reads (the tools offered, answered with ``tool_choice:
        "none"``; the tile limit), and the server it went to, so the judging request extends it.
        ``outcomes``: what the reply's actions before its answer did (their tool calls' results)."""
        contract = self.contract(grounded, actions)
        fields: dict[str, Any] = {}
        tools = contract.request_fields.get("tools")
        if tools:
            fields.update(tools=tools, tool_choice="none")
        tiles = (self._extra_body or {}).get("mm_processor_kwargs")
        if tiles is not None:
            fields["mm_processor_kwargs"] = tiles
        endpoint = self.client.endpoint.base_url if self.client.endpoint is not None else None
        return Continuation(answered(contract, messages, text, tool_calls, outcomes), fields, endpoint)

    async def decide(
        self, messages: Sequence[Message], frame: Frame, *, grounded: bool = False, actions: int = 1
    ) -> tuple[Decision, ModelCall]:
        """Ask for the next action with a strategy's ``messages`` (``frame``: the current
        screenshot's; ``grounded``: the reply carries its click's point; ``actions``: how many
        actions it may carry).

        Raises ModelError (with ``.call``) on failure."""
        contract, body = self._spoken(grounded, actions)
        return await self.client.call(
            messages,
            lambda reply: contract.parse(reply, frame),
            extra_body=body,
            repair_hint=contract.repair_hint,
        )


@cache
def contract_for(family: str | None, output: Output, grounded: bool, actions: int = 1) -> Contract:
    """The contract a policy of ``family`` (None: webagent's generic one) speaks (one instance for
    every session, so that its request fields are the same objects, encoded once)."""
    spec = get_family(family).policy if family is not None else GENERIC_POLICY
    return Contract(spec.shape, output, grounded, spec.point or "pixels", spec.schema_field, actions)


def speaker_for(context: PromptContext) -> Contract:
    """The contract a recorded policy request spoke (how an export speaks it again)."""
    family = context.family if context.family in FAMILIES else None
    return contract_for(family, context.output or "json", context.grounding == "policy", context.actions or 1)


def system_message() -> Message:
    """The policy's system message in webagent's generic contract."""
    return contract_for(None, "json", False).system_message()


def _merge(*parts: dict[str, Any] | None) -> dict[str, Any] | None:
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part or {})
    return merged or None
