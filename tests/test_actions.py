"""The action union: validation from JSON, the discriminator, describe_action and normalize_key."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from pydantic import ValidationError

from webagent.actions import (
    ACTION_ADAPTER,
    ACTION_TYPES,
    Answer,
    AskUser,
    ClickElement,
    CloseTab,
    DoubleClickElement,
    DragElement,
    GoBack,
    Goto,
    HoverElement,
    PolicyReply,
    PressKey,
    Refresh,
    RightClickElement,
    Scroll,
    SelectOption,
    SwitchTab,
    UploadFile,
    Wait,
    WriteElement,
    describe_action,
    normalize_key,
    points_of,
)
from webagent.model.parsing import ReplyParseError, parse_reply

from .strategies import JSON_VALUES, PROPERTIES, json_objects_with

ACTIONS: list[tuple[dict[str, Any], object]] = [
    (
        {"action": "click_element", "element": "the blue 'Search' button"},
        ClickElement(element="the blue 'Search' button"),
    ),
    (
        {"action": "write_element", "element": "search box", "content": "cheap flights", "press_enter": True},
        WriteElement(element="search box", content="cheap flights", press_enter=True),
    ),
    ({"action": "scroll", "direction": "down"}, Scroll(direction="down")),
    ({"action": "press_key", "key": "Escape"}, PressKey(key="Escape")),
    (
        {"action": "select_option", "element": "country dropdown", "option": "France"},
        SelectOption(element="country dropdown", option="France"),
    ),
    ({"action": "goto", "url": "https://example.com/a?b=1"}, Goto(url="https://example.com/a?b=1")),
    ({"action": "go_back"}, GoBack()),
    ({"action": "refresh"}, Refresh()),
    ({"action": "wait", "seconds": 2.5}, Wait(seconds=2.5)),
    ({"action": "answer", "content": "The price is 42 EUR."}, Answer(content="The price is 42 EUR.")),
    ({"action": "upload_file", "element": "CV field", "file": "cv.pdf"}, UploadFile(element="CV field", file="cv.pdf")),
    ({"action": "ask_user", "question": "Your code?"}, AskUser(question="Your code?")),
    ({"action": "hover_element", "element": "the Products menu"}, HoverElement(element="the Products menu")),
    ({"action": "double_click_element", "element": "cell B2"}, DoubleClickElement(element="cell B2")),
    ({"action": "right_click_element", "element": "report.pdf"}, RightClickElement(element="report.pdf")),
    (
        {"action": "drag_element", "element": "card 'Write report'", "target": "the Done column"},
        DragElement(element="card 'Write report'", target="the Done column"),
    ),
    ({"action": "switch_tab", "index": 1}, SwitchTab(index=1)),
    ({"action": "close_tab", "index": 0}, CloseTab(index=0)),
    (
        {"action": "scroll", "direction": "down", "element": "the log panel"},
        Scroll(direction="down", element="the log panel"),
    ),
    (
        {"action": "click_element", "element": "row 3", "modifiers": ["shift"]},
        ClickElement(element="row 3", modifiers=("shift",)),
    ),
]


def test_every_action_is_listed() -> None:
    assert {type(expected) for _, expected in ACTIONS} == set(ACTION_TYPES)


@pytest.mark.parametrize(("data", "expected"), ACTIONS, ids=[d["action"] for d, _ in ACTIONS])
def test_policy_reply_validates_each_action(data: dict[str, Any], expected: object) -> None:
    reply = PolicyReply.model_validate({"note": "n", "thought": "t", "action": data})
    assert type(reply.action) is type(expected)
    assert reply.action == expected
    assert (reply.note, reply.thought) == ("n", "t")
    # Round trip through JSON.
    assert PolicyReply.model_validate_json(reply.model_dump_json()) == reply
    assert ACTION_ADAPTER.validate_python(data) == expected


def test_write_element_press_enter_defaults_to_false() -> None:
    action = ACTION_ADAPTER.validate_python({"action": "write_element", "element": "f", "content": ""})
    assert action == WriteElement(element="f", content="", press_enter=False)


@pytest.mark.parametrize("tag", ["click", "fly", "CLICK_ELEMENT", "", None])
def test_unknown_action_tag_rejected(tag: object) -> None:
    with pytest.raises(ValidationError):
        PolicyReply.model_validate({"note": "", "thought": "", "action": {"action": tag, "element": "x"}})


def test_missing_action_tag_rejected() -> None:
    with pytest.raises(ValidationError):
        ACTION_ADAPTER.validate_python({"element": "x"})


@pytest.mark.parametrize(
    "data",
    [
        {"action": "click_element", "element": "x", "x": 10},
        {"action": "go_back", "steps": 2},
        {"action": "scroll", "direction": "down", "amount": 3},
        {"action": "answer", "content": "a", "confidence": 1},
    ],
)
def test_extra_fields_are_ignored(data: dict[str, Any]) -> None:
    # Lenient parsing: the strict schema goes to the server, but a usable reply with extra keys is kept.
    action = ACTION_ADAPTER.validate_python(data)
    assert action.action == data["action"]
    assert set(action.model_dump()) < set(data) | {"press_enter", "modifiers", "element"}


def test_extra_top_level_field_ignored_and_note_thought_default() -> None:
    reply = PolicyReply.model_validate({"action": {"action": "refresh"}, "plan": "x"})
    assert reply.note == "" and reply.thought == ""
    assert "plan" not in reply.model_dump()


@pytest.mark.parametrize(
    "data",
    [
        {"action": "scroll", "direction": "sideways"},
        {"action": "click_element", "element": ""},
        {"action": "press_key", "key": ""},
        {"action": "goto", "url": ""},
        {"action": "select_option", "element": "s", "option": ""},
        {"action": "write_element", "element": "f"},
        {"action": "wait"},
        {"action": "drag_element", "element": "card"},  # a drag without a target
        {"action": "drag_element", "element": "card", "target": ""},
        {"action": "switch_tab", "index": -1},
        {"action": "close_tab"},
        {"action": "click_element", "element": "x", "modifiers": ["hyper"]},
        {"action": "hover_element"},
    ],
)
def test_invalid_arguments_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ACTION_ADAPTER.validate_python(data)


@pytest.mark.parametrize(("seconds", "expected"), [(0, 0.0), (3, 3.0), (10, 10.0), (10.5, 10.0), (600, 10.0)])
def test_wait_is_capped_at_ten_seconds(seconds: float, expected: float) -> None:
    assert Wait(seconds=seconds).seconds == expected
    assert ACTION_ADAPTER.validate_python({"action": "wait", "seconds": seconds}).seconds == expected


def test_negative_wait_rejected() -> None:
    with pytest.raises(ValidationError):
        Wait(seconds=-1)


def test_actions_are_frozen() -> None:
    action = ClickElement(element="x")
    with pytest.raises(ValidationError):
        action.element = "y"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("action", "text"),
    [
        (ClickElement(element='the "Go" button'), "click_element \"the 'Go' button\""),
        (WriteElement(element="search box", content="hello"), 'write_element "search box" content="hello"'),
        (
            WriteElement(element="search box", content="hello\n   world", press_enter=True),
            'write_element "search box" content="hello world" +Enter',
        ),
        (Scroll(direction="left"), "scroll left"),
        (PressKey(key="Control+a"), 'press_key "Control+a"'),
        (SelectOption(element="country", option="France"), 'select_option "country" option="France"'),
        (Goto(url="https://example.com/x"), "goto https://example.com/x"),
        (Goto(url="https://example.com/x\nStep: 9"), "goto https://example.com/x Step: 9"),
        (GoBack(), "go_back"),
        (Refresh(), "refresh"),
        (Wait(seconds=2.5), "wait 2.5s"),
        (Wait(seconds=99), "wait 10s"),
        (Answer(content="42"), 'answer "42"'),
        (ClickElement(element="row 3", modifiers=("shift", "ctrl")), 'click_element "row 3" holding shift+ctrl'),
        (HoverElement(element="Products"), 'hover_element "Products"'),
        (DoubleClickElement(element="cell"), 'double_click_element "cell"'),
        (RightClickElement(element="file"), 'right_click_element "file"'),
        (DragElement(element="card", target="Done"), 'drag_element "card" to "Done"'),
        (Scroll(direction="down", element="log"), 'scroll down in "log"'),
        (SwitchTab(index=2), "switch_tab 2"),
        (CloseTab(index=1), "close_tab 1"),
    ],
)
def test_describe_action(action: Any, text: str) -> None:
    assert describe_action(action) == text


@pytest.mark.parametrize(
    ("given", "held"),
    [
        ("Shift", ("shift",)),
        ("ctrl+Shift", ("ctrl", "shift")),
        (["Control", "cmd", "option"], ("ctrl", "meta", "alt")),
        (["shift", "SHIFT"], ("shift",)),
        ([], None),
        (None, None),
        ("", None),
    ],
)
def test_held_keys_are_read_as_a_model_spells_them(given: object, held: object) -> None:
    assert ACTION_ADAPTER.validate_python({"action": "click_element", "element": "x", "modifiers": given}) == (
        ClickElement(element="x", modifiers=held)  # type: ignore[arg-type]
    )


def test_a_blank_scroll_element_is_the_page() -> None:
    assert Scroll(direction="up", element="  ") == Scroll(direction="up")


def test_points_each_action_is_placed_at() -> None:
    assert points_of(DragElement(element="a", target="b")) == 2
    assert points_of(HoverElement(element="a")) == points_of(Scroll(direction="up", element="panel")) == 1
    assert points_of(Scroll(direction="up")) == points_of(SwitchTab(index=0)) == points_of(Answer(content="")) == 0


def test_a_reply_with_several_actions_keeps_them_in_order_and_writes_them_back_as_a_list() -> None:
    data = {
        "note": "form",
        "thought": "fill it",
        "actions": [
            {"action": "write_element", "element": "name", "content": "Ada"},
            {"action": "write_element", "element": "email", "content": "ada@example.com"},
            {"action": "click_element", "element": "Submit"},
        ],
    }
    reply = PolicyReply.model_validate(data)
    assert reply.action == WriteElement(element="name", content="Ada")
    assert [a.action for a in reply.actions] == ["write_element", "write_element", "click_element"]
    dumped = json.loads(reply.model_dump_json())
    assert "action" not in dumped and dumped["actions"][2] == {
        "action": "click_element",
        "element": "Submit",
        "modifiers": None,
    }
    assert PolicyReply.model_validate(dumped) == reply
    # One action is written as it always was; an empty list is no action.
    single = PolicyReply(action=Refresh())
    assert json.loads(single.model_dump_json()) == {"note": "", "thought": "", "action": {"action": "refresh"}}
    with pytest.raises(ValidationError):
        PolicyReply.model_validate({"actions": []})


def test_describe_action_truncates_long_text() -> None:
    text = describe_action(Answer(content="x" * 500))
    assert text == 'answer "' + "x" * 119 + '…"'


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("ctrl+a", "Control+a"),
        ("CTRL+A", "Control+A"),
        ("ENTER", "Enter"),
        ("enter", "Enter"),
        ("return", "Enter"),
        ("page down", "PageDown"),
        ("pageup", "PageUp"),
        ("page_up", "PageUp"),
        ("Shift+Tab", "Shift+Tab"),
        ("shift+tab", "Shift+Tab"),
        ("f5", "F5"),
        ("F12", "F12"),
        ("alt+f4", "Alt+F4"),
        ("+", "+"),
        ("esc", "Escape"),
        ("cmd+c", "Meta+c"),
        ("Control + Shift + t", "Control+Shift+t"),
        ("down", "ArrowDown"),
        ("space", "Space"),
        ("a", "a"),
        ("Escape", "Escape"),
        ("backspace", "Backspace"),
        ("PageDown", "PageDown"),
        ("insert", "Insert"),
    ],
)
def test_normalize_key(key: str, expected: str) -> None:
    assert normalize_key(key) == expected


def test_normalize_key_modifier_with_plus_key() -> None:
    # Playwright spells "Control and the + key" as "Control++"; the "+" must not be dropped.
    assert normalize_key("ctrl++") == "Control++"


# ---------------------------------------------------------------- properties: policy replies

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
_NONEMPTY = _TEXT.filter(bool)
ANY_ACTION = st.one_of(
    st.builds(ClickElement, element=_NONEMPTY),
    st.builds(WriteElement, element=_NONEMPTY, content=_TEXT, press_enter=st.booleans()),
    st.builds(Scroll, direction=st.sampled_from(["up", "down", "left", "right"])),
    st.builds(PressKey, key=_NONEMPTY),
    st.builds(SelectOption, element=_NONEMPTY, option=_NONEMPTY),
    st.builds(Goto, url=_NONEMPTY),
    st.builds(GoBack),
    st.builds(Refresh),
    st.builds(Wait, seconds=st.floats(0, 10)),
    st.builds(Answer, content=_TEXT),
    st.builds(
        ClickElement,
        element=_NONEMPTY,
        modifiers=st.none()
        | st.lists(st.sampled_from(["shift", "ctrl", "alt", "meta"]), min_size=1, unique=True).map(tuple),
    ),
    st.builds(Scroll, direction=st.sampled_from(["up", "down"]), element=st.none() | _NONEMPTY.filter(str.strip)),
    st.builds(HoverElement, element=_NONEMPTY),
    st.builds(DoubleClickElement, element=_NONEMPTY),
    st.builds(RightClickElement, element=_NONEMPTY),
    st.builds(DragElement, element=_NONEMPTY, target=_NONEMPTY),
    st.builds(SwitchTab, index=st.integers(0, 20)),
    st.builds(CloseTab, index=st.integers(0, 20)),
)
_ACTION_TYPES = ACTION_TYPES
_TAGS = [t.model_fields["action"].default for t in _ACTION_TYPES]
_ACTION_KEYS = [
    "action",
    "element",
    "content",
    "press_enter",
    "direction",
    "key",
    "option",
    "url",
    "seconds",
    "target",
    "index",
    "modifiers",
]
_ARGS = st.one_of(_TEXT, _TEXT, st.sampled_from(["up", "down", "Enter"]), st.booleans(), st.floats(0, 20), JSON_VALUES)
#: Objects that look like actions: a known tag (mostly), some of the argument keys, any values.
ACTION_OBJECTS = st.builds(
    lambda tag, args: {**args, "action": tag},
    st.one_of(st.sampled_from(_TAGS), st.sampled_from(_TAGS), JSON_VALUES),
    st.dictionaries(st.sampled_from(_ACTION_KEYS[1:]), _ARGS),
)
POLICY_OBJECTS = st.one_of(
    st.fixed_dictionaries(
        {"action": ACTION_OBJECTS}, optional={"note": _TEXT | JSON_VALUES, "thought": _TEXT, "extra": JSON_VALUES}
    ),
    json_objects_with(["note", "thought", "action"]),
)
REPLIES = st.builds(
    PolicyReply, note=_TEXT, thought=_TEXT, action=ANY_ACTION, more=st.lists(ANY_ACTION, max_size=3).map(tuple)
)


@PROPERTIES
@given(
    reply=REPLIES, prose=st.sampled_from(["", "Here is my reply:\n", "```json\n"]), indent=st.sampled_from([None, 2])
)
def test_policy_replies_round_trip(reply: PolicyReply, prose: str, indent: int | None) -> None:
    text = (
        prose + json.dumps(reply.model_dump(mode="json"), indent=indent) + ("\n```" if prose.startswith("```") else "")
    )
    assert parse_reply(text, PolicyReply) == reply


@PROPERTIES
@given(data=POLICY_OBJECTS)
def test_any_policy_object_parses_or_names_what_is_wrong(data: dict[str, Any]) -> None:
    try:
        reply = parse_reply(json.dumps(data), PolicyReply)
    except ReplyParseError as exc:
        event("rejected")
        assert str(exc).startswith("the reply does not match the schema (")
    else:
        event("accepted")
        assert isinstance(reply.action, _ACTION_TYPES) and isinstance(reply.note, str)


@PROPERTIES
@given(action=ANY_ACTION)
def test_describe_action_is_one_short_line(action: Any) -> None:
    text = describe_action(action)
    assert "\n" not in text and "\r" not in text
    assert text.startswith(action.action)
    if not isinstance(action, Goto):
        assert len(text) < 300


@PROPERTIES
@given(key=st.text(max_size=30))
def test_normalize_key_never_raises_and_keeps_a_key(key: str) -> None:
    out = normalize_key(key)
    assert isinstance(out, str)
    assert bool(out.strip()) == bool(key.strip())
