"""The policy contracts: what each asks for and how each reply is read (no network)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webagent.actions import ClickElement, Scroll, WriteElement
from webagent.images import Frame
from webagent.model.client import Reply
from webagent.model.parsing import ReplyParseError
from webagent.records import ToolCall
from webagent.roles.contract import Contract
from webagent.roles.policy import contract_for

FRAME = Frame(1280, 800, 1280, 800)
H_GROUNDED = Contract("tool_call", "json", True, "norm1000", "structured_outputs")


def test_h_s_json_shape_with_a_point_in_0_1000() -> None:
    text = json.dumps(
        {
            "note": None,
            "thought": "search",
            "tool_call": {"tool_name": "click", "element": "Search", "x": 500, "y": 250},
        }
    )
    decision = H_GROUNDED.parse(Reply(text), FRAME)
    assert decision.reply.action == ClickElement(element="Search")
    assert decision.reply.note == "" and decision.reply.thought == "search"
    assert decision.point == (640.0, 200.0)  # normalised to the screenshot sent


def test_a_grounded_reply_without_its_point_is_a_repairable_error() -> None:
    text = json.dumps({"note": "", "thought": "", "tool_call": {"tool_name": "click", "element": "Search"}})
    with pytest.raises(ReplyParseError, match="needs the point x and y"):
        H_GROUNDED.parse(Reply(text), FRAME)
    # Actions without an element need none.
    scroll = json.dumps({"note": "", "thought": "", "tool_call": {"tool_name": "scroll", "direction": "down"}})
    assert H_GROUNDED.parse(Reply(scroll), FRAME).point is None


@pytest.mark.parametrize(
    ("tool_call", "error"),
    [
        ({"tool_name": "fly"}, "'fly' is not one of the tools"),
        ({"tool_name": "scroll", "direction": "sideways"}, "the scroll call is not valid"),
        ({"element": "x"}, "None is not one of the tools"),
    ],
)
def test_bad_tool_calls_say_what_is_wrong(tool_call: dict[str, Any], error: str) -> None:
    with pytest.raises(ReplyParseError, match=error):
        H_GROUNDED.parse(Reply(json.dumps({"note": "", "thought": "", "tool_call": tool_call})), FRAME)


def test_native_tool_calls_carry_the_action_its_note_and_point() -> None:
    contract = Contract("tool_call", "tools", True, "norm1000", "structured_outputs")
    arguments = {"note": "price $3", "element": "Name field", "content": "Ada", "press_enter": True, "x": 250, "y": 500}
    call = ToolCall(id="call_1", name="write", arguments=json.dumps(arguments))
    decision = contract.parse(Reply("I type the name.", (call,)), FRAME)
    assert decision.reply.action == WriteElement(element="Name field", content="Ada", press_enter=True)
    assert (decision.reply.note, decision.reply.thought) == ("price $3", "I type the name.")
    assert decision.point == (320.0, 400.0)
    with pytest.raises(ReplyParseError, match="calls no tool"):
        contract.parse(Reply('{"note": ""}'), FRAME)
    with pytest.raises(ReplyParseError, match="not valid JSON"):
        contract.parse(Reply("", (ToolCall(id="c", name="click", arguments="{oops"),)), FRAME)


def test_webagent_s_shape_grounded_in_pixels() -> None:
    contract = Contract("action", "json", True, "pixels")
    text = json.dumps(
        {"note": "", "thought": "", "action": {"action": "click_element", "element": "OK", "x": 10, "y": 20}}
    )
    decision = contract.parse(Reply(text), FRAME)
    assert decision.reply.action == ClickElement(element="OK") and decision.point == (10, 20)
    # Not grounded, a point in the reply is not asked for and not used.
    assert Contract().parse(Reply(text), FRAME).point is None
    # A reply in the other shape is read too (a caller's dict to WebEnv, say).
    h = {"note": "", "thought": "", "tool_call": {"tool_name": "scroll", "direction": "up"}}
    assert contract.read(h, FRAME).reply.action == Scroll(direction="up")


def test_what_each_contract_asks_for() -> None:
    h = contract_for("holo3.1", "json", True)
    schema = h.request_fields["structured_outputs"]["json"]
    variants = {v["properties"]["tool_name"]["enum"][0]: v for v in schema["properties"]["tool_call"]["anyOf"]}
    assert set(variants["click"]["required"]) == {"tool_name", "element", "x", "y"}
    assert "x" not in variants["scroll"]["properties"]
    assert schema["required"] == ["note", "thought", "tool_call"]
    assert "<output_format>" in str(h.system_message()["content"])  # the schema in the system prompt too
    tools = contract_for("holo3.1", "tools", True).request_fields
    assert tools["tool_choice"] == "required" and {t["function"]["name"] for t in tools["tools"]} >= {"click", "answer"}
    assert contract_for("holo3.1", "tools", False).request_fields["tools"][0]["function"]["parameters"]["required"] == [
        "note",
        "element",
    ]
    generic = contract_for(None, "json", False).request_fields
    assert generic["response_format"]["json_schema"]["name"] == "policy_reply"
    grounded = contract_for("holo1.5", "json", True).request_fields["response_format"]["json_schema"]["schema"]
    assert "x" in grounded["$defs"]["ClickElement"]["required"] and "x" not in grounded["$defs"]["Scroll"]["properties"]
    # Built once: the same objects every time (the wire encoder caches them by identity).
    assert contract_for("holo3.1", "tools", True).request_fields["tools"] is tools["tools"]


def test_a_tool_reply_goes_into_the_conversation_with_its_calls_and_their_results() -> None:
    contract = Contract("tool_call", "tools", True, "norm1000")
    calls = [
        ToolCall(id="a", name="click", arguments='{"element": "x"}'),
        ToolCall(id="b", name="scroll", arguments="{}"),
    ]
    assert contract.assistant("", calls) == [
        {"role": "assistant", "content": None, "tool_calls": [c.message_part() for c in calls]}
    ]
    results = contract.tool_results(calls, "step 3: click 'x' -> ok")
    assert [r["tool_call_id"] for r in results] == ["a", "b"]
    assert results[0]["content"] == "step 3: click 'x' -> ok" and "not carried out" in results[1]["content"]
