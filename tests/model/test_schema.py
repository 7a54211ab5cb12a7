"""Strict-mode JSON schemas: closed objects, everything required, unions as anyOf."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

from webagent.actions import PolicyReply
from webagent.model.schema import response_format, strict_schema
from webagent.roles.validator import ValidatorReply

FORBIDDEN = {"oneOf", "discriminator", "default", "const", "title"}
ACTION_TAGS = {
    "upload_file",
    "ask_user",
    "click_element",
    "write_element",
    "scroll",
    "press_key",
    "select_option",
    "goto",
    "go_back",
    "refresh",
    "wait",
    "answer",
    "hover_element",
    "double_click_element",
    "right_click_element",
    "drag_element",
    "switch_tab",
    "close_tab",
}


def _schema_nodes(node: Any, path: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node (not the name->schema maps of properties and $defs)."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _schema_nodes(item, f"{path}/{i}")
        return
    if not isinstance(node, dict):
        return
    yield path, node
    for key, value in node.items():
        if key in ("properties", "$defs"):
            for name, sub in value.items():
                yield from _schema_nodes(sub, f"{path}/{key}/{name}")
        else:
            yield from _schema_nodes(value, f"{path}/{key}")


def _resolve(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/$defs/"), ref
    resolved: dict[str, Any] = root["$defs"][ref.removeprefix("#/$defs/")]
    return resolved


@pytest.fixture(scope="module")
def policy_schema() -> dict[str, Any]:
    return strict_schema(PolicyReply)


def test_every_object_is_closed_and_fully_required(policy_schema: dict[str, Any]) -> None:
    objects = 0
    for path, node in _schema_nodes(policy_schema):
        if node.get("type") == "object" or "properties" in node:
            objects += 1
            assert node["type"] == "object", path
            assert node["additionalProperties"] is False, path
            assert node["required"] == list(node["properties"]), path
    assert objects == 1 + len(ACTION_TAGS)  # PolicyReply and each action


def test_no_unsupported_keywords(policy_schema: dict[str, Any]) -> None:
    for path, node in _schema_nodes(policy_schema):
        assert not FORBIDDEN & node.keys(), (path, FORBIDDEN & node.keys())
    text = json.dumps(policy_schema)
    assert '"oneOf"' not in text and '"discriminator"' not in text and '"const"' not in text


def test_top_level_shape(policy_schema: dict[str, Any]) -> None:
    assert policy_schema["type"] == "object"
    assert policy_schema["required"] == ["note", "thought", "action"]
    assert policy_schema["properties"]["note"]["type"] == "string"
    assert policy_schema["properties"]["thought"]["type"] == "string"


def test_action_union_is_an_any_of_every_action(policy_schema: dict[str, Any]) -> None:
    union = policy_schema["properties"]["action"]
    assert set(union) == {"anyOf"}
    members = [_resolve(policy_schema, m) for m in union["anyOf"]]
    assert len(members) == len(ACTION_TAGS)
    tags = set()
    for member in members:
        tag = member["properties"]["action"]
        assert tag["type"] == "string"
        assert len(tag["enum"]) == 1
        tags.add(tag["enum"][0])
        assert member["required"][0] == "action"
    assert tags == ACTION_TAGS


def test_fields_with_defaults_become_required(policy_schema: dict[str, Any]) -> None:
    write = policy_schema["$defs"]["WriteElement"]
    assert write["required"] == ["action", "element", "content", "press_enter"]
    assert write["properties"]["press_enter"] == {"type": "boolean", "description": "Press Enter after typing"}
    scroll = policy_schema["$defs"]["Scroll"]
    assert scroll["properties"]["direction"]["enum"] == ["up", "down", "left", "right"]
    assert policy_schema["$defs"]["GoBack"]["required"] == ["action"]


def test_descriptions_are_kept(policy_schema: dict[str, Any]) -> None:
    assert policy_schema["properties"]["note"]["description"].startswith("Facts worth remembering")
    assert "Seconds to wait" in policy_schema["$defs"]["Wait"]["properties"]["seconds"]["description"]


class _Inner(BaseModel):
    value: int = 3
    tags: list[str] = Field(default_factory=list)


class _Outer(BaseModel):
    inner: _Inner
    maybe: str | None = None
    items: list[_Inner]


def test_nested_models_lists_and_optionals() -> None:
    schema = strict_schema(_Outer)
    for path, node in _schema_nodes(schema):
        assert not FORBIDDEN & node.keys(), path
        if node.get("type") == "object":
            assert node["additionalProperties"] is False, path
            assert node["required"] == list(node["properties"]), path
    assert schema["required"] == ["inner", "maybe", "items"]
    assert schema["properties"]["maybe"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert _resolve(schema, schema["properties"]["items"]["items"])["required"] == ["value", "tags"]


def test_response_format_shape() -> None:
    fmt = response_format("policy_reply", PolicyReply)
    assert fmt == {
        "type": "json_schema",
        "json_schema": {"name": "policy_reply", "schema": strict_schema(PolicyReply), "strict": True},
    }


def test_validator_schema() -> None:
    schema = strict_schema(ValidatorReply)
    assert schema["required"] == ["success", "feedback"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["success"]["type"] == "boolean"
    assert schema["properties"]["feedback"]["type"] == "string"
