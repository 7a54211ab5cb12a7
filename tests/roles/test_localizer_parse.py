"""parse_click: each localizer profile's reply format into image pixels."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webagent.config import PROFILES
from webagent.images import Frame, frame_for
from webagent.model.parsing import ReplyParseError
from webagent.roles.localizer import LOCALIZER_PROFILES, parse_click

HOLO1 = LOCALIZER_PROFILES["holo1"]
HOLO15 = LOCALIZER_PROFILES["holo1.5"]
HOLO2 = LOCALIZER_PROFILES["holo2"]
FRAME = Frame(1280, 800, 1260, 784)


def test_profiles() -> None:
    assert set(LOCALIZER_PROFILES) == {"holo1", "holo1.5", "holo2"} == set(PROFILES)
    assert HOLO1.response_format is None
    assert HOLO15.response_format is not None
    assert HOLO15.response_format["json_schema"]["schema"]["required"] == ["action", "x", "y"]
    assert HOLO2.response_format is not None
    assert HOLO2.response_format["json_schema"]["schema"]["required"] == ["x", "y"]
    assert HOLO2.extra_body == {"chat_template_kwargs": {"thinking": False}}


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
