"""The messages each role sends (no network: the client is never called)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import jinja2
import pytest
from PIL import Image

from webagent.actions import PolicyReply
from webagent.config import PROFILES, LocalizerConfig, RoleConfig
from webagent.images import Screenshot, frame_for
from webagent.model.client import ModelClient
from webagent.model.schema import strict_schema
from webagent.prompts import render
from webagent.roles.localizer import Localizer
from webagent.roles.policy import Policy, PolicyState
from webagent.roles.validator import Validator, ValidatorReply

GOAL = 'Find the "cheapest" flight\nfrom {Paris} to {{ London }} and {% raw %} report {{ price }} \\n {# x #}'
FEEDBACK = 'The answer lacks the date.\nSay "when" and {{ where }} — {braces} too.'


def _png(colour: str) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _shot(colour: str = "white", profile: str = "holo2") -> Screenshot:
    return Screenshot(b64=_png(colour), mime="image/png", frame=frame_for(1280, 800, PROFILES[profile]))


def _client(role: str = "policy") -> ModelClient:
    return ModelClient(role, RoleConfig(base_url="http://127.0.0.1:9/v1", model="m"))


def _state(**kwargs: Any) -> PolicyState:
    base: dict[str, Any] = {"goal": GOAL, "url": "https://example.com/search?q=a&b=1", "step": 3, "max_steps": 30}
    base.update(kwargs)
    return PolicyState(**base)


def _text(message: dict[str, Any]) -> str:
    texts = [part["text"] for part in message["content"] if part["type"] == "text"]
    assert len(texts) == 1
    text: str = texts[0]
    return text


def _images(message: dict[str, Any]) -> list[str]:
    return [part["image_url"]["url"] for part in message["content"] if part["type"] == "image_url"]


# --------------------------------------------------------------------------- policy


def test_policy_system_message_is_stable_and_holds_the_schema() -> None:
    policy = Policy(_client())
    first = policy.messages(_state(), [_shot()])
    second = Policy(_client()).messages(
        _state(goal="another goal", url="https://other.example", step=9, notes=["n"], feedback="f", final=True),
        [_shot("red"), _shot("blue")],
    )
    assert first[0]["role"] == "system" and second[0]["role"] == "system"
    assert first[0] == second[0]
    system = first[0]["content"]
    assert isinstance(system, str)
    schema = json.dumps(strict_schema(PolicyReply), separators=(",", ":"), sort_keys=True)
    assert schema in system
    # Nothing that changes per task or step leaks into the cached prefix.
    assert "example.com" not in system and "cheapest" not in system


def test_policy_user_text() -> None:
    state = _state(
        notes=["price A is 120 EUR", "price B is {{ 99 }} EUR"],
        recent=['click_element "Search"', "scroll down"],
        events=["dialog: Are you sure?"],
        feedback=FEEDBACK,
        progress="Your last action (scroll down) changed nothing visible on the page.",
    )
    messages = Policy(_client()).messages(state, [_shot()])
    assert len(messages) == 2
    user = messages[1]
    assert user["role"] == "user"
    text = _text(user)
    assert f"Task: {GOAL}\n" in text
    lines = text.split("\n")
    assert "Current URL: https://example.com/search?q=a&b=1" in lines
    assert "Step: 3 of 30" in lines
    assert "- price A is 120 EUR" in lines
    assert "- price B is {{ 99 }} EUR" in lines
    assert '- click_element "Search"' in lines
    assert "- scroll down" in lines
    assert "- dialog: Are you sure?" in lines
    assert "Your last action (scroll down) changed nothing visible on the page." in lines
    assert "Validator feedback on your last answer:\n" + FEEDBACK + "\n" in text
    assert "FINAL STEP" not in text
    # Sections appear in order.
    order = ["Task:", "Current URL:", "Step:", "Notes so far:", "Recent actions:", "Your last action", "Page events"]
    order.append("Validator feedback")
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)


def test_policy_user_text_without_optional_sections() -> None:
    text = _text(Policy(_client()).messages(_state(), [_shot()])[1])
    assert text.startswith(f"Task: {GOAL}\nCurrent URL: ")
    for absent in ("Notes so far", "Recent actions", "Page events", "Validator feedback", "FINAL STEP", "changed"):
        assert absent not in text


def test_policy_final_step() -> None:
    text = _text(Policy(_client()).messages(_state(step=30, final=True), [_shot()])[1])
    assert "FINAL STEP" in text
    assert "Step: 30 of 30" in text.split("\n")


def test_policy_images_follow_the_text_current_last() -> None:
    shots = [_shot("red"), _shot("green"), _shot("blue")]
    user = Policy(_client()).messages(_state(), shots)[1]
    content = user["content"]
    assert content[0]["type"] == "text"
    assert [part["type"] for part in content[1:]] == ["image_url"] * 3
    assert _images(user) == [shot.data_url for shot in shots]
    assert "(3, oldest first, the current page last)" in _text(user)


def test_policy_single_image() -> None:
    shot = _shot()
    user = Policy(_client()).messages(_state(), [shot])[1]
    assert user["content"][1:] == [shot.image_part()]


# --------------------------------------------------------------------------- localizer

ELEMENT = 'the "Sign in" button, top right {of} the {{ header }}'


@pytest.mark.parametrize("profile", ["holo1", "holo1.5", "holo2"])
def test_localizer_messages(profile: str) -> None:
    localizer = Localizer(_client("localizer"), LocalizerConfig(profile=profile))
    shot = _shot(profile=profile)
    messages = localizer.messages(ELEMENT, shot)
    assert len(messages) == 1
    (message,) = messages
    assert message["role"] == "user"
    content = message["content"]
    assert [part["type"] for part in content] == ["image_url", "text"]
    assert content[0] == shot.image_part()
    text = content[1]["text"]
    assert ELEMENT in text
    assert text.rstrip().endswith(ELEMENT)
    if profile == "holo1":
        assert "Click(x, y)" in text
    elif profile == "holo1.5":
        assert "click_absolute" in text
        assert f"{shot.frame.image_width}x{shot.frame.image_height}" in text
    else:
        assert "1000" in text


def test_localizer_frame_uses_profile_rule() -> None:
    localizer = Localizer(_client("localizer"), LocalizerConfig(profile="holo1"))
    frame = localizer.frame(1280, 800)
    assert (frame.image_width, frame.image_height) == (1260, 784)
    assert localizer.rule == PROFILES["holo1"]


# --------------------------------------------------------------------------- validator


def test_validator_messages() -> None:
    answer = 'The cheapest is "AF123" at {120} EUR\non {{ date }}.'
    shots = [_shot("red"), _shot("blue")]
    messages = Validator(_client("validator")).messages(GOAL, answer, "https://example.com/r", shots)
    system, user = messages
    assert system["role"] == "system" and user["role"] == "user"
    schema = json.dumps(strict_schema(ValidatorReply), separators=(",", ":"), sort_keys=True)
    assert schema in system["content"]
    text = _text(user)
    assert f"Task: {GOAL}\n" in text
    assert "Current URL: https://example.com/r" in text.split("\n")
    assert text.endswith("Candidate answer:\n" + answer)
    assert user["content"][0]["type"] == "text"
    assert _images(user) == [shot.data_url for shot in shots]
    assert _images(user)[-1] == shots[-1].data_url  # the final screenshot, last


def test_validator_system_is_stable() -> None:
    a = Validator(_client("validator")).messages("g1", "a1", "https://a.example", [_shot()])
    b = Validator(_client("validator")).messages("g2", "a2", "https://b.example", [_shot("red")])
    assert a[0] == b[0]


# --------------------------------------------------------------------------- templates


def test_missing_variable_is_an_error() -> None:
    state = _state(goal="g")
    assert render("policy_user.jinja", state=state, n_images=1).startswith("Task: g\n")
    with pytest.raises(jinja2.UndefinedError, match="state"):
        render("policy_user.jinja", n_images=1)
    with pytest.raises(jinja2.UndefinedError, match="outcome"):
        render("policy_turn.jinja", state=state, feedback=None)


def test_rendered_text_is_stripped() -> None:
    text = render("repair.jinja", error="bad", hint="")
    assert text == text.strip()
    assert text.startswith("Your previous reply could not be used: bad.")
