"""Secrets: values the policy refers to by name (``{{NAME}}``) and never sees.

The policy writes ``{{PASSWORD}}`` inside a ``write_element`` content; the agent types the value.
Everything that leaves the agent -- model requests, steps, results, trajectory files, reports,
error messages -- goes through :meth:`Secrets.redact`, which replaces each value (also when
percent-encoded, wholly or in part, HTML-escaped or JSON-escaped) by its ``{{NAME}}`` placeholder.
"""

from __future__ import annotations

import html
import json
import re
import weakref
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, SecretStr

from .errors import ActionError

__all__ = ["MIN_SECRET_CHARS", "SECRET_NAME", "Secrets", "check_secret", "redact_log_event"]

SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
#: Shorter values would turn redaction into noise (every "ab" in every log line replaced).
MIN_SECRET_CHARS = 3
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
M = TypeVar("M", bound=BaseModel)


def check_secret(name: str, value: str) -> None:
    """Raise ValueError (naming the secret, never quoting its value) when a secret is unusable."""
    if not SECRET_NAME.match(name):
        raise ValueError(
            f"secret name {name!r} is invalid: use letters, digits and _ (not starting with a digit), e.g. PASSWORD"
        )
    if len(value) < MIN_SECRET_CHARS:
        raise ValueError(f"secret {name} is shorter than {MIN_SECRET_CHARS} characters")
    if "\n" in value or "\r" in value:
        raise ValueError(f"secret {name} contains a line break; secrets are typed as one line")


def _char_pattern(char: str) -> str:
    """A character, or its percent-encoding in either case (``+`` too for a space)."""
    encoded = "".join(
        "%" + "".join(f"[{d}{d.lower()}]" if d.isalpha() else d for d in f"{byte:02X}") for byte in char.encode()
    )
    options = [re.escape(char), encoded] + (["\\+"] if char == " " else [])
    return "(?:" + "|".join(options) + ")"


def _value_pattern(value: str) -> str:
    """The value as typed, URL-encoded to any degree, HTML-escaped or JSON-escaped."""
    url_forms = "".join(_char_pattern(c) for c in value)
    literal = {html.escape(value), html.escape(value, quote=False), json.dumps(value)[1:-1]}
    literal |= {json.dumps(value, ensure_ascii=False)[1:-1]}
    literal.discard(value)
    return "|".join([url_forms, *(re.escape(f) for f in sorted(literal, key=len, reverse=True))])


class Secrets:
    """A set of named secrets: substitution at typing time, redaction everywhere else."""

    def __init__(self, values: Mapping[str, SecretStr | str] | None = None) -> None:
        self._values: dict[str, str] = {}
        for name, value in (values or {}).items():
            raw = value.get_secret_value() if isinstance(value, SecretStr) else value
            check_secret(name, raw)
            self._values[name] = raw
        # One alternation, the longest value first, each in its own named group.
        ordered = sorted(self._values.items(), key=lambda item: len(item[1]), reverse=True)
        self._group_names = {f"s{i}": name for i, (name, _) in enumerate(ordered)}
        groups = [f"(?P<s{i}>{_value_pattern(raw)})" for i, (_, raw) in enumerate(ordered)]
        self._pattern = re.compile("|".join(groups)) if groups else None
        if self._values:
            _LIVE.add(self)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __repr__(self) -> str:
        return f"Secrets({', '.join(self.names)})"

    @property
    def names(self) -> list[str]:
        return sorted(self._values)

    def substitute(self, text: str) -> tuple[str, bool]:
        """``text`` with each ``{{NAME}}`` replaced by its value, and whether any was.

        An unknown name is an ActionError naming the known ones (never a value).
        """
        used = False

        def value(match: re.Match[str]) -> str:
            nonlocal used
            name = match.group(1)
            if name not in self._values:
                known = ", ".join(self.names) or "none"
                raise ActionError(f"there is no secret named {name}; the secrets are: {known}")
            used = True
            return self._values[name]

        return _PLACEHOLDER.sub(value, text), used

    def redact(self, text: str) -> str:
        """``text`` with every form of every value replaced by ``{{NAME}}``."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(lambda m: "{{" + self._group_names[str(m.lastgroup)] + "}}", text)

    def contains(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def redact_model(self, record: M) -> M:
        """A copy of a Pydantic record with every string redacted (the same object when clean).

        Fields excluded from serialisation (a step's screenshot) are carried over as they are.
        """
        if self._pattern is None:
            return record
        dumped = record.model_dump_json()
        if not self.contains(dumped):
            return record
        clean = type(record).model_validate_json(self.redact(dumped))
        for name, info in type(record).model_fields.items():
            if info.exclude:
                setattr(clean, name, getattr(record, name))
        return clean

    def redact_messages(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Chat messages with their text redacted (image parts are pixels and pass as they are)."""
        return [self._redact_message(m) for m in messages]

    def _redact_message(self, message: dict[str, Any]) -> dict[str, Any]:
        content = message.get("content")
        if isinstance(content, str):
            return {**message, "content": self.redact(content)}
        if isinstance(content, list):
            parts = [
                {**p, "text": self.redact(p["text"])} if isinstance(p, dict) and isinstance(p.get("text"), str) else p
                for p in content
            ]
            return {**message, "content": parts}
        return message


_LIVE: weakref.WeakSet[Secrets] = weakref.WeakSet()


def redact_log_event(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: every secret of every live ``Secrets`` redacted from a log event.

    The CLI installs it; a library user who configures structlog adds it before the renderer.
    """
    live = list(_LIVE)
    if not live:
        return event
    for key, value in event.items():
        if isinstance(value, str):
            for secrets in live:
                value = secrets.redact(value)
            event[key] = value
    return event
