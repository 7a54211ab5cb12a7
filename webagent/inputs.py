"""Limits on what users hand the agent: file sizes, nesting depth, YAML alias expansion, goal length;
and what text from others may do on the operator's terminal.

Each limit is broken by a one-line error (``InputError``, or the ``error`` a caller passes, e.g.
``ConfigError``) that names the file or the text and the limit, never a traceback
(``RecursionError``) or a process that eats memory for minutes (a YAML "billion laughs").

``terminal_text`` (and ``terminal_json`` for JSON) is what everything the CLI prints goes through:
a page steers what a model writes, and a model's question, answer or note holding ``ESC ] 0 ;``
or ``ESC [ 2 J`` would set the terminal's title, clear its screen, or on some terminals write its
clipboard.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from .errors import InputError, WebAgentError

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_FILE_BYTES",
    "MAX_GOAL_CHARS",
    "MAX_NESTING",
    "MAX_YAML_VALUES",
    "check_nesting",
    "check_text",
    "load_json",
    "load_yaml",
    "not_utf8_at",
    "read_text",
    "terminal_json",
    "terminal_text",
]

#: Task, suite and reference files: far above any real one (100,000 tasks of 600 bytes).
MAX_FILE_BYTES = 64 * 1024 * 1024
#: A config file.
MAX_CONFIG_BYTES = 1024 * 1024
#: Lists and mappings inside one another (a task nests 2 deep, a suite 4, a config 3).
MAX_NESTING = 32
#: Values a YAML document may expand to once its aliases (``*name``) are followed.
MAX_YAML_VALUES = 100_000
#: A goal, a statement to check, a description of what to extract (about 5,000 tokens).
MAX_GOAL_CHARS = 20_000


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB"


def read_text(path: Path, what: str, *, limit: int = MAX_FILE_BYTES, error: type[WebAgentError] = InputError) -> str:
    """The UTF-8 text of ``what`` (e.g. "task file") at ``path``, refused above ``limit`` bytes."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise error(f"{what} {path} is larger than {_size(limit)} ({_size(size)}), the limit for a {what}")
        with path.open("rb") as fh:
            data = fh.read(limit + 1)  # a file that grew since: still bounded
        if len(data) > limit:
            raise error(f"{what} {path} is larger than {_size(limit)}, the limit for a {what}")
        return data.decode("utf-8")
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what} {path}: {exc}") from None


def check_nesting(value: Any, where: str, *, error: type[WebAgentError] = InputError) -> None:
    """Refuse lists and mappings nested deeper than ``MAX_NESTING`` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= MAX_NESTING:
            raise error(f"{where}: nested deeper than {MAX_NESTING} levels (the limit)")
        stack.extend((child, depth + 1) for child in children)


def load_json(text: str, where: str) -> Any:
    """``json.loads`` with the nesting limit (InputError naming ``where``, e.g. ``tasks.jsonl:3``)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise InputError(f"{where}: nested deeper than {MAX_NESTING} levels (the limit)") from None
    if text.count("[") + text.count("{") > MAX_NESTING:  # else it cannot be too deep
        check_nesting(value, where)
    return value


def load_yaml(text: str, where: str) -> tuple[yaml.Node | None, Any]:
    """The node tree (with line numbers) and the data of a YAML document, safely.

    Nesting is checked on the parser's events, before anything recursive runs; an alias makes a
    node part of the tree once more, so the values the tree expands to are counted (shared nodes
    counted once per use, each computed once) and refused past ``MAX_YAML_VALUES``. Syntax errors
    are yaml's own (callers report them).
    """
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_NESTING:
                line = event.start_mark.line + 1 if event.start_mark else 0
                raise InputError(f"{where}:{line}: nested deeper than {MAX_NESTING} levels (the limit)")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        if _expanded(node, where) > MAX_YAML_VALUES:
            raise InputError(
                f"{where}: its aliases (*name) expand to more than {MAX_YAML_VALUES} values (the limit); "
                "write the values out or use the suite's defaults"
            )
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded(root: yaml.Node, where: str) -> int:
    """How many values ``root`` stands for with every alias followed (memoised: linear in the tree);
    InputError for an alias inside its own anchor (a document that never ends)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not children_done:
            if id(node) in open_nodes:
                raise InputError(f"{where}: an alias (*name) refers to the value it is part of")
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        open_nodes.discard(id(node))
        sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in children), MAX_YAML_VALUES + 1)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def not_utf8_at(text: str) -> int | None:
    """The 1-based position of the first character UTF-8 cannot carry (a lone surrogate: a byte of
    another encoding in a command line arrives as one), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start + 1
    return None


def check_text(text: str, what: str, *, limit: int = MAX_GOAL_CHARS) -> None:
    """Refuse a goal (statement, description) longer than ``limit`` characters: it would be sent
    to the models at every step; or one UTF-8 cannot carry (a byte of another encoding in a
    command line arrives as a lone surrogate): no request, trajectory or result could hold it."""
    if len(text) > limit:
        raise InputError(f"{what} is {len(text)} characters long; the limit is {limit}")
    if (at := not_utf8_at(text)) is not None:
        raise InputError(f"{what} is not valid text at character {at} (a byte of another encoding?); give it in UTF-8")


#: What a terminal may act on instead of showing: the C0 controls but newline and tab (ESC starts
#: every escape sequence, BEL ends an OSC, CR and BS overwrite what was shown), DEL, the C1
#: controls (U+0080-U+009F: U+009B is CSI and U+009D OSC on terminals that read C1 codes), the bidi
#: embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069: they reorder the rest of the
#: line, so that it reads as something it does not say), the line and paragraph separators, and
#: lone surrogates (no UTF-8 stream can carry one: printing it fails). The bidi marks (U+200E,
#: U+200F, U+061C) are kept: real right-to-left text holds them, and they reorder nothing beyond
#: their neighbours.
_TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: str) -> str:
    """``text`` as it may be shown on a terminal: each character of ``_TERMINAL_CONTROLS`` written
    as its escape (``\\x1b``, ``\\x9b``, ``\\u202e``), so that nothing acts and nothing is lost;
    newlines and tabs stay."""
    return _TERMINAL_CONTROLS.sub(_escaped, text)


def terminal_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) as it may be shown on a terminal: the same
    characters written as JSON escapes (``\\u001b``, ``\\u009b``), so that it parses to the same
    value. (They can only stand inside strings, where an escape means the same character.)"""
    return _TERMINAL_CONTROLS.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
