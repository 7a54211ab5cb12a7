"""Lenient extraction of structured data from model replies."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..guard.secrets import well_formed

__all__ = ["ReplyParseError", "extract_json", "loads_well_formed", "parse_reply", "well_formed_json"]

T = TypeVar("T", bound=BaseModel)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
#: A JSON escape of a surrogate (``\\ud800``), which may decode to half a pair.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


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
            value = loads_well_formed(candidate)
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


def loads_well_formed(text: str) -> Any:
    """``json.loads(text)``, with every string UTF-8 can carry: an escape of half a surrogate pair
    (``"\\ud800"``, which a model may write) decodes to U+FFFD, not to a lone surrogate that no
    trajectory line or request could hold."""
    value = json.loads(text)
    return _repaired(value)[0] if _ESCAPED_SURROGATE.search(text) else value


def well_formed_json(text: str) -> str:
    """JSON ``text`` (a tool call's arguments) whose parse gives no lone surrogate: unchanged
    unless its parse holds one (an escaped half pair), then written again with U+FFFD for it; raw
    lone surrogates become U+FFFD either way. Valid arguments stay as the model wrote them."""
    if _ESCAPED_SURROGATE.search(text):
        with contextlib.suppress(ValueError):
            fixed, changed = _repaired(json.loads(text))
            if changed:
                return json.dumps(fixed, ensure_ascii=False)
    return well_formed(text)


def _repaired(value: Any) -> tuple[Any, bool]:
    """``value`` with its lone surrogates replaced, and whether there were any (a value nested
    deeper than the walk goes is left as it is)."""
    found: list[bool] = []

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            fixed = well_formed(v)
            if fixed != v:
                found.append(True)
            return fixed
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {walk(k): walk(x) for k, x in v.items()}
        return v

    try:
        return walk(value), bool(found)
    except RecursionError:
        return value, False


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
