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
message's text. Grounded, an element action carries ``x`` and ``y`` (a drag also ``to_x`` and
``to_y``, where it is released; a scroll may carry them, the point the wheel turns over): pixels of
the screenshot or integers in [0, 1000] normalised to it, as the family's contract says.

With several actions a turn (``max_actions_per_turn`` above 1) a JSON reply carries a list,
``"actions": [...]`` in webagent's shape and ``"tool_calls": [...]`` in H's, of at most that many
(the schema says so); as native tool calls, parallel calls. The schema and system prompt of one
action a turn are those of before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from ..actions import ELEMENT_ACTIONS, Action, DragElement, PolicyReply, Scroll
from ..families import TOOL_ACTIONS, TOOL_NAMES, Output, PointSpace, ReplyShape, SchemaField
from ..images import Frame
from ..model.client import Message, Reply
from ..model.parsing import ReplyParseError, extract_json, loads_well_formed
from ..model.schema import json_schema_format
from ..records import ToolCall
from .schemas import policy_schema, policy_tools, system_prompt

__all__ = ["NORMALISED_MAX", "Contract", "Decision", "Spot"]

NORMALISED_MAX = 1000
SCHEMA_NAME = "policy_reply"
_ORDINALS = ("1st", "2nd", "3rd")


@dataclass(frozen=True, slots=True)
class Spot:
    """Where a grounded reply put one action: its point, and a drag's target (where it is released);
    pixels of the screenshot, not yet checked against its bounds."""

    point: tuple[float, float] | None = None
    target: tuple[float, float] | None = None


NOWHERE = Spot()


@dataclass(frozen=True, slots=True)
class _Named:
    """One action of a reply before it is validated: its tool, how an error names it, its arguments
    as the action's fields, and the points taken out of them (x, y, to_x, to_y)."""

    tool: str
    label: str
    which: str
    payload: dict[str, Any]
    points: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy reply, read: its actions, and where a grounded reply put the first (``point``, and a
    drag's ``target``) and each further one (``rest``, one per ``reply.more``); ``dropped``: actions
    past ``max_actions_per_turn``, not read."""

    reply: PolicyReply
    point: tuple[float, float] | None = None
    target: tuple[float, float] | None = None
    rest: tuple[Spot, ...] = ()
    dropped: int = 0

    @property
    def spots(self) -> tuple[Spot, ...]:
        """Where each action of the reply was put, in order (``NOWHERE`` where not grounded)."""
        first = Spot(self.point, self.target)
        return (first, *self.rest, *([NOWHERE] * (len(self.reply.more) - len(self.rest))))


@dataclass(frozen=True)
class Contract:
    """One way of asking the policy and reading its reply (one per policy, built once)."""

    shape: ReplyShape = "action"
    output: Output = "json"
    grounded: bool = False
    point: PointSpace = "pixels"
    schema_field: SchemaField = "response_format"
    actions: int = 1
    """Actions one reply may carry (``max_actions_per_turn``)."""

    # -- asking ---------------------------------------------------------------------------------

    def system_message(self) -> Message:
        content = system_prompt(self.shape, self.output, self.grounded, self.point, self.actions)
        return {"role": "system", "content": content}

    @cached_property
    def request_fields(self) -> dict[str, Any]:
        """What each policy request adds to ask for the reply (built once, never mutated)."""
        if self.output == "tools":
            fields: dict[str, Any] = {"tools": policy_tools(self.grounded, self.point), "tool_choice": "required"}
            if self.actions > 1:
                fields["parallel_tool_calls"] = True
            return fields
        schema = policy_schema(self.shape, self.grounded, self.point, self.actions)
        if self.schema_field == "structured_outputs":
            return {"structured_outputs": {"json": schema}}
        return {"response_format": json_schema_format(SCHEMA_NAME, schema)}

    @property
    def repair_hint(self) -> str:
        several = self.actions > 1
        if self.output == "tools":
            if several:
                return f"Call 1 to {self.actions} of the tools, each with its arguments as its schema says."
            return "Call exactly one of the tools, with its arguments as its schema says."
        if self.shape == "tool_call":
            call = '"tool_calls": [{"tool_name": ..., ...}, ...]' if several else '"tool_call": {"tool_name": ..., ...}'
        else:
            call = '"actions": [{"action": ..., ...}, ...]' if several else '"action": {"action": ..., ...}'
        return f'Reply with a JSON object {{"note": ..., "thought": ..., {call}}} following the schema in the system message.'

    # -- reading --------------------------------------------------------------------------------

    def parse(self, reply: Reply, frame: Frame) -> Decision:
        """Read a reply (raises ReplyParseError, quoted back to the model in a repair request)."""
        if self.output == "tools":
            if not reply.tool_calls:
                raise ReplyParseError("the reply calls no tool: call exactly one of the tools")
            calls = reply.tool_calls[: self.actions]
            items: list[tuple[Any, dict[str, Any]]] = []
            notes: list[str] = []
            for call in calls:
                try:
                    arguments = loads_well_formed(call.arguments) if call.arguments.strip() else {}
                except json.JSONDecodeError as exc:
                    raise ReplyParseError(f"the arguments of {call.name} are not valid JSON ({exc.msg})") from None
                if not isinstance(arguments, dict):
                    raise ReplyParseError(f"the arguments of {call.name} are not a JSON object")
                note = arguments.pop("note", "")
                if note and str(note) not in notes:
                    notes.append(str(note))
                items.append((call.name, arguments))
            dropped = len(reply.tool_calls) - len(calls)
            return self._decision(items, " ".join(notes), str(reply), frame, dropped)
        data = extract_json(reply)
        return self.read(data, frame)

    def read(self, data: Any, frame: Frame) -> Decision:
        """Read a reply already parsed from JSON: in this contract's shape, or in the other one (one
        action, or a list of them)."""
        if not isinstance(data, Mapping):
            raise ReplyParseError("the reply is not a JSON object")
        note, thought = data.get("note") or "", data.get("thought") or ""
        items: list[tuple[Any, dict[str, Any]]] = []
        calls, actions = _listed(data, "tool_call"), _listed(data, "action")
        if calls:
            for call in calls:
                arguments = dict(call)
                items.append((arguments.pop("tool_name", None), arguments))
        elif actions:
            for item in actions:
                arguments = dict(item)
                action = arguments.pop("action", None)
                items.append((TOOL_NAMES.get(str(action), action), arguments))
        else:
            what = "tool_call" if self.shape == "tool_call" else "action"
            raise ReplyParseError(
                f"the reply has no {what} object" + (f" (or {what}s list)" if self.actions > 1 else "")
            )
        kept = items[: self.actions]
        return self._decision(kept, note, thought, frame, len(items) - len(kept))

    def _decision(
        self, items: Sequence[tuple[Any, dict[str, Any]]], note: Any, thought: Any, frame: Frame, dropped: int
    ) -> Decision:
        named = [self._named(tool, arguments, _which(i, len(items))) for i, (tool, arguments) in enumerate(items)]
        data: dict[str, Any] = {"note": str(note or ""), "thought": str(thought or ""), "action": named[0].payload}
        if len(named) > 1:
            data["more"] = [n.payload for n in named[1:]]
        try:  # one validation for the whole reply (the common case: one action)
            reply = PolicyReply.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = first["loc"]
            index, rest = (int(loc[1]) + 1, loc[3:]) if loc[0] == "more" else (0, loc[2:])
            bad = named[index]
            where = ".".join(str(p) for p in rest) or bad.tool
            raise ReplyParseError(f"{bad.label}{bad.which} is not valid ({where}: {first['msg']})") from None
        if not self.grounded:
            return Decision(reply, dropped=dropped)
        spots = [self._spot(action, n, frame) for action, n in zip(reply.actions, named, strict=True)]
        return Decision(reply, spots[0].point, spots[0].target, tuple(spots[1:]), dropped)

    def _named(self, tool: Any, arguments: dict[str, Any], which: str) -> _Named:
        """One action of a reply, its name known and its points taken out of its arguments."""
        name = TOOL_ACTIONS.get(tool) if isinstance(tool, str) else None
        tools = self.shape == "tool_call" or self.output == "tools"
        if name is None:
            known, kind = (TOOL_ACTIONS, "tools") if tools else (TOOL_NAMES, "actions")
            unknown = tool if tools else TOOL_ACTIONS.get(tool, tool)
            raise ReplyParseError(f"{unknown!r}{which} is not one of the {kind} ({', '.join(known)})")
        points = tuple(arguments.pop(k, None) for k in ("x", "y", "to_x", "to_y"))
        label = f"the {tool} call" if tools else f"the {name} action"
        return _Named(str(tool), label, which, {"action": name, **arguments}, points)

    def _spot(self, action: Action, named: _Named, frame: Frame) -> Spot:
        """Where a grounded reply put ``action`` (a ReplyParseError when an element action has no point)."""
        x, y, to_x, to_y = named.points
        if isinstance(action, Scroll):  # the wheel turns over the point given, else at the page's centre
            return Spot(self.to_image(float(x), float(y), frame) if _number(x) and _number(y) else None)
        if action.action not in ELEMENT_ACTIONS:
            return NOWHERE
        if not _number(x) or not _number(y):
            raise ReplyParseError(
                f"{named.label}{named.which} needs the point x and y of its element on the screenshot"
            )
        target = None
        if isinstance(action, DragElement):
            if not _number(to_x) or not _number(to_y):
                raise ReplyParseError(
                    f"{named.label}{named.which} needs the point to_x and to_y of its target on the screenshot"
                )
            target = self.to_image(float(to_x), float(to_y), frame)
        return Spot(self.to_image(float(x), float(y), frame), target)

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

    def tool_results(
        self, tool_calls: Sequence[ToolCall], outcome: str | None, outcomes: Sequence[str] = ()
    ) -> list[Message]:
        """The answers to a reply's tool calls, before the next observation: each call's own outcome
        (``outcomes``, when the step carried out several), else the first call's ``outcome``; calls
        past ``max_actions_per_turn`` not carried out."""
        limit = "one action per step" if self.actions == 1 else f"at most {self.actions} actions per step"
        return [
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": outcomes[i]
                if i < len(outcomes)
                else (outcome or "done")
                if i == 0
                else f"not carried out: {limit}",
            }
            for i, call in enumerate(tool_calls)
        ]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _listed(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """A reply's ``key`` object (one action), or its ``key + "s"`` list of them (several); [] if neither."""
    one, several = data.get(key), data.get(key + "s")
    if isinstance(one, Mapping):
        return [one]
    if isinstance(several, list) and several and all(isinstance(v, Mapping) for v in several):
        return several
    return []


def _which(index: int, count: int) -> str:
    """Which of a reply's several actions, for an error ("" when it has one)."""
    if count == 1:
        return ""
    nth = _ORDINALS[index] if index < len(_ORDINALS) else f"{index + 1}th"
    return f" ({nth} of {count})"
