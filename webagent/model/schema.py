"""JSON schemas for structured outputs (``response_format`` with ``strict: true``).

OpenAI's strict mode and vLLM's guided decoding accept a subset of JSON Schema: every object
closes with ``additionalProperties: false`` and lists all its properties as required, unions are
``anyOf``. Pydantic's schema is converted to that subset here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["response_format", "strict_schema"]

_KEEP = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "anyOf",
    "items",
    "$ref",
    "$defs",
    "description",
}


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The strict-mode JSON schema of a Pydantic model."""
    result = _convert(model.model_json_schema())
    assert isinstance(result, dict)
    return result


def response_format(name: str, model: type[BaseModel]) -> dict[str, Any]:
    """A ``response_format`` value asking for ``model``'s schema."""
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "schema": strict_schema(model), "strict": True},
    }


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "oneOf":
            out["anyOf"] = _convert(value)
        elif key == "const":
            out["enum"] = [value]
        elif key in ("properties", "$defs"):
            out[key] = {k: _convert(v) for k, v in value.items()}
        elif key in _KEEP:
            out[key] = _convert(value)
    if out.get("type") == "object" or "properties" in out:
        out["type"] = "object"
        props = out.setdefault("properties", {})
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out
