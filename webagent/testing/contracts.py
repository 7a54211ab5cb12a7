"""The offline model server's side of each family's contract: what a request asks for, and the
scripted reply written in it.

A policy request says how it wants its reply: native ``tools`` (the reply then carries
``tool_calls``), or a JSON schema (``response_format`` or ``structured_outputs``) of webagent's
shape (``{"note", "thought", "action": {...}}``) or H Company's (``{"note", "thought",
"tool_call": {"tool_name", ...}}``); a schema or tools with ``x``/``y`` on the element actions ask
for a grounded reply, its point in the coordinates of the model's family (the registry, told by
the model name), a drag's release point as ``to_x``/``to_y``. A schema whose action is a list
(``"actions"``, or H's ``"tool_calls"``) takes several actions, at most its ``maxItems``; native
tool calls take them as parallel calls; a request asking for one gets the first. A request with reasoning on (``chat_template_kwargs.enable_thinking``) gets a
``reasoning`` field beside its content, as vLLM's reasoning parser returns it.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from webagent.families import DEFAULT_PROFILE, TOOL_NAMES, family_of

__all__ = ["ELEMENT_ACTIONS", "Asked", "ScriptedReply", "asked", "calls_text", "policy_reply", "thinking"]

#: The actions whose element gets a point in a grounded reply (a drag: its target's too).
ELEMENT_ACTIONS = frozenset(
    {
        "click_element",
        "write_element",
        "select_option",
        "upload_file",
        "hover_element",
        "double_click_element",
        "right_click_element",
        "drag_element",
    }
)
#: Where a scripted action is placed: its element's point and a drag's target's (pixels of the
#: screenshot; None: unknown).
Spot = tuple[tuple[float, float] | None, tuple[float, float] | None]


@dataclass(frozen=True, slots=True)
class Asked:
    """How a policy request wants its reply."""

    output: Literal["json", "tools"] = "json"
    shape: Literal["action", "tool_call"] = "action"
    grounded: bool = False
    actions: int = 1
    """How many actions one reply may carry (the schema's ``maxItems``; tools: as many as scripted)."""


@dataclass(slots=True)
class ScriptedReply:
    """A reply's message: its content, its native tool calls, the reasoning beside it."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: str | None = None

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.reasoning is not None:
            message["reasoning"] = self.reasoning
        return message

    def generated(self) -> tuple[str, ...]:
        """The reply's texts as the model generated them: the reasoning first (which the chat
        template drops from later turns, so a later request does not match it), the content, the
        tool calls."""
        return (self.reasoning or "", self.content, calls_text(self.tool_calls))


def calls_text(tool_calls: list[dict[str, Any]] | None) -> str:
    """Tool calls as the simulated chat template renders them (name and arguments of each)."""
    parts = []
    for call in tool_calls or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(f"<tool_call>{function.get('name')}{function.get('arguments')}</tool_call>")
    return "".join(parts)


def _schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        schema = fmt["json_schema"].get("schema")
        return schema if isinstance(schema, dict) else None
    outputs = body.get("structured_outputs")
    schema = outputs.get("json") if isinstance(outputs, dict) else None
    return schema if isinstance(schema, dict) else None


def _has_point(properties: Any) -> bool:
    return isinstance(properties, dict) and "x" in properties and "y" in properties


def asked(body: dict[str, Any]) -> Asked | None:
    """How a policy request wants its reply (None: it is not a policy request's body)."""
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        grounded = any(
            _has_point(t.get("function", {}).get("parameters", {}).get("properties"))
            for t in tools
            if isinstance(t, dict)
        )
        return Asked("tools", "tool_call", grounded, actions=len(TOOL_NAMES))
    schema = _schema(body)
    if schema is None:
        return None
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or "note" not in properties:  # not a policy reply's schema
        return None
    for key in ("tool_call", "tool_calls", "action", "actions"):
        if key not in properties:
            continue
        several = key.endswith("s")
        count = int(properties[key].get("maxItems") or 1) if several else 1
        if key.startswith("tool_call"):
            call = properties[key].get("items", {}) if several else properties[key]
            return Asked(
                "json", "tool_call", any(_has_point(v.get("properties")) for v in call.get("anyOf", [])), count
            )
        grounded = any(_has_point(d.get("properties")) for d in schema.get("$defs", {}).values())
        return Asked("json", "action", grounded, count)
    return None


def thinking(body: dict[str, Any]) -> bool:
    """Whether the request turns the model's reasoning on."""
    kwargs = body.get("chat_template_kwargs")
    return isinstance(kwargs, dict) and kwargs.get("enable_thinking") is True


def policy_reply(
    how: Asked,
    note: str,
    thought: str,
    actions: list[dict[str, Any]],
    *,
    model: str,
    spots: list[Spot],
    image: tuple[int, int],
) -> ScriptedReply:
    """Scripted actions in the form ``how`` asks for (at most as many as it allows). ``spots``: where
    each action's element (and a drag's target) is in pixels of the screenshot (None: unknown, the
    reply points off it); ``image``: the screenshot's size."""
    written = []
    for action, (point, target) in list(zip(actions, spots, strict=True))[: how.actions]:
        name = str(action.get("action"))
        arguments = {k: v for k, v in action.items() if k != "action"}
        if how.grounded and name in ELEMENT_ACTIONS:
            arguments.update(_point(model, point, image))
            if name == "drag_element":
                to = _point(model, target, image)
                arguments.update(to_x=to["x"], to_y=to["y"])
        elif how.grounded and name == "scroll":
            at = _point(model, point, image) if point is not None else {"x": None, "y": None}
            arguments.update(at)
        written.append((name, arguments))
    if how.output == "tools":
        calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": TOOL_NAMES.get(name, name),
                    "arguments": json.dumps({"note": note if i == 0 else "", **arguments}),
                },
            }
            for i, (name, arguments) in enumerate(written)
        ]
        return ScriptedReply(thought, calls)
    if how.shape == "tool_call":
        tool_calls = [{"tool_name": TOOL_NAMES.get(name, name), **arguments} for name, arguments in written]
        body: dict[str, Any] = {"tool_calls": tool_calls} if how.actions > 1 else {"tool_call": tool_calls[0]}
        return ScriptedReply(json.dumps({"note": note or None, "thought": thought, **body}))
    items = [{"action": name, **arguments} for name, arguments in written]
    body = {"actions": items} if how.actions > 1 else {"action": items[0]}
    return ScriptedReply(json.dumps({"note": note, "thought": thought, **body}))


def _point(model: str, point: tuple[float, float] | None, image: tuple[int, int]) -> dict[str, int]:
    family = family_of(model, DEFAULT_PROFILE)
    space = family.policy.point if family is not None else None
    width, height = image
    if point is None:  # an element the script does not know: a point off the screenshot
        return {"x": 1100, "y": 500} if space == "norm1000" else {"x": width + 50, "y": height // 2}
    x, y = point
    if space == "norm1000":
        return {"x": round(x * 1000 / width), "y": round(y * 1000 / height)}
    return {"x": round(x), "y": round(y)}
