"""Lenient extraction of structured data from model replies."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["ReplyParseError", "extract_json", "parse_reply"]

T = TypeVar("T", bound=BaseModel)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


class ReplyParseError(ValueError):
    """A reply could not be parsed; the message is quoted back to the model in a repair request."""


def extract_json(text: str) -> Any:
    """Parse the JSON value in ``text``: the whole text, a fenced block, or the first ``{...}``."""
    stripped = text.strip()
    candidates = [stripped]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    start = stripped.find("{")
    if start >= 0:
        end = _matching_brace(stripped, start)
        if end > start:
            candidates.append(stripped[start : end + 1])
    quoted: list[str] = []
    for candidate in candidates:
        if not candidate:
            continue
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if not isinstance(value, str):
            return value
        quoted.append(value)  # a bare JSON string ('"{}"'): the object inside, if any, comes first
    if quoted:
        return quoted[0]
    if not stripped:
        raise ReplyParseError("the reply was empty")
    try:
        json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise ReplyParseError(
            f"the reply is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    raise ReplyParseError("the reply is not valid JSON")  # pragma: no cover


def _matching_brace(text: str, start: int) -> int:
    depth = 0
    in_string = False
    escape = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def parse_reply(text: str, model: type[T]) -> T:
    """Parse and validate a JSON reply against a Pydantic model."""
    data = extract_json(text)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ReplyParseError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "the reply"
        parts.append(f"{loc}: {err['msg']}")
    return "the reply does not match the schema (" + "; ".join(parts) + ")"
