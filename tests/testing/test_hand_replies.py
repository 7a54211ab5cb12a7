"""The offline model server writes every new action in every contract, grounded and not, and several
actions a turn as each contract asks; the agent's own contracts read them back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webagent.images import Frame
from webagent.model.client import Reply
from webagent.records import ToolCall
from webagent.roles.policy import contract_for
from webagent.testing.contracts import asked, policy_reply

FRAME = Frame(1280, 800, 1280, 800)
NEW = [
    {"action": "hover_element", "element": "menu"},
    {"action": "double_click_element", "element": "cell", "modifiers": ["shift"]},
    {"action": "right_click_element", "element": "file"},
    {"action": "drag_element", "element": "card", "target": "column"},
    {"action": "scroll", "direction": "down", "element": "panel"},
    {"action": "switch_tab", "index": 1},
    {"action": "close_tab", "index": 0},
]
SPOTS = {"menu": (100.0, 100.0), "cell": (200.0, 200.0), "file": (300.0, 300.0), "card": (400.0, 400.0)}
SPOTS |= {"column": (900.0, 500.0), "panel": (640.0, 400.0)}
#: (family, output, grounded): webagent's JSON, H's JSON, H's native tool calls; in pixels and in [0, 1000].
FORMS = [(None, "json", False), ("holo1.5", "json", True), ("holo3", "json", True), ("holo3.1", "tools", True)]
FORMS += [("holo3", "json", False), ("holo3.1", "tools", False)]
MODELS = {None: "fake-policy", "holo1.5": "Hcompany/Holo1.5-7B", "holo3": "Hcompany/Holo3-35B-A3B"}
MODELS["holo3.1"] = "Hcompany/Holo-3.1-35B-A3B"


def spots(actions: list[dict[str, Any]]) -> list[Any]:
    return [(SPOTS.get(a.get("element", "")), SPOTS.get(a.get("target", ""))) for a in actions]


def read(contract: Any, reply: Any) -> Any:
    if reply.tool_calls:
        calls = tuple(
            ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
            for c in reply.tool_calls
        )
        return contract.parse(Reply(reply.content, calls), FRAME)
    return contract.parse(Reply(reply.content), FRAME)


@pytest.mark.parametrize(("family", "output", "grounded"), FORMS)
@pytest.mark.parametrize("actions", [1, 3])
def test_every_new_action_is_written_and_read_back(
    family: str | None, output: str, grounded: bool, actions: int
) -> None:
    contract = contract_for(family, output, grounded, actions)  # type: ignore[arg-type]
    how = asked(contract.request_fields)
    assert how is not None and how.grounded == grounded and (how.actions == actions or output == "tools")
    for start in range(0, len(NEW), 3):
        chunk = NEW[start : start + actions]
        reply = policy_reply(how, "n", "t", chunk, model=MODELS[family], spots=spots(chunk), image=(1280, 800))
        decision = read(contract, reply)
        assert [a.action for a in decision.reply.actions] == [a["action"] for a in chunk]
        if not grounded:
            assert all(s.point is None for s in decision.spots)
            continue
        for act, spot in zip(chunk, decision.spots, strict=True):
            want = SPOTS.get(act.get("element", ""))
            assert spot.point == (pytest.approx(want, abs=1) if want else None), act
            if act["action"] == "drag_element":
                assert spot.target == pytest.approx(SPOTS["column"], abs=1)


def test_a_request_for_one_action_gets_the_first_of_several() -> None:
    contract = contract_for(None, "json", False)
    how = asked(contract.request_fields)
    assert how is not None and how.actions == 1
    reply = policy_reply(how, "", "", NEW[:3], model="fake-policy", spots=spots(NEW[:3]), image=(1280, 800))
    assert json.loads(reply.content)["action"] == NEW[0]
