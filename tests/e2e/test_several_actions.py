"""Several actions a turn end to end: a six-field form filled in fewer model requests in every
contract, and a list stopped at the first action that changes the page (real Chromium)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser

from webagent import Agent
from webagent.testing.hands import HAND_TASKS, SIGNUP, SIGNUP_PLAN, plan_script
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory
from .test_hands import CONTRACTS, config_for

pytestmark = pytest.mark.e2e


def signup_script(per_turn: int) -> dict[str, Any]:
    return plan_script(
        SIGNUP.goal, SIGNUP_PLAN, SIGNUP.elements, marker=SIGNUP.marker, answer=SIGNUP.answer, per_turn=per_turn
    )


@pytest.mark.parametrize(("family", "grounding", "output"), CONTRACTS)
async def test_a_form_is_filled_in_three_requests_with_four_actions_a_turn(
    browser: Browser, model_server: ServerFactory, site: SiteServer, family: str | None, grounding: str, output: str
) -> None:
    counts = {}
    for per_turn in (1, 4):
        site.hand_events.clear()
        async with model_server(signup_script(per_turn)) as server:
            config = config_for(server, family, grounding, output, max_actions_per_turn=per_turn)
            async with Agent(config, browser=browser) as agent:
                stream = agent.stream(SIGNUP.url(site.url), SIGNUP.goal)
                steps = [step async for step in stream]
            assert stream.result is not None and stream.result.success, stream.result
            counts[per_turn] = len([r for r in server.requests if r.role == "policy"])
        event = next(e for e in site.hand_events if e["page"] == "signup")
        assert (event["first"], event["email"], event["zip"]) == ("Ada", "ada@example.com", "NW1 6XE")
    # 6 fields, the button, the answer: 8 requests one at a time; [4], [2 + the button], [answer] at 4.
    # (A judge in the policy's conversation adds none: it is the validator's request.)
    assert counts == {1: 8, 4: 3}, counts
    assert [len(s.actions) for s in steps] == [4, 3, 0]
    assert all(a.outcome.startswith("ok") for s in steps for a in s.actions)


async def test_a_list_stops_at_the_first_action_that_adds_elements_or_opens_a_tab(
    browser: Browser, model_server: ServerFactory, site: SiteServer
) -> None:
    grid, coupon = HAND_TASKS["grid-cell"], HAND_TASKS["coupon-tab"]
    dblclick, write = grid.steps[0], grid.steps[1]
    scripts = [
        plan_script(
            grid.goal, [dblclick, write, grid.steps[2]], grid.elements, marker=grid.marker, answer="x", per_turn=2
        ),
        plan_script(
            coupon.goal, coupon.steps[:1] + coupon.steps[2:3], coupon.elements, marker="none", answer="x", per_turn=2
        ),
    ]
    script = scripts[0]
    script["elements"].update(scripts[1]["elements"])
    script["tasks"].append({**scripts[1]["tasks"][0], "id": "coupon"})
    async with model_server(script) as server:
        config = config_for(server, None, "localizer", "json", max_actions_per_turn=2, max_steps=3)
        async with Agent(config, browser=browser) as agent:
            grid_steps = [s async for s in agent.stream(grid.url(site.url), grid.goal)]
            coupon_steps = [s async for s in agent.stream(coupon.url(site.url), coupon.goal)]
    # The double-click put an input into the cell: the write after it waited for the next look.
    first = grid_steps[0].actions
    assert [a.outcome for a in first] == ["ok", "not carried out: the page changed (elements were added or removed)"]
    # The link opened the coupon in a new tab (followed): the write did not go to the new page blind.
    first = coupon_steps[0].actions
    assert first[0].outcome.startswith("ok, now at") and first[1].outcome.startswith(
        "not carried out: the page changed"
    )
    assert any("A new tab opened" in e for e in coupon_steps[1].events)
