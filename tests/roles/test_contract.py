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
    # Actions without an element need none; a scroll may give the point the wheel turns over.
    scroll = json.dumps({"note": "", "thought": "", "tool_call": {"tool_name": "scroll", "direction": "down"}})
    assert H_GROUNDED.parse(Reply(scroll), FRAME).point is None
    at = {"tool_name": "scroll", "direction": "down", "element": "log", "x": 250, "y": 500}
    assert H_GROUNDED.parse(Reply(json.dumps({"tool_call": at})), FRAME).point == (320.0, 400.0)
    # A drag needs both its points.
    drag = {"tool_name": "drag", "element": "card", "target": "Done", "x": 100, "y": 100}
    with pytest.raises(ReplyParseError, match="needs the point to_x and to_y of its target"):
        H_GROUNDED.parse(Reply(json.dumps({"tool_call": drag})), FRAME)
    decision = H_GROUNDED.parse(Reply(json.dumps({"tool_call": {**drag, "to_x": 500, "to_y": 250}})), FRAME)
    assert (decision.point, decision.target) == ((128.0, 80.0), (640.0, 200.0))


@pytest.mark.parametrize(
    ("tool_call", "error"),
    [
        ({"tool_name": "fly"}, "'fly' is not one of the tools"),
        ({"tool_name": "scroll", "direction": "sideways"}, "the scroll call is not valid"),
        ({"element": "x"}, "None is not one of the tools"),
        (
            {"tool_name": "drag", "element": "card", "x": 1, "y": 2, "to_x": 3, "to_y": 4},
            r"the drag call is not valid \(target: Field required\)",
        ),
        ({"tool_name": "switch_tab", "index": "first"}, "the switch_tab call is not valid"),
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
    assert set(variants["click"]["required"]) == {"tool_name", "element", "modifiers", "x", "y"}
    assert set(variants["drag"]["required"]) == {"tool_name", "element", "target", "x", "y", "to_x", "to_y"}
    assert (
        set(variants["hover"]["required"])
        == set(variants["right_click"]["required"])
        == {"tool_name", "element", "x", "y"}
    )
    assert variants["scroll"]["properties"]["x"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]  # optional
    assert set(variants["switch_tab"]["required"]) == {"tool_name", "index"}
    assert schema["required"] == ["note", "thought", "tool_call"]
    assert "<output_format>" in str(h.system_message()["content"])  # the schema in the system prompt too
    tools = contract_for("holo3.1", "tools", True).request_fields
    assert tools["tool_choice"] == "required" and {t["function"]["name"] for t in tools["tools"]} >= {"click", "answer"}
    assert contract_for("holo3.1", "tools", False).request_fields["tools"][0]["function"]["parameters"]["required"] == [
        "note",
        "element",
        "modifiers",
    ]
    generic = contract_for(None, "json", False).request_fields
    assert generic["response_format"]["json_schema"]["name"] == "policy_reply"
    grounded = contract_for("holo1.5", "json", True).request_fields["response_format"]["json_schema"]["schema"]
    assert (
        "x" in grounded["$defs"]["ClickElement"]["required"] and "to_x" in grounded["$defs"]["DragElement"]["required"]
    )
    assert "x" not in grounded["$defs"]["SwitchTab"]["properties"]
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


def test_an_unknown_action_in_webagent_s_shape_is_named_with_the_actions_there_are() -> None:
    text = json.dumps({"note": "", "thought": "", "action": {"action": "fly_to", "element": "x"}})
    with pytest.raises(ReplyParseError, match=r"'fly_to' is not one of the actions \(click_element, .*drag_element"):
        Contract().parse(Reply(text), FRAME)
    text = json.dumps({"action": {"action": "drag_element", "element": "card"}})
    with pytest.raises(ReplyParseError, match=r"the drag_element action is not valid \(target: Field required\)"):
        Contract().parse(Reply(text), FRAME)


WRITES = [
    {"action": "write_element", "element": "name", "content": "Ada"},
    {"action": "write_element", "element": "email", "content": "ada@example.com"},
    {"action": "click_element", "element": "Submit"},
]


def test_several_actions_a_turn_are_asked_for_with_a_bounded_list_in_each_shape() -> None:
    generic = contract_for(None, "json", False, 4).request_fields["response_format"]["json_schema"]["schema"]
    assert generic["required"] == ["note", "thought", "actions"]
    assert (generic["properties"]["actions"]["minItems"], generic["properties"]["actions"]["maxItems"]) == (1, 4)
    assert "anyOf" in generic["properties"]["actions"]["items"]
    h = contract_for("holo3.1", "json", True, 3).request_fields["structured_outputs"]["json"]
    assert h["required"] == ["note", "thought", "tool_calls"] and h["properties"]["tool_calls"]["maxItems"] == 3
    tools = contract_for("holo3.1", "tools", True, 3).request_fields
    assert tools["parallel_tool_calls"] is True
    assert "parallel_tool_calls" not in contract_for("holo3.1", "tools", True).request_fields
    # Each says so in its system prompt; one action a turn stays as it was.
    assert "up to 4 actions" in str(contract_for(None, "json", False, 4).system_message()["content"])
    assert "Choose exactly ONE next action." in str(contract_for(None, "json", False).system_message()["content"])
    assert contract_for(None, "json", False).request_fields["response_format"]["json_schema"]["schema"]["required"] == [
        "note",
        "thought",
        "action",
    ]


def test_several_actions_are_read_in_order_with_their_points_and_past_the_limit_dropped() -> None:
    contract = Contract("action", "json", True, "pixels", actions=2)
    placed = [{**WRITES[0], "x": 10, "y": 20}, {**WRITES[1], "x": 30, "y": 40}, {**WRITES[2], "x": 50, "y": 60}]
    decision = contract.parse(Reply(json.dumps({"note": "n", "thought": "t", "actions": placed})), FRAME)
    assert [a.element for a in decision.reply.actions] == ["name", "email"]  # type: ignore[union-attr]
    assert [s.point for s in decision.spots] == [(10, 20), (30, 40)] and decision.dropped == 1
    # H's shape, with one bad action among them: the error says which.
    h = Contract("tool_call", "json", False, actions=3)
    calls = [{"tool_name": "write", "element": "name", "content": "Ada"}, {"tool_name": "hover"}]
    with pytest.raises(ReplyParseError, match=r"the hover call \(2nd of 2\) is not valid \(element"):
        h.parse(Reply(json.dumps({"note": None, "thought": "", "tool_calls": calls})), FRAME)


def test_parallel_tool_calls_are_several_actions_each_answered_with_its_own_outcome() -> None:
    contract = Contract("tool_call", "tools", False, actions=2)
    calls = [
        ToolCall(id="a", name="write", arguments=json.dumps({"note": "n", "element": "name", "content": "Ada"})),
        ToolCall(id="b", name="click", arguments=json.dumps({"note": "", "element": "Submit"})),
        ToolCall(id="c", name="answer", arguments=json.dumps({"note": "", "content": "done"})),
    ]
    decision = contract.parse(Reply("Fill and submit.", tuple(calls)), FRAME)
    assert [a.action for a in decision.reply.actions] == ["write_element", "click_element"]
    assert decision.reply.note == "n" and decision.dropped == 1
    results = contract.tool_results(
        calls, "the step's line", ["write -> ok", "click -> not carried out: the page changed"]
    )
    assert [r["content"] for r in results] == [
        "write -> ok",
        "click -> not carried out: the page changed",
        "not carried out: at most 2 actions per step",
    ]
