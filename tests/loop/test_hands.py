"""The new hands in the loop: pointer actions, a panel's wheel, tabs, several actions a turn (fake page,
real offline model server over HTTP, in each contract)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webagent import Agent
from webagent.config import AgentConfig
from webagent.loop import Episode
from webagent.records import RunResult, Step, Tab
from webagent.replay import ReplayCache, StepReplay
from webagent.testing.offline import offline_config
from webagent.testing.server import FakeModelServer

from ..conftest import ServerFactory
from .fakepage import FakePage
from .test_episode import GOAL, script

HANDS: list[dict[str, Any]] = [
    {"action": "hover_element", "element": "big button"},
    {"action": "double_click_element", "element": "name field", "modifiers": ["shift"]},
    {"action": "right_click_element", "element": "big button"},
    {"action": "click_element", "element": "big button", "modifiers": ["ctrl", "meta"]},
    {"action": "drag_element", "element": "big button", "target": "name field"},
    {"action": "scroll", "direction": "down", "element": "name field"},
    {"action": "scroll", "direction": "up"},
    {"action": "switch_tab", "index": 1},
    {"action": "close_tab", "index": 0},
]
EXPECTED: list[tuple[Any, ...]] = [
    ("hover", 640, 400),
    ("click_with", 300, 200, "left", 2, ("Shift",)),
    ("click_with", 640, 400, "right", 1, ()),
    ("click_with", 640, 400, "left", 1, ("Control", "Meta")),
    ("drag", 640, 400, 300, 200),
    ("scroll_at", 300, 200, "down"),
    ("scroll", "up"),
    ("switch_tab", 1),
    ("close_tab", 0),
]
#: (policy family, grounding, output): webagent's JSON with a localizer, H's JSON and H's native tool calls grounded.
CONTRACTS = [(None, "localizer", "json"), ("holo3", "policy", "json"), ("holo3.1", "policy", "tools")]


def config_for(server: FakeModelServer, family: str | None, grounding: str, output: str, **agent: Any) -> AgentConfig:
    config = offline_config(server.url, "holo1.5", family=family, grounding=grounding, **agent)
    config.policy.output = output  # type: ignore[assignment]
    for role in ("policy", "localizer", "validator"):
        config.role(role).timeout_s = 5.0
    return config


async def run(config: AgentConfig, page: FakePage, *, replay: StepReplay | None = None) -> tuple[RunResult, list[Step]]:
    async with Agent(config) as agent:
        roles = agent.new_roles()
        episode = Episode(roles, page, config.agent, url="http://127.0.0.1:1/start", goal=GOAL, replay=replay)
        steps = [step async for step in episode.steps()]
    assert episode.result is not None
    return episode.result, steps


def near(calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Calls with their coordinates to the nearest 2 px (points in [0, 1000] round on the way)."""
    return [
        tuple(round(v / 2) * 2 if isinstance(v, int) and not isinstance(v, bool) and v > 10 else v for v in c)
        for c in calls
    ]


@pytest.mark.parametrize(("family", "grounding", "output"), CONTRACTS)
async def test_each_new_hand_reaches_the_page_at_its_points_in_each_contract(
    model_server: ServerFactory, family: str | None, grounding: str, output: str
) -> None:
    policy = [{"when": {"step": i}, "action": a} for i, a in enumerate(HANDS, start=1)]
    policy.append({"action": {"action": "answer", "content": "42"}})
    page = FakePage()
    async with model_server(script(policy)) as server:
        result, steps = await run(config_for(server, family, grounding, output), page)
        localized = server.request_counts["localizer"]
    assert result.success, result.message
    assert near(page.calls[1:]) == near(EXPECTED)
    # Without grounding the localizer places each point: a drag's two, a named panel's one.
    assert localized == (0 if grounding == "policy" else 7)
    drag = steps[4]
    assert drag.point is not None and drag.target_point is not None and drag.element == "big button"
    assert drag.target_point.viewport == pytest.approx((300, 200), abs=2)
    assert steps[5].element == "name field" and steps[6].point is None  # a page scroll is not placed
    assert [s.outcome for s in steps[4:6]] == ["ok, dragged", "ok, scrolled down"]


async def test_a_drag_whose_target_is_off_the_screenshot_is_a_failed_step(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"last_action": "outside"}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "drag_element", "element": "big button", "target": "the moon"}},
    ]
    page = FakePage()
    async with model_server(script(policy)) as server:  # the script does not know "the moon"
        result, steps = await run(config_for(server, None, "localizer", "json"), page)
    assert steps[0].error is not None and "outside" in steps[0].error
    assert not any(call[0] == "drag" for call in page.calls)
    assert result.success


SEVERAL = [
    {"action": "write_element", "element": "name field", "content": "Ada"},
    {"action": "click_element", "element": "big button"},
    {"action": "write_element", "element": "name field", "content": "Bob"},
]


@pytest.mark.parametrize(("family", "grounding", "output"), CONTRACTS)
async def test_several_actions_run_in_order_and_stop_at_the_first_that_changes_the_page(
    model_server: ServerFactory, family: str | None, grounding: str, output: str
) -> None:
    policy = [
        {"when": {"step": 1}, "note": "form", "actions": SEVERAL},
        {"action": {"action": "answer", "content": "42"}},
    ]
    page = FakePage()
    page.restructuring = {"click"}  # the click adds elements to the page
    async with model_server(script(policy)) as server:
        result, steps = await run(config_for(server, family, grounding, output, max_actions_per_turn=3), page)
        requests = [r for r in server.requests if r.role == "policy"]
    assert result.success and result.steps == 2 and len(requests) == 2  # one request for the three
    assert [c[0] for c in page.calls[1:]] == ["write", "click"]
    assert page.watched == 0  # the watch over the list ended with it
    first = steps[0]
    assert first.action is not None and first.action.action == "write_element"  # Step.action: the first
    assert [a.outcome for a in first.actions] == [
        "ok",
        "ok",
        "not carried out: the page changed (elements were added or removed)",
    ]
    assert first.outcome.startswith("[1] ok; [2] ok; [3] not carried out") and first.error is None
    assert all(a.point is not None for a in first.actions[:2]) and first.actions[2].point is None
    told = requests[1].turn if output == "json" else str(requests[1].messages)
    assert "not carried out: the page changed (elements were added or removed)" in told
    if output == "tools":  # each parallel call answered with its own outcome
        results = [m["content"] for m in requests[1].messages if m["role"] == "tool"]
        assert results[0].startswith('write_element "name field"') and results[1].startswith("click_element")
        assert "not carried out" in results[2]


async def test_a_list_stops_after_a_failed_action_or_a_new_url(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"step": 1}, "actions": SEVERAL},
        {"when": {"step": 2}, "actions": [{"action": "goto", "url": "127.0.0.1:9/next"}, SEVERAL[1]]},
        {"when": {"step": 3}, "actions": SEVERAL[:2]},
        {"action": {"action": "answer", "content": "42"}},
    ]
    page = FakePage()
    page.fail["click"] = "no element takes clicks there"
    async with model_server(script(policy)) as server:
        config = config_for(server, None, "localizer", "json", max_actions_per_turn=4)
        result, steps = await run(config, page)
    assert result.success
    assert [a.outcome for a in steps[0].actions][1:] == [
        "failed: no element takes clicks there",
        "not carried out: the action before it failed",
    ]
    assert steps[0].error == "no element takes clicks there"
    assert steps[1].actions[1].outcome == "not carried out: the page changed (now at http://127.0.0.1:9/next)"
    assert [a.outcome for a in steps[2].actions] == ["ok", "ok"]  # nothing changed: both carried out
    assert [c[0] for c in page.calls[1:]] == ["write", "click", "goto", "write", "click"]


async def test_one_action_a_turn_asks_for_one_and_carries_out_one(model_server: ServerFactory) -> None:
    policy = [{"when": {"step": 1}, "actions": SEVERAL}, {"action": {"action": "answer", "content": "42"}}]
    page = FakePage()
    async with model_server(script(policy)) as server:
        _, steps = await run(config_for(server, None, "localizer", "json"), page)
        first = next(r for r in server.requests if r.role == "policy")
    assert "actions" not in first.extra["response_format"]["json_schema"]["schema"]["properties"]
    assert [c[0] for c in page.calls[1:]] == ["write"] and steps[0].actions == [] and page.watched == 0


async def test_tabs_are_listed_when_there_are_several_and_a_hover_that_changed_the_page_is_told(
    model_server: ServerFactory,
) -> None:
    policy = [
        {"when": {"step": 1}, "action": {"action": "hover_element", "element": "big button"}},
        {"when": {"step": 2}, "action": {"action": "hover_element", "element": "big button"}},
        {"action": {"action": "answer", "content": "42"}},
    ]
    page = FakePage()
    page.open_tabs = [
        Tab(index=0, title="Orders", url="http://127.0.0.1:1/start"),
        Tab(index=1, title="Coupon", url="http://127.0.0.1:1/coupon", current=True),
    ]
    page.changing = True  # the first hover opens something
    async with model_server(script(policy)) as server:
        config = config_for(server, None, "localizer", "json", context="window")
        _, steps = await run(config, page)
        turns = [r.turn for r in server.requests if r.role == "policy"]
        page.changing = False
    assert "Open tabs (by index):\n- 0: Orders (http://127.0.0.1:1/start)\n- 1: Coupon" in turns[0]
    assert "<- current" in turns[0]
    assert steps[1].context is not None and steps[1].context.policy is not None
    assert steps[1].context.policy.tabs[1].current
    assert 'Your last action (hover_element "big button") changed the page' in turns[1]


async def test_a_step_of_several_actions_and_a_drag_replay_from_the_cache(
    model_server: ServerFactory, tmp_path: Path
) -> None:
    policy = [
        {"when": {"step": 1}, "actions": SEVERAL},
        {"when": {"step": 2}, "action": HANDS[4]},  # the drag
        {"action": {"action": "answer", "content": "42"}},
    ]
    path = tmp_path / "cache.json"
    async with model_server(script(policy)) as server:
        config = config_for(server, None, "localizer", "json", max_actions_per_turn=3)
        first_page = FakePage()
        first_page.restructuring = {"click"}  # the third action is not carried out: not recorded either
        cache = ReplayCache(path)
        replay = cache.replay_for("check", goal=GOAL)
        first, _ = await run(config, first_page, replay=replay)
        assert first.success and cache.update("check", replay, url="http://127.0.0.1:1/start", goal=GOAL)
        recorded = len(server.requests)
        page = FakePage()
        again, steps = await run(config, page, replay=ReplayCache(path).replay_for("check", goal=GOAL))
        assert len(server.requests) == recorded  # zero model calls
    assert again.success and [s.replayed for s in steps] == [True, True, True]
    assert page.calls == first_page.calls  # the same actions at the same points, a drag's two included
    assert [c[0] for c in page.calls[1:]] == ["write", "click", "drag"]
    # Planned: 3 policy calls, 2 + 2 localizer calls (a list's two placed actions, a drag's two points), 1 validator.
    assert again.calls_saved == 8
