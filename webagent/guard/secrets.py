"""Secrets: values the policy refers to by name (``{{NAME}}``) and never sees.

The policy writes ``{{PASSWORD}}`` inside a ``write_element`` content; the agent types the value.
Everything that leaves the agent -- model requests, steps, results, trajectory files, reports,
error messages -- goes through :meth:`Secrets.redact`, which replaces each value by its
``{{NAME}}`` placeholder: as typed or in any letter case, percent-encoded (wholly or in part,
twice over), as HTML character references (decimal, hex, named), JSON-escaped (again and again),
or in base64. Text that is shortened is redacted first (:func:`shorten`): a value cut in two is
no longer recognisable.

A secret is typed only into pages of the hosts it is allowed on (docs/security.md, "Secrets"): its
own ``hosts`` (``[secrets] NAME = { value, hosts }``), else the run's default (``[browser]
allowed_domains``, else the host of a start URL the operator chose, else none: a client's or a
task file's start). :meth:`Secrets.typing_refusal` says why a write may not happen;
:meth:`Secrets.reach_refusal` why a header or password may not be sent where it would go.
"""

from __future__ import annotations

import base64
import html
import html.entities
import re
import weakref
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, SecretStr

from ..errors import ActionError
from .hosts import url_host
from .navigation import HostRule, parse_rule

__all__ = [
    "MIN_SECRET_CHARS",
    "SECRET_NAME",
    "Secrets",
    "check_secret",
    "redact_live",
    "redact_log_event",
    "shorten",
    "well_formed",
]

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


_ENTITY_NAMES: dict[str, list[str]] = {}
for _name, _char in html.entities.html5.items():
    _ENTITY_NAMES.setdefault(_char, []).append(_name)
_AMP, _HASH, _SEMI = "(?:&|%(?:25)*26)", "(?:#|%(?:25)*23)", "(?:;|%(?:25)*3b)"
#: Base64 of a secret is redacted when this many characters of it do not depend on its neighbours.
MIN_BASE64_CHARS = 8


def _char_pattern(char: str) -> str:
    """A character in any of the encodings a page, a URL or a record may give it, mixed freely.

    Percent-encoded (either case, ``%25`` layers too, ``+`` for a space), an HTML character
    reference (decimal, hex, named; ``&amp;`` layers too; percent-encoded too), a JSON escape
    (``\\u0068``, ``\\"``, escaped again any number of times).
    """
    code = ord(char)
    options = [re.escape(char), "".join(_percent(byte) for byte in char.encode())]
    if char == " ":
        options.append("\\+")
    names = sorted({name.rstrip(";") for name in _ENTITY_NAMES.get(char, [])})
    refs = [f"{_HASH}0*{code}", f"{_HASH}x0*{code:x}", *(re.escape(name) for name in names)]
    options.append(f"{_AMP}(?:amp{_SEMI})*(?:{'|'.join(refs)}){_SEMI}?")
    units = [char] if code < 0x10000 else [chr(0xD800 + ((code - 0x10000) >> 10)), chr(0xDC00 + (code & 0x3FF))]
    options.append("".join(f"\\\\+u{ord(unit):04x}" for unit in units))
    short = {'"': '"', "\\": "\\", "/": "/", "\t": "t"}.get(char)
    if short is not None:
        options.append("\\\\+" + re.escape(short))
    return "(?:" + "|".join(options) + ")"


def _percent(byte: int) -> str:
    return f"%(?:25)*{byte:02x}"


def _base64_cores(value: str) -> set[str]:
    """The runs of characters of the value's base64 (standard and URL-safe) that only it decides,
    whatever its offset in a longer encoded text (the characters at its ends mix in neighbours)."""
    data = value.encode()
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode("ascii")
        core = encoded[(8 * offset + 5) // 6 : (8 * (offset + len(data))) // 6]
        if len(core) >= MIN_BASE64_CHARS:
            cores |= {core, core.replace("+", "-").replace("/", "_")}
    return cores


def _first_chars(value: str) -> set[str]:
    """The characters a match of :func:`_value_pattern` can start with."""
    first = {value[0], "%", "&", "\\"} | ({"+"} if value[0] == " " else set())
    return first | {core[0] for core in _base64_cores(value)}


def _value_pattern(value: str) -> str:
    """The value as typed or encoded any way (see :func:`_char_pattern`), in any letter case, or
    the part of its base64 that is its own (exact case)."""
    encoded = "".join(_char_pattern(c) for c in value)
    cores = sorted(_base64_cores(value), key=len, reverse=True)
    return "|".join([encoded, *("(?-i:" + re.escape(core) + ")" for core in cores)])


class Secrets:
    """A set of named secrets: substitution at typing time, redaction everywhere else."""

    def __init__(
        self,
        values: Mapping[str, SecretStr | str] | None = None,
        *,
        hidden: Mapping[str, Sequence[str]] | None = None,
        hosts: Mapping[str, Sequence[str]] | None = None,
        variables: Mapping[str, str] | None = None,
    ) -> None:
        """``hidden``: more values redacted as ``{{NAME}}`` that the policy can neither name nor type
        (a signed-in state's cookies, a proxy's password); values shorter than ``MIN_SECRET_CHARS``
        are left out. ``hosts``: the host rules (``safety.parse_rule``) each named secret may be
        typed on; a secret without takes the default a write is given. ``variables``: a suite's
        ``${NAME}`` values, redacted as ``${NAME}`` (short ones left out, as hidden values)."""
        self._values: dict[str, str] = {}
        for name, value in (values or {}).items():
            raw = value.get_secret_value() if isinstance(value, SecretStr) else value
            check_secret(name, raw)
            self._values[name] = raw
        self._hosts = {name: tuple(parse_rule(rule) for rule in rules) for name, rules in (hosts or {}).items()}
        self._hidden = {
            name: sorted({v for v in found if len(v) >= MIN_SECRET_CHARS}) for name, found in (hidden or {}).items()
        }
        self._variables = {name: v for name, v in (variables or {}).items() if len(v) >= MIN_SECRET_CHARS}
        everything = [
            *(("{{" + name + "}}", v) for name, v in self._values.items()),
            *(("{{" + name + "}}", v) for name, found in self._hidden.items() for v in found),
            *(("${" + name + "}", v) for name, v in self._variables.items()),
        ]
        # One alternation, the longest value first, each in its own named group.
        ordered = sorted(everything, key=lambda item: len(item[1]), reverse=True)
        self._group_names = {f"s{i}": shown for i, (shown, _) in enumerate(ordered)}
        groups = [f"(?P<s{i}>{_value_pattern(raw)})" for i, (_, raw) in enumerate(ordered)]
        # A match can only start at one of a few characters: looking ahead for them first skips
        # every other position at once (three times faster on ordinary text).
        starts = sorted({c for _, raw in ordered for c in _first_chars(raw)})
        guard = "(?=[" + "".join(re.escape(c) for c in starts) + "])"
        self._pattern = re.compile(guard + "(?:" + "|".join(groups) + ")", re.IGNORECASE) if groups else None
        if self._pattern is not None:
            _LIVE.add(self)

    def __bool__(self) -> bool:
        return self._pattern is not None

    @property
    def credentials(self) -> bool:
        """Whether these hold a secret or a hidden value (a state's cookies, a password), not only a
        suite's variables: what a Playwright trace, which cannot be redacted, must not record."""
        return bool(self._values or any(self._hidden.values()))

    def with_hidden(self, hidden: Mapping[str, Sequence[str]]) -> Secrets:
        """These secrets and ``hidden`` values more (see ``__init__``); ``self`` when there are none."""
        if not any(len(v) >= MIN_SECRET_CHARS for found in hidden.values() for v in found):
            return self
        merged = {name: [*self._hidden.get(name, []), *found] for name, found in hidden.items()}
        hosts = {name: [str(rule) for rule in rules] for name, rules in self._hosts.items()}
        return Secrets(self._values, hidden={**self._hidden, **merged}, hosts=hosts, variables=self._variables)

    def __repr__(self) -> str:
        return f"Secrets({', '.join(self.names)})"

    @property
    def names(self) -> list[str]:
        return sorted(self._values)

    def hosts(self, name: str, default: Sequence[str] = ()) -> tuple[str, ...]:
        """The host rules secret ``name`` may be typed on: its own, else ``default`` (the run's)."""
        own = self._hosts.get(name)
        return tuple(str(rule) for rule in own) if own is not None else tuple(default)

    def restricted(self, name: str) -> bool:
        """Whether secret ``name`` has hosts of its own."""
        return name in self._hosts

    def placeholders(self, text: str) -> list[str]:
        """The names of the secrets ``text`` refers to as ``{{NAME}}`` (known ones, each once)."""
        return sorted({m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1) in self._values})

    def typing_refusal(self, text: str, urls: Sequence[str], default: Sequence[str] = ()) -> str | None:
        """Why ``text`` may not be typed into a field whose documents are at ``urls`` (the tab's top
        document and the frames down to the field's), or None when it may: each secret it names is
        typed only where its hosts (or ``default``, for one without) allow. One line for the policy,
        naming the secret and the host and how the operator allows it; never a value."""
        for name in self.placeholders(text):
            own = self._hosts.get(name)
            rules = own if own is not None else tuple(parse_rule(r) for r in default)
            for url in urls:
                if url.split("#", 1)[0].split("?", 1)[0] in ("about:blank", "about:srcdoc"):
                    continue  # an empty document or srcdoc frame: its parent's origin, judged on its own
                where = url_host(url)
                if where is not None and any(rule.matches(where[1], where[2]) for rule in rules):
                    continue
                host = f"{where[1]}:{where[2]}" if where is not None else (url.partition(":")[0] + ": pages")
                allowed = ", ".join(map(str, rules)) if rules else "no host in this run"
                how = (
                    f"[secrets] {name} = {{ value = ..., hosts = [...] }} or --secret-host {name}=HOST"
                    if own is not None or rules
                    else f"hosts for it ([secrets] {name} = {{ value = ..., hosts = [...] }}, --secret-host "
                    f"{name}=HOST) or [browser] allowed_domains"
                )
                return (
                    f"the secret {name} was not typed: it may not be typed on {host} (allowed: {allowed}); "
                    f"only the operator can allow more hosts, with {how}"
                )
        return None

    def reach_refusal(self, text: str, reach: Sequence[str] | None, what: str) -> str | None:
        """Why ``text`` (a header value, a password: ``what``) may not be sent to the hosts of ``reach``
        (None: every host the run reaches), or None: a secret with hosts of its own goes only to them."""
        for name in self.placeholders(text):
            own = self._hosts.get(name)
            if own is None:
                continue
            hosts = ", ".join(map(str, own))
            if reach is None:
                return (
                    f"{what} sends the secret {name} to every host a run reaches, and {name} may go only to {hosts}: "
                    "set [browser] allowed_domains within its hosts (or give the credentials an origin)"
                )
            for entry in reach:
                if not any(_covers(rule, parse_rule(entry)) for rule in own):
                    return f"{what} sends the secret {name} to {entry}, and {name} may go only to {hosts}"
        return None

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
        return self._pattern.sub(lambda m: self._group_names[str(m.lastgroup)], text)

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


def _covers(rule: HostRule, other: HostRule) -> bool:
    """Whether every host and port ``other`` matches, ``rule`` matches too."""
    if rule.port is not None and rule.port != other.port:
        return False
    if rule.wildcard:
        return other.host == rule.host or other.host.endswith("." + rule.host)
    return not other.wildcard and other.host == rule.host


_LIVE: weakref.WeakSet[Secrets] = weakref.WeakSet()


def redact_live(text: str) -> str:
    """``text`` with every secret of every live ``Secrets`` redacted (for code that has no
    ``Secrets`` of its own at hand: the browser's event texts, error messages)."""
    for secrets in list(_LIVE):
        text = secrets.redact(text)
    return text


def shorten(text: str, limit: int, *, secrets: Secrets | None = None) -> str:
    """``text`` redacted (by ``secrets``, else every live one), then cut to ``limit`` characters
    with an ellipsis. Always in that order: a secret cut in two would escape redaction in part."""
    text = secrets.redact(text) if secrets is not None else redact_live(text)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate replaced by U+FFFD.

    A page's strings are UTF-16 (JavaScript), and Playwright and DevTools hand a lone surrogate in a
    title or a dialog's message over as it is; JSON decodes a valid pair to one character, so what
    is left is lone. Unreplaced, it cannot be written as UTF-8: a trajectory line or a request body
    with the page's title would fail."""
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


def redact_log_event(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: every secret of every live ``Secrets`` redacted from a log event.

    The CLI installs it; a library user who configures structlog adds it before the renderer.
    """
    if not _LIVE:
        return event
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact_live(value)
    return event
