"""What a model family is: its image processor, what its requests carry, how it replies, how it is served.

A :class:`ModelFamily` is data only; the roles (``webagent.roles``) speak the contract it
describes, and the offline model server (``webagent.testing``) answers in it. Each entry of the
registry (:mod:`webagent.families.registry`) is one family, with the sources its contract was
taken from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..images import ResizeRule
from .processors import DEFAULT_MAX_NUM_TILES, ImageProcessor, QwenPatches

__all__ = [
    "TOOL_ACTIONS",
    "TOOL_NAMES",
    "ContextMode",
    "Grounding",
    "LocalizerContract",
    "LocalizerReply",
    "ModelFamily",
    "Output",
    "PointSpace",
    "PolicyContract",
    "ReplyShape",
    "SchemaField",
    "Serving",
    "ValidatorContext",
]

PointSpace = Literal["pixels", "norm1000"]
"""Where a model's click points live: ``pixels`` of the image sent, or integers in [0, 1000]
normalised to it (origin top-left)."""
Output = Literal["json", "tools"]
"""How the policy replies: one JSON object (constrained by a schema), or native OpenAI
``tool_calls`` (the action space offered as ``tools``)."""
Grounding = Literal["policy", "localizer"]
"""Who puts an element action's point on the screenshot: the policy in its own reply (one request
per step), or a separate localizer model (Surfer-H's three roles)."""
ContextMode = Literal["append", "window", "history"]
"""The policy's context: see ``webagent.roles.prompting``."""
ReplyShape = Literal["action", "tool_call"]
"""A JSON reply's shape: webagent's ``{"note", "thought", "action": {"action": ..., ...}}``, or
H's agent-loop ``{"note", "thought", "tool_call": {"tool_name": ..., ...flat arguments}}``."""
SchemaField = Literal["response_format", "structured_outputs"]
"""The request field that carries a reply's JSON schema: OpenAI's ``response_format`` (strict
``json_schema``) or vLLM's and H's Models API's ``structured_outputs: {"json": schema}``."""
ValidatorContext = Literal["conversation", "separate"]
"""What the validator judges an answer in: the policy's own conversation, continued by one turn
with the validator's instructions (its screenshots and text already in the server's prefix cache;
the policy's model at the policy's server only), or a request of its own (the task, the answer and
the last screenshots: it sees nothing of the policy's notes and replies)."""
LocalizerReply = Literal["click_text", "absolute_json", "normalised_json"]

#: The policy's tools (``tool_call.tool_name``, or a native tool call's function name) for each
#: action, in the style of H's agent loop (flat arguments; a click carries its element and point).
TOOL_NAMES: Mapping[str, str] = {
    "click_element": "click",
    "write_element": "write",
    "select_option": "select",
    "scroll": "scroll",
    "press_key": "press_key",
    "goto": "goto",
    "go_back": "go_back",
    "refresh": "refresh",
    "wait": "wait",
    "upload_file": "upload_file",
    "hover_element": "hover",
    "double_click_element": "double_click",
    "right_click_element": "right_click",
    "drag_element": "drag",
    "switch_tab": "switch_tab",
    "close_tab": "close_tab",
    "ask_user": "ask_user",
    "answer": "answer",
}
#: The action of each tool name.
TOOL_ACTIONS: Mapping[str, str] = {tool: action for action, tool in TOOL_NAMES.items()}


@dataclass(frozen=True, slots=True)
class LocalizerContract:
    """A family's element localization: one turn, the screenshot and a description, one point back."""

    template: str
    """The prompt template (``prompts/``), rendered with the element and the image size."""
    reply: LocalizerReply
    """``click_text``: ``Click(x, y)`` in pixels; ``absolute_json``: ``{"action": "click_absolute",
    "x", "y"}`` in pixels; ``normalised_json``: ``{"x", "y"}`` in [0, 1000]."""
    schema_field: SchemaField = "response_format"

    @property
    def point(self) -> PointSpace:
        return "norm1000" if self.reply == "normalised_json" else "pixels"


@dataclass(frozen=True, slots=True)
class PolicyContract:
    """How a family's policy is asked and how it replies."""

    shape: ReplyShape
    outputs: tuple[Output, ...]
    """The reply formats the family supports, its default first."""
    grounding: Grounding
    """The default of ``[agent] grounding`` for this family."""
    context: ContextMode
    """The default of ``[agent] context`` for this family."""
    point: PointSpace | None
    """Where a grounded reply's point lives (None: the family does not ground its own clicks)."""
    fields: Mapping[str, Any] | None = None
    """What each policy request adds (the reasoning switches of agent mode)."""
    schema_field: SchemaField = "response_format"
    validator: ValidatorContext = "separate"
    """The default of ``[agent] validator_context`` for this family, when the validator is the
    policy's model at the policy's servers (a separate request otherwise)."""
    max_actions: int = 1
    """The default of ``[agent] max_actions_per_turn`` for this family: how many actions one reply
    may carry (in JSON, a list; as native tool calls, parallel calls)."""

    def judged_in(self, setting: ValidatorContext | None, follows: bool) -> ValidatorContext:
        """What the validator judges answers in: ``setting`` (``[agent] validator_context``) when
        set, else this family's default if the validator ``follows`` the policy (the policy's model
        at the policy's servers), else a separate request."""
        if setting is not None:
            return setting
        return self.validator if follows else "separate"


@dataclass(frozen=True, slots=True)
class Serving:
    """How the family is served as the policy with vLLM (the recipes are in docs/serving.md)."""

    flags: tuple[str, ...]
    """The vLLM flags its recipe needs beyond the ones every recipe has."""
    hybrid: bool = False
    """A Gated DeltaNet (Mamba-style) + attention hybrid: vLLM caches its prefixes only with
    ``--mamba-cache-mode align``, at attention-block boundaries of several hundred tokens."""
    align_blocks: tuple[int, ...] = ()
    """Attention block sizes vLLM picks for it in align mode (for the simulated prefix cache)."""


@dataclass(frozen=True, slots=True)
class ModelFamily:
    """One model family: everything the agent and the offline server need to speak its contract."""

    name: str
    label: str
    models: tuple[str, ...]
    """Its models as published (the first is the offline server's name for it)."""
    match: tuple[str, ...]
    """Lower-case fragments of a model name that tell this family (the longest match wins)."""
    images: ImageProcessor
    policy: PolicyContract
    localizer: LocalizerContract | None
    serving: Serving
    single_fields: Mapping[str, Any] | None = None
    """What a single-shot request of this family adds (the localizer's, the validator's, checks)."""
    sources: tuple[str, ...] = field(default=())

    @property
    def rule(self) -> ResizeRule | None:
        """The resize rule of a patch-based processor (None for a tiling one)."""
        return self.images.rule if isinstance(self.images, QwenPatches) else None

    def image_tokens(self, width: int, height: int, *, max_num_tiles: int = DEFAULT_MAX_NUM_TILES) -> int:
        """The prompt tokens one ``width`` x ``height`` image costs a model of this family."""
        return self.images.tokens(width, height, max_num_tiles)

    def request_fields(self, kind: Literal["agent", "single"], max_num_tiles: int) -> dict[str, Any] | None:
        """What a request of this family adds to its body (None: nothing): ``agent`` for the
        policy's, ``single`` for single-shot ones. A tiling processor gets its tile limit."""
        fields: dict[str, Any] = {}
        if self.images.tiles:
            fields["mm_processor_kwargs"] = {"max_num_tiles": max_num_tiles}
        extra = self.policy.fields if kind == "agent" else self.single_fields
        fields.update(extra or {})
        return fields or None
