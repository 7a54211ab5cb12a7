"""How the policy speaks its family's contract: what it is asked for, how its reply is read.

A :class:`Contract` is one combination of a reply shape (``webagent.families.ReplyShape``), an
output (one JSON object, or native tool calls) and a grounding (whether the reply carries its
click's point, and in which coordinate space). It writes the system prompt and the request fields
that ask for the reply (``response_format`` or ``structured_outputs`` with the reply's schema, or
``tools`` with ``tool_choice: "required"``), reads a reply into a :class:`Decision` (the action,
and the point on the screenshot when grounded), and says what a reply becomes in the conversation.

The shapes: webagent's ``{"note", "thought", "action": {"action": "click_element", "element", ...}}``
and H Company's agent loop ``{"note", "thought", "tool_call": {"tool_name": "click", "element",
"x", "y"}}`` (flat arguments; hub.hcompany.ai/agent-loop). As native tool calls each action is one
tool (named as in H's shape), its arguments those of the action plus ``note``; the thought is the
message's text. Grounded, a click, write or select carries ``x`` and ``y``: pixels of the
screenshot or integers in [0, 1000] normalised to it, as the family's contract says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

from pydantic import ValidationError

from ..actions import ACTION_TYPES, ELEMENT_ACTIONS, PolicyReply
from ..families import TOOL_ACTIONS, TOOL_NAMES, Output, PointSpace, ReplyShape, SchemaField
from ..images import Frame
from ..model.client import Message, Reply
from ..model.parsing import ReplyParseError, extract_json, loads_well_formed
from ..model.schema import json_schema_format, strict_schema
from ..prompts import render
from ..records import ToolCall

__all__ = ["NORMALISED_MAX", "Contract", "Decision"]

NORMALISED_MAX = 1000
SCHEMA_NAME = "policy_reply"


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy reply, read: its action, and the point it put the action at (grounded replies;
    pixels of the screenshot, not yet checked against its bounds)."""

    reply: PolicyReply
    point: tuple[float, float] | None = None


@dataclass(frozen=True)
class Contract:
    """One way of asking the policy and reading its reply (one per policy, built once)."""

    shape: ReplyShape = "action"
    output: Output = "json"
    grounded: bool = False
    point: PointSpace = "pixels"
    schema_field: SchemaField = "response_format"

    # -- asking ---------------------------------------------------------------------------------

    def system_message(self) -> Message:
        return {"role": "system", "content": _system_prompt(self.shape, self.output, self.grounded, self.point)}

    @cached_property
    def request_fields(self) -> dict[str, Any]:
        """What each policy request adds to ask for the reply (built once, never mutated)."""
        if self.output == "tools":
            return {"tools": _tools(self.grounded, self.point), "tool_choice": "required"}
        schema = _schema(self.shape, self.grounded, self.point)
        if self.schema_field == "structured_outputs":
            return {"structured_outputs": {"json": schema}}
        return {"response_format": json_schema_format(SCHEMA_NAME, schema)}

    @property
    def repair_hint(self) -> str:
        if self.output == "tools":
            return "Call exactly one of the tools, with its arguments as its schema says."
        if self.shape == "tool_call":
            return (
                'Reply with a JSON object {"note": ..., "thought": ..., "tool_call": {"tool_name": ..., ...}} '
                "following the schema in the system message."
            )
        return (
            'Reply with a JSON object {"note": ..., "thought": ..., "action": {"action": ..., ...}} '
            "following the schema in the system message."
        )

    # -- reading --------------------------------------------------------------------------------

    def parse(self, reply: Reply, frame: Frame) -> Decision:
        """Read a reply (raises ReplyParseError, quoted back to the model in a repair request)."""
        if self.output == "tools":
            if not reply.tool_calls:
                raise ReplyParseError("the reply calls no tool: call exactly one of the tools")
            call = reply.tool_calls[0]
            try:
                arguments = loads_well_formed(call.arguments) if call.arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise ReplyParseError(f"the arguments of {call.name} are not valid JSON ({exc.msg})") from None
            if not isinstance(arguments, dict):
                raise ReplyParseError(f"the arguments of {call.name} are not a JSON object")
            note = arguments.pop("note", "")
            return self._decision(call.name, arguments, note, str(reply), frame)
        data = extract_json(reply)
        return self.read(data, frame)

    def read(self, data: Any, frame: Frame) -> Decision:
        """Read a reply already parsed from JSON: in this contract's shape, or in the other one."""
        if not isinstance(data, Mapping):
            raise ReplyParseError("the reply is not a JSON object")
        note, thought = data.get("note") or "", data.get("thought") or ""
        if isinstance(data.get("tool_call"), Mapping):
            arguments = dict(data["tool_call"])
            name = arguments.pop("tool_name", None)
            return self._decision(name, arguments, note, thought, frame)
        if isinstance(data.get("action"), Mapping):
            arguments = dict(data["action"])
            action = arguments.pop("action", None)
            return self._decision(TOOL_NAMES.get(str(action), action), arguments, note, thought, frame)
        raise ReplyParseError(
            "the reply has no tool_call object" if self.shape == "tool_call" else "the reply has no action object"
        )

    def _decision(self, tool: Any, arguments: dict[str, Any], note: Any, thought: Any, frame: Frame) -> Decision:
        action = TOOL_ACTIONS.get(tool) if isinstance(tool, str) else None
        if action is None:
            raise ReplyParseError(f"{tool!r} is not one of the tools ({', '.join(TOOL_ACTIONS)})")
        x, y = arguments.pop("x", None), arguments.pop("y", None)
        try:
            reply = PolicyReply.model_validate(
                {"note": str(note or ""), "thought": str(thought or ""), "action": {"action": action, **arguments}}
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"][2:]) or tool
            raise ReplyParseError(f"the {tool} call is not valid ({where}: {first['msg']})") from None
        if not self.grounded or action not in ELEMENT_ACTIONS:
            return Decision(reply)
        if not _number(x) or not _number(y):
            raise ReplyParseError(f"the {tool} call needs the point x and y of its element on the screenshot")
        return Decision(reply, self.to_image(float(x), float(y), frame))

    def to_image(self, x: float, y: float, frame: Frame) -> tuple[float, float]:
        """A point in this contract's space, in pixels of the screenshot."""
        if self.point == "norm1000":
            return x * frame.image_width / NORMALISED_MAX, y * frame.image_height / NORMALISED_MAX
        return x, y

    # -- the conversation -------------------------------------------------------------------------

    def assistant(self, text: str, tool_calls: Sequence[ToolCall] = ()) -> list[Message]:
        """The message a reply becomes in the conversation: its text exactly as returned (without
        the reasoning the server returned beside it), and its tool calls."""
        if not tool_calls:
            return [{"role": "assistant", "content": text}]
        return [{"role": "assistant", "content": text or None, "tool_calls": [c.message_part() for c in tool_calls]}]

    def tool_results(self, tool_calls: Sequence[ToolCall], outcome: str | None) -> list[Message]:
        """The answers to a reply's tool calls, before the next observation: the first call's
        outcome, the others not carried out (one action per step)."""
        return [
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": (outcome or "done") if i == 0 else "not carried out: one action per step",
            }
            for i, call in enumerate(tool_calls)
        ]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ---------------------------------------------------------------- schemas and the system prompt


def _point_property(axis: str, point: PointSpace) -> dict[str, Any]:
    if point == "norm1000":
        what = f"{axis} of the element's click point: an integer in [0, 1000], normalised to the screenshot"
    else:
        what = f"{axis} of the element's click point, in pixels of the screenshot"
    return {"type": "integer", "description": what}


def _arguments(action: type[Any], grounded: bool, point: PointSpace) -> tuple[str, dict[str, Any]]:
    """(tool name, argument properties) of one action class."""
    schema = strict_schema(action)
    properties = dict(schema.get("properties", {}))
    name = properties.pop("action")["enum"][0]
    if grounded and name in ELEMENT_ACTIONS:
        properties["x"], properties["y"] = _point_property("x", point), _point_property("y", point)
    return TOOL_NAMES[name], properties


@cache
def _schema(shape: ReplyShape, grounded: bool, point: PointSpace) -> dict[str, Any]:
    if shape == "action":
        schema = strict_schema(PolicyReply)
        if grounded:
            for name, definition in schema.get("$defs", {}).items():
                action = definition["properties"]["action"]["enum"][0]
                if action in ELEMENT_ACTIONS:
                    definition["properties"]["x"] = _point_property("x", point)
                    definition["properties"]["y"] = _point_property("y", point)
                    definition["required"] = [*definition["required"], "x", "y"]
                    schema["$defs"][name] = definition
        return schema
    variants = []
    for action in ACTION_TYPES:
        tool, properties = _arguments(action, grounded, point)
        properties = {"tool_name": {"type": "string", "enum": [tool]}, **properties}
        variants.append(
            {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
        )
    properties = {
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "What to remember; null when nothing"},
        "thought": {"type": "string", "description": "A one-line plan for the next action"},
        "tool_call": {"anyOf": variants},
    }
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


@cache
def _tools(grounded: bool, point: PointSpace) -> list[dict[str, Any]]:
    tools = []
    for action in ACTION_TYPES:
        tool, properties = _arguments(action, grounded, point)
        properties = {
            "note": {"type": "string", "description": "Facts worth remembering for later steps (may be empty)"},
            **properties,
        }
        parameters = {"type": "object", "properties": properties, "required": list(properties)}
        description = (action.__doc__ or tool).strip()
        tools.append(
            {"type": "function", "function": {"name": tool, "description": description, "parameters": parameters}}
        )
    return tools


@cache
def _system_prompt(shape: ReplyShape, output: Output, grounded: bool, point: PointSpace) -> str:
    # Stable across steps and sessions: rendered once per contract, so a server prefix cache can hit.
    schema = (
        "" if output == "tools" else json.dumps(_schema(shape, grounded, point), separators=(",", ":"), sort_keys=True)
    )
    names = TOOL_NAMES if shape == "tool_call" or output == "tools" else {name: name for name in TOOL_NAMES}
    return render(
        "policy_system.jinja", schema=schema, shape=shape, output=output, grounded=grounded, point=point, names=names
    )
