"""Lenient JSON extraction from model replies, and schema errors that name the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webagent.actions import PolicyReply, Scroll
from webagent.model.parsing import ReplyParseError, extract_json, loads_well_formed, parse_reply
from webagent.roles.validator import ValidatorReply

from ..strategies import JSON_VALUES as FENCE_SAFE_VALUES
from ..strategies import MESSY_TEXT, PROPERTIES


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  \n{"a": 1}\n  ', {"a": 1}),
        ("[1, 2]", [1, 2]),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```JSON\n{"a": 1}\n```', {"a": 1}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('Here you go:\n```json\n{"a": [1, 2]}\n```\nDone.', {"a": [1, 2]}),
        ('Sure! The answer is {"a": {"b": [1, {"c": 2}]}} hope it helps', {"a": {"b": [1, {"c": 2}]}}),
        ('{"s": "a } b { c"} trailing words', {"s": "a } b { c"}),
        ('prose {"s": "escaped \\" quote } brace"} more', {"s": 'escaped " quote } brace'}),
        ('{"s": "backslash at end \\\\"} x', {"s": "backslash at end \\"}),
        ('{"a": 1}{"b": 2}', {"a": 1}),
        ('{"a": 1} and later {"b": 2}', {"a": 1}),
    ],
)
def test_extract_json(text: str, expected: Any) -> None:
    assert extract_json(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "\n\t\n"])
def test_empty_reply(text: str) -> None:
    with pytest.raises(ReplyParseError, match="the reply was empty"):
        extract_json(text)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": 1', "line 1 column 8"),
        ("no json here", "line 1 column 1"),
        ('{"a": 1,\n "b": }', "line 2 column"),
        ('```json\n{"a":\n```', "not valid JSON"),
    ],
)
def test_broken_json(text: str, fragment: str) -> None:
    with pytest.raises(ReplyParseError) as info:
        extract_json(text)
    message = str(info.value)
    assert message.startswith("the reply is not valid JSON")
    assert fragment in message


def test_reply_parse_error_is_a_value_error() -> None:
    assert issubclass(ReplyParseError, ValueError)


def test_parse_reply_valid() -> None:
    reply = parse_reply(
        'Thinking...\n```json\n{"note": "", "thought": "go", "action": {"action": "scroll", "direction": "up"}}\n```',
        PolicyReply,
    )
    assert reply == PolicyReply(note="", thought="go", action=Scroll(direction="up"))


@pytest.mark.parametrize(
    ("data", "fragments"),
    [
        ({"note": "", "thought": ""}, ["action", "Field required"]),
        (
            {"note": "", "thought": "", "action": {"action": "scroll", "direction": "sideways"}},
            ["action.scroll.direction", "'up'"],
        ),
        ({"note": "", "thought": "", "action": {"action": "fly"}}, ["action", "fly"]),
        ({"note": "", "thought": "", "action": {"action": "wait", "seconds": -2}}, ["action.wait.seconds"]),
        ({"note": 3, "thought": "", "action": {"action": "go_back"}}, ["note", "string"]),
    ],
)
def test_parse_reply_schema_mismatch_names_the_field(data: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ReplyParseError) as info:
        parse_reply(json.dumps(data), PolicyReply)
    message = str(info.value)
    assert message.startswith("the reply does not match the schema (")
    for fragment in fragments:
        assert fragment in message


def test_parse_reply_non_object_names_the_reply() -> None:
    with pytest.raises(ReplyParseError, match="the reply does not match the schema"):
        parse_reply("[1, 2]", PolicyReply)


def test_parse_reply_broken_json() -> None:
    with pytest.raises(ReplyParseError, match="not valid JSON"):
        parse_reply('{"note": ', PolicyReply)


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
# Prose never contains braces (the first "{" starts the JSON) nor backticks (no fences).
PROSE = st.text(st.characters(blacklist_characters="{}`", blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    data=st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=5),
    before=PROSE,
    after=PROSE,
    indent=st.sampled_from([None, 2]),
    ascii_only=st.booleans(),
)
def test_dict_wrapped_in_prose_round_trips(
    data: dict[str, Any], before: str, after: str, indent: int | None, ascii_only: bool
) -> None:
    text = before + json.dumps(data, indent=indent, ensure_ascii=ascii_only) + after
    assert extract_json(text) == data


# ---------------------------------------------------------------- properties: any reply at all


@PROPERTIES
@given(text=MESSY_TEXT)
def test_any_reply_parses_or_raises_a_reply_parse_error(text: str) -> None:
    try:
        value = extract_json(text)
    except ReplyParseError as exc:
        assert str(exc)  # quoted back to the model in the repair request
    else:
        json.dumps(value)  # a plain JSON value
    for model in (PolicyReply, ValidatorReply):
        try:
            parse_reply(text, model)
        except ReplyParseError as exc:
            assert str(exc)


@PROPERTIES
@given(value=FENCE_SAFE_VALUES, before=PROSE, after=PROSE, lang=st.sampled_from(["", "json", "JSON"]))
def test_a_fenced_value_round_trips(value: Any, before: str, after: str, lang: str) -> None:
    text = f"{before}```{lang}\n{json.dumps(value, indent=2)}\n```{after}"
    assert extract_json(text) == value


def test_an_object_inside_a_quoted_reply_wins_over_the_string() -> None:
    # Found by test_dict_wrapped_in_prose_round_trips: '"{}"' is itself valid JSON (a string).
    assert extract_json('"{}"') == {}
    assert extract_json('"{"action": "scroll"}"') == {"action": "scroll"}
    assert extract_json('"just words"') == "just words"  # no object anywhere: the string it is


def test_an_escaped_half_pair_parses_to_a_replacement_character() -> None:
    value = extract_json('Sure: {"action": "type_text", "text": "a\\ud800b", "k\\udfff": ["\\ud83d\\ude00"]}')
    assert value == {"action": "type_text", "text": "a\ufffdb", "k\ufffd": ["\U0001f600"]}  # a pair stays one
    json.dumps(value, ensure_ascii=False).encode("utf-8")


def test_a_reply_nested_past_the_walk_still_parses() -> None:
    deep = "[" * 600 + '"\\ud800"' + "]" * 600  # json.loads goes this deep; a recursive walk would not
    assert loads_well_formed(deep) == json.loads(deep)  # not a RecursionError
