"""parse_click: each localizer profile's reply format into image pixels."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from webagent.config import PROFILES, LocalizerConfig
from webagent.errors import LocalizationError
from webagent.families import PROFILES as FAMILY_PROFILES
from webagent.images import Frame, Screenshot, frame_for
from webagent.model.parsing import ReplyParseError
from webagent.records import ModelCall
from webagent.roles.localizer import LOCALIZER_PROFILES, Localizer, parse_click

from ..strategies import JSON_VALUES, MESSY_TEXT, PROPERTIES

HOLO1 = LOCALIZER_PROFILES["holo1"]
HOLO15 = LOCALIZER_PROFILES["holo1.5"]
HOLO2 = LOCALIZER_PROFILES["holo2"]
FRAME = Frame(1280, 800, 1260, 784)


def test_profiles() -> None:
    assert set(LOCALIZER_PROFILES) == set(FAMILY_PROFILES) == set(PROFILES)
    assert HOLO1.output_fields is None
    assert HOLO15.output_fields is not None
    assert HOLO15.output_fields["response_format"]["json_schema"]["schema"]["required"] == ["action", "x", "y"]
    assert HOLO2.output_fields is not None
    assert HOLO2.output_fields["response_format"]["json_schema"]["schema"]["required"] == ["x", "y"]
    assert HOLO2.extra_body == {"chat_template_kwargs": {"thinking": False}}
    # H's element localization: structured_outputs, thinking off.
    holo3 = LOCALIZER_PROFILES["holo3"]
    assert holo3.output_fields is not None and holo3.output_fields["structured_outputs"]["json"]["required"] == [
        "x",
        "y",
    ]
    assert holo3.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Click(12, 34)", (12.0, 34.0)),
        ("Click(12,34)", (12.0, 34.0)),
        ("Click(  12 ,   34  )", (12.0, 34.0)),
        ("click(12, 34)", (12.0, 34.0)),
        ("I will press the button. Click(640, 392). Done.", (640.0, 392.0)),
        ("Click(12.5, 34.25)", (12.5, 34.25)),
        ("Click(-3, -4)", (-3.0, -4.0)),
        ("Click(1, 2) then Click(3, 4)", (1.0, 2.0)),
    ],
)
def test_holo1(text: str, expected: tuple[float, float]) -> None:
    assert parse_click(text, HOLO1, FRAME) == expected


@pytest.mark.parametrize("text", ["", "garbage", "Click()", "Click(12)", "Click(a, b)", '{"x": 1, "y": 2}', "(12, 34)"])
def test_holo1_garbage(text: str) -> None:
    with pytest.raises(ReplyParseError, match=r"Click\(x, y\)"):
        parse_click(text, HOLO1, FRAME)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"action": "click_absolute", "x": 10, "y": 20}', (10.0, 20.0)),
        ('```json\n{"action": "click_absolute", "x": 10.5, "y": 20}\n```', (10.5, 20.0)),
        ('Sure: {"action": "click_absolute", "x": 1259, "y": 783} ok', (1259.0, 783.0)),
        ('{"x": 7, "y": 8}', (7.0, 8.0)),  # the action tag defaults
        ('{"action": "click_absolute", "x": 1, "y": 2, "thought": "extra keys are ignored"}', (1.0, 2.0)),
    ],
)
def test_holo15(text: str, expected: tuple[float, float]) -> None:
    assert parse_click(text, HOLO15, FRAME) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"action": "click_absolute", "y": 20}', "x: Field required"),
        ('{"action": "click", "x": 10, "y": 20}', "action"),
        ('{"action": "click_absolute", "x": "left", "y": 20}', "x"),
        ("garbage", "not valid JSON"),
        ("", "empty"),
    ],
)
def test_holo15_errors(text: str, fragment: str) -> None:
    with pytest.raises(ReplyParseError) as info:
        parse_click(text, HOLO15, FRAME)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"x": 500, "y": 500}', (630.0, 392.0)),
        ('{"x": 0, "y": 0}', (0.0, 0.0)),
        ('{"x": 1000, "y": 1000}', (1260.0, 784.0)),
        ('```json\n{"x": 250, "y": 750}\n```', (315.0, 588.0)),
    ],
)
def test_holo2_normalised(text: str, expected: tuple[float, float]) -> None:
    assert parse_click(text, HOLO2, FRAME) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "fragment"), [('{"y": 500}', "x: Field required"), ("nope", "not valid JSON")])
def test_holo2_errors(text: str, fragment: str) -> None:
    with pytest.raises(ReplyParseError) as info:
        parse_click(text, HOLO2, FRAME)
    assert fragment in str(info.value)


FRAMES = [
    frame_for(vw, vh, PROFILES[name])
    for name in ("holo1", "holo1.5", "holo2")
    for vw, vh in [(1280, 800), (1920, 1080), (390, 844)]
]


@settings(max_examples=150, deadline=None)
@given(frame=st.sampled_from(FRAMES), data=st.data())
def test_formatted_points_parse_back(frame: Frame, data: st.DataObject) -> None:
    x = data.draw(st.integers(0, frame.image_width - 1), label="x")
    y = data.draw(st.integers(0, frame.image_height - 1), label="y")
    prose = data.draw(st.sampled_from(["", "The element is here. ", "Answer:\n"]), label="prose")

    assert parse_click(f"{prose}Click({x}, {y})", HOLO1, frame) == (x, y)

    reply = json.dumps({"action": "click_absolute", "x": x, "y": y})
    assert parse_click(prose + reply, HOLO15, frame) == (x, y)

    nx, ny = round(x / frame.image_width * 1000), round(y / frame.image_height * 1000)
    px, py = parse_click(prose + json.dumps({"x": nx, "y": ny}), HOLO2, frame)
    assert abs(px - x) <= frame.image_width / 1000 / 2 + 1e-9
    assert abs(py - y) <= frame.image_height / 1000 / 2 + 1e-9


# ---------------------------------------------------------------- properties: any reply, any point


class _OneReply:
    """A localizer client that answers ``text`` once (the real one repairs, then raises)."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def call(self, messages: Any, parse: Callable[[str], Any], **_: Any) -> tuple[Any, ModelCall]:
        return parse(self.text), ModelCall(role="localizer", model="m")


def _now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (the fake client answers at once)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the coroutine suspended")  # pragma: no cover


ON_IMAGE = st.integers(0, 1500) | st.floats(0, 1500)
NUMBERS = ON_IMAGE | st.integers(-5000, 5000) | st.floats(allow_nan=True, allow_infinity=True)
COORDS = st.one_of(ON_IMAGE, ON_IMAGE, NUMBERS, JSON_VALUES)


def _replies(profile: str) -> st.SearchStrategy[str]:
    match profile:
        case "holo1":
            formed = st.builds(lambda x, y: f"Click({x}, {y})", ON_IMAGE, NUMBERS)
        case "holo1.5":
            formed = st.builds(lambda x, y: json.dumps({"action": "click_absolute", "x": x, "y": y}), COORDS, COORDS)
        case _:
            formed = st.builds(lambda x, y: json.dumps({"x": x, "y": y}), COORDS, COORDS)
    prose = st.sampled_from(["", "Sure. ", "```json\n", "The point is "])
    replies = st.builds(lambda p, f: p + f, prose, formed)
    return st.one_of(replies, replies, replies, MESSY_TEXT)


VIEWPORTS = st.sampled_from([(1280, 800), (1920, 1080), (390, 844), (800, 600)])


@PROPERTIES
@given(profile=st.sampled_from(["holo1", "holo1.5", "holo2"]), viewport=VIEWPORTS, data=st.data())
def test_a_located_point_is_on_the_image_and_in_the_viewport(
    profile: str, viewport: tuple[int, int], data: st.DataObject
) -> None:
    text = data.draw(_replies(profile), label="reply")
    localizer = Localizer(_OneReply(text), LocalizerConfig(profile=profile))  # type: ignore[arg-type]
    frame = localizer.frame(*viewport)
    shot = Screenshot("", "image/jpeg", frame)
    try:
        point, _ = _now(localizer.locate("the button", shot))
    except (ReplyParseError, LocalizationError) as exc:
        event(type(exc).__name__)
        assert str(exc)
        return
    event("located")
    x, y = point.image
    assert 0 <= x < frame.image_width and 0 <= y < frame.image_height
    cx, cy = point.viewport
    assert 0 <= cx < viewport[0] and 0 <= cy < viewport[1]
