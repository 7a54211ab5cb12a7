"""JSON schemas for structured outputs (``response_format`` with ``strict: true``).

OpenAI's strict mode and vLLM's guided decoding accept a subset of JSON Schema: every object
closes with ``additionalProperties: false`` and lists all its properties as required, unions are
``anyOf``. Pydantic's schema is converted to that subset here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

__all__ = [
    "json_schema_format",
    "response_format",
    "schema_fields",
    "strict_json_schema",
    "strict_schema",
]

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
    return strict_json_schema(model.model_json_schema())


def strict_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON schema (an object's, e.g. ``Model.model_json_schema()``) converted to the strict subset."""
    result = _convert(dict(schema))
    assert isinstance(result, dict)
    return result


def response_format(name: str, model: type[BaseModel]) -> dict[str, Any]:
    """A ``response_format`` value asking for ``model``'s schema."""
    return json_schema_format(name, strict_schema(model))


def schema_fields(field: str, name: str, model: type[BaseModel]) -> dict[str, Any]:
    """The request fields asking for ``model``'s schema: OpenAI's ``response_format`` (strict
    ``json_schema``), or ``structured_outputs: {"json": schema}`` (vLLM's field, and H Company's
    Models API's)."""
    if field == "structured_outputs":
        return {"structured_outputs": {"json": strict_schema(model)}}
    return {"response_format": response_format(name, model)}


def json_schema_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A ``response_format`` value asking for a (strict) JSON schema."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


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
