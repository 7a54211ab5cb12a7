"""Limits on what users hand the agent: a goal too long, or one UTF-8 cannot carry, is a one-line error."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webagent.errors import InputError
from webagent.inputs import check_text, terminal_json, terminal_text


def test_a_goal_over_the_limit_is_refused_with_its_length() -> None:
    check_text("x" * 10, "--goal", limit=10)
    with pytest.raises(InputError, match="--goal is 11 characters long; the limit is 10"):
        check_text("x" * 11, "--goal", limit=10)


def test_a_goal_utf_8_cannot_carry_is_refused_where_it_breaks() -> None:
    check_text("prix en € \U0001f600", "--goal")
    # b"find \xff price" read as a command line by Python: the byte becomes a lone surrogate
    goal = b"find \xff price".decode("utf-8", "surrogateescape")
    with pytest.raises(InputError) as caught:
        check_text(goal, "--goal")
    assert (
        str(caught.value) == "--goal is not valid text at character 6 (a byte of another encoding?); give it in UTF-8"
    )


# ---------------------------------------------------------------- text shown on a terminal

_ACTS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))]
_ACTS += ["\u2028", "\u2029", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)), "\ud800"]


def test_terminal_text_shows_every_control_character_as_its_escape() -> None:
    text = "a\x1b]0;title\x07\x1b[2Jb\u009b2J\u202eKO\x7f\r"
    assert terminal_text(text) == r"a\x1b]0;title\x07\x1b[2Jb\x9b2J\u202eKO\x7f\x0d"
    assert terminal_text("two\tcolumns\nand a line, \u200f\u05e9\u05dc\u05d5\u05dd, \U0001f600") == (
        "two\tcolumns\nand a line, \u200f\u05e9\u05dc\u05d5\u05dd, \U0001f600"  # kept: they act on nothing
    )
    for char in _ACTS:
        shown = terminal_text(f"x{char}y")
        assert shown.isprintable() and shown.startswith("x\\") and shown.endswith("y"), repr(char)
        shown.encode("utf-8")  # a lone surrogate too: printing it cannot fail


@given(st.text(st.characters(exclude_categories=())))
def test_terminal_json_parses_to_the_same_value_with_nothing_that_acts(text: str) -> None:
    dumped = terminal_json(json.dumps({"answer": text}, ensure_ascii=False))
    assert json.loads(dumped) == {"answer": text}
    assert not any(char in dumped for char in _ACTS)
