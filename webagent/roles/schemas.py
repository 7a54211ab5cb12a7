"""What the policy is asked for in each contract: the reply's JSON schema, the tools, the system prompt.

Built once per combination (cached: the wire encoder reuses the same objects, and a server's prefix
cache the same system prompt at every step). A grounded contract adds the points an action is
placed at: ``x`` and ``y`` on an element action (required), ``to_x`` and ``to_y`` on a drag
(required: where it is released), and on a scroll (nullable: the point the wheel turns over, null
for the page). With several actions a turn the reply's action becomes a list of at most that many
(``minItems`` 1, ``maxItems`` N); with one, the schema is exactly that of one action.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from ..actions import ACTION_TYPES, ELEMENT_ACTIONS, PolicyReply
from ..families import TOOL_NAMES, Output, PointSpace, ReplyShape
from ..model.schema import strict_schema
from ..prompts import render

__all__ = ["grounded_properties", "policy_schema", "policy_tools", "system_prompt"]


def _point_property(axis: str, what: str, point: PointSpace, *, nullable: bool = False) -> dict[str, Any]:
    if point == "norm1000":
        text = f"{axis} of {what}: an integer in [0, 1000], normalised to the screenshot"
    else:
        text = f"{axis} of {what}, in pixels of the screenshot"
    if nullable:
        return {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": text + "; null: the page"}
    return {"type": "integer", "description": text}


def grounded_properties(name: str, point: PointSpace) -> dict[str, dict[str, Any]]:
    """The point arguments a grounded reply gives action ``name`` (none for the others)."""
    if name == "scroll":
        what = "the point the wheel turns over (a scrollable panel)"
        return {a: _point_property(a, what, point, nullable=True) for a in ("x", "y")}
    if name not in ELEMENT_ACTIONS:
        return {}
    properties = {a: _point_property(a, "the element's click point", point) for a in ("x", "y")}
    if name == "drag_element":
        what = "the drag's target, where it is released"
        properties.update({f"to_{a}": _point_property(a, what, point) for a in ("x", "y")})
    return properties


def _arguments(action: type[Any], grounded: bool, point: PointSpace) -> tuple[str, dict[str, Any]]:
    """(tool name, argument properties) of one action class."""
    schema = strict_schema(action)
    properties = dict(schema.get("properties", {}))
    name = properties.pop("action")["enum"][0]
    if grounded:
        properties.update(grounded_properties(name, point))
    return TOOL_NAMES[name], properties


def _several(item: dict[str, Any], actions: int, what: str) -> dict[str, Any]:
    return {
        "type": "array",
        "items": item,
        "minItems": 1,
        "maxItems": actions,
        "description": f"1 to {actions} {what}, carried out in order",
    }


@cache
def policy_schema(shape: ReplyShape, grounded: bool, point: PointSpace, actions: int = 1) -> dict[str, Any]:
    """The strict JSON schema of a policy reply in ``shape``."""
    if shape == "action":
        schema = strict_schema(PolicyReply)
        if grounded:
            for name, definition in schema.get("$defs", {}).items():
                extra = grounded_properties(definition["properties"]["action"]["enum"][0], point)
                if extra:
                    definition["properties"].update(extra)
                    definition["required"] = [*definition["required"], *extra]
                    schema["$defs"][name] = definition
        if actions > 1:
            properties = schema["properties"]
            properties["actions"] = _several(properties.pop("action"), actions, "actions")
            schema["required"] = list(properties)
        return schema
    variants = []
    for action in ACTION_TYPES:
        tool, properties = _arguments(action, grounded, point)
        properties = {"tool_name": {"type": "string", "enum": [tool]}, **properties}
        variants.append(
            {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
        )
    call: dict[str, Any] = {"anyOf": variants}
    properties = {
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "What to remember; null when nothing"},
        "thought": {"type": "string", "description": "A one-line plan for the next action"},
        **({"tool_calls": _several(call, actions, "tool calls")} if actions > 1 else {"tool_call": call}),
    }
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


@cache
def policy_tools(grounded: bool, point: PointSpace) -> list[dict[str, Any]]:
    """Every action as a native tool (named as in H's shape), its arguments those of the action plus ``note``."""
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
def system_prompt(shape: ReplyShape, output: Output, grounded: bool, point: PointSpace, actions: int = 1) -> str:
    """The policy's system prompt: stable across steps and sessions, rendered once per contract, so
    that a server's prefix cache can hit."""
    schema = (
        ""
        if output == "tools"
        else json.dumps(policy_schema(shape, grounded, point, actions), separators=(",", ":"), sort_keys=True)
    )
    names = TOOL_NAMES if shape == "tool_call" or output == "tools" else {name: name for name in TOOL_NAMES}
    return render(
        "policy_system.jinja",
        schema=schema,
        shape=shape,
        output=output,
        grounded=grounded,
        point=point,
        names=names,
        actions=actions,
    )
