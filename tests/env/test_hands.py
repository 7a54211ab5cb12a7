"""The new hands through WebEnv: the caller's points (a drag's two), replies in each contract form,
grounded and not, and bad input told as a failed step or a one-line error."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from playwright.async_api import Browser

from webagent import Agent, ConfigError, WebEnv
from webagent.env.gym import AsyncWebGymEnv
from webagent.env.openenv import WebAction, WebagentEnvironment
from webagent.testing.hands import HAND_TASKS, HandTask
from webagent.testing.offline import offline_config
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, make_config

pytestmark = pytest.mark.browser


def points(task: HandTask, act: dict[str, Any], frame: Any) -> tuple[Any, Any]:
    """The caller's points of a planned action, in pixels of the screenshot."""
    point = frame.to_image(*task.elements[act["element"]]) if act.get("element") else None
    to = frame.to_image(*task.elements[act["target"]]) if act.get("target") else None
    return point, to


@pytest.mark.parametrize("name", list(HAND_TASKS))
async def test_each_hand_with_the_caller_s_points_asks_no_localizer(
    browser: Browser, model_server: ServerFactory, site: SiteServer, name: str
) -> None:
    task = HAND_TASKS[name]
    site.hand_events.clear()
    async with model_server(task.script()) as server:
        async with Agent(make_config(server), browser=browser) as agent, WebEnv(agent=agent) as env:
            obs, _ = await env.reset({"url": task.url(site.url), "goal": task.goal})
            for act in task.steps:
                point, to = points(task, act, obs.screenshot.frame)
                obs, reward, done, truncated, info = await env.step(act, point=point, to_point=to)
                assert info["error"] is None, info
            assert (reward, done, truncated) == (1.0, True, False)
        assert server.request_counts["localizer"] == 0
    assert any(all(e.get(k) == v or k == "types" for k, v in task.event.items()) for e in site.hand_events)


@pytest.mark.parametrize("name", list(HAND_TASKS))
async def test_each_hand_through_gymnasium_s_reply_form(
    browser: Browser, model_server: ServerFactory, site: SiteServer, name: str
) -> None:
    """The gym adapter takes webagent's action JSON with its points (a drag's release at to_point),
    numpy arrays as a gym policy hands them."""
    task = HAND_TASKS[name]
    site.hand_events.clear()
    async with model_server(task.script()) as server:
        async with Agent(make_config(server), browser=browser) as agent:
            env = AsyncWebGymEnv({"url": task.url(site.url), "goal": task.goal}, agent=agent, reward="validator")
            try:
                await env.reset(seed=None)
                for act in task.steps:
                    assert env.last is not None
                    point, to = points(task, act, env.last.screenshot.frame)
                    given = {"reply": {"action": act}}
                    given |= {"point": np.array(point, dtype=np.float32)} if point is not None else {}
                    given |= {"to_point": np.array(to, dtype=np.float32)} if to is not None else {}
                    _, reward, done, truncated, info = await env.step(given)
                    assert info["error"] is None, info
                assert (reward, done, truncated) == (1.0, True, False)
            finally:
                await env.close()
        assert server.request_counts["localizer"] == 0
    assert any(all(e.get(k) == v or k == "types" for k, v in task.event.items()) for e in site.hand_events)


BOARD = HAND_TASKS["board-card"]


def drag_reply(form: str, frame: Any) -> Any:
    """The board's drag as a policy would write it in ``form``, its points in [0, 1000]."""
    (x, y), (tx, ty) = BOARD.elements["Write report card"], BOARD.elements["Done column"]
    norm = {"x": round(x * 1000 / 1280), "y": round(y * 1000 / 800), "to_x": round(tx * 1000 / 1280)}
    norm["to_y"] = round(ty * 1000 / 800)
    arguments = {"element": "Write report card", "target": "Done column", **norm}
    if form == "tool_call":
        return json.dumps({"note": None, "thought": "drag it", "tool_call": {"tool_name": "drag", **arguments}})
    return {"id": "call_1", "type": "function", "function": {"name": "drag", "arguments": json.dumps(arguments)}}


@pytest.mark.parametrize(("family", "form"), [("holo3", "tool_call"), ("holo3.1", "tools")])
async def test_a_grounded_drag_in_h_s_forms(
    browser: Browser, model_server: ServerFactory, site: SiteServer, family: str, form: str
) -> None:
    async with model_server(BOARD.script()) as server:
        config = offline_config(server.url, "holo1.5", family=family, grounding="policy")
        config.policy.output = "tools" if form == "tools" else "json"
        async with Agent(config, browser=browser) as agent, WebEnv(agent=agent) as env:
            obs, _ = await env.reset({"url": BOARD.url(site.url), "goal": BOARD.goal})
            obs, _, _, _, info = await env.step(drag_reply(form, obs.screenshot.frame))
            assert "moved into another container" in info["outcome"], info
            step = info["step"]
            assert step.target_point is not None and step.target_point.viewport == pytest.approx((950, 400), abs=2)
        assert server.request_counts["localizer"] == 0


async def test_without_points_the_localizer_places_both_of_a_drag(
    browser: Browser, model_server: ServerFactory, site: SiteServer
) -> None:
    async with model_server(BOARD.script()) as server:
        async with Agent(make_config(server), browser=browser) as agent, WebEnv(agent=agent) as env:
            await env.reset({"url": BOARD.url(site.url), "goal": BOARD.goal})
            _, _, _, _, info = await env.step(BOARD.steps[0])
            assert "moved into another container" in info["outcome"]
        assert server.request_counts["localizer"] == 2


async def test_bad_input_is_a_failed_step_or_a_one_line_error(
    browser: Browser, model_server: ServerFactory, site: SiteServer
) -> None:
    async with model_server(BOARD.script()) as server:
        config = make_config(server)
        config.localizer.base_url = None  # the caller places every point
        async with Agent(config, browser=browser, require=("policy", "validator")) as agent, WebEnv(agent=agent) as env:
            obs, _ = await env.reset({"url": BOARD.url(site.url), "goal": BOARD.goal})
            frame = obs.screenshot.frame
            card = frame.to_image(*BOARD.elements["Write report card"])
            told = []
            for action, kwargs in [
                ({"action": "fly_to", "element": "x"}, {}),
                ({"action": "drag_element", "element": "Write report card"}, {"point": card}),
                ({"action": "switch_tab", "index": 3}, {}),
                ({"action": "close_tab", "index": 0}, {}),
                (BOARD.steps[0], {"point": card, "to_point": (frame.image_width + 40, 10)}),
            ]:
                _, _, done, truncated, info = await env.step(action, **kwargs)
                assert not done and not truncated and "\n" not in info["error"]
                told.append(info["error"])
            assert told[0].startswith("'fly_to' is not one of the actions (click_element, ")
            assert told[1] == "the drag_element action is not valid (target: Field required)"
            assert told[2] == "there is no tab 3: there are only tab 0"
            assert told[3] == "close_tab refused: it is the only tab open (use goto to leave this page)"
            assert "outside the" in told[4]
            with pytest.raises(ConfigError, match=r"pass point=\(x, y\) and to_point=\(x, y\) to step\(\)"):
                await env.step(BOARD.steps[0], point=card)


async def test_openenv_s_action_carries_a_drag_s_release_point(
    browser: Browser, model_server: ServerFactory, site: SiteServer
) -> None:
    async with model_server(BOARD.script()) as server:
        config = make_config(server)
        config.browser.allowed_domains = [f"127.0.0.1:{site.port}"]  # a client's local start: the operator's leave
        agent = Agent(config, browser=browser)
        env = WebagentEnvironment(agent, reward="validator")
        try:
            obs = await env.reset_async(task={"url": BOARD.url(site.url), "goal": BOARD.goal})
            scale = (obs.image_size[0] / 1280, obs.image_size[1] / 800)
            (x, y), (tx, ty) = BOARD.elements["Write report card"], BOARD.elements["Done column"]
            action = WebAction(
                action=BOARD.steps[0], point=(x * scale[0], y * scale[1]), to_point=(tx * scale[0], ty * scale[1])
            )
            obs = await env.step_async(action)
            assert "moved into another container" in obs.outcome and obs.error is None
        finally:
            await env.env.aclose()
            await agent.aclose()
        assert server.request_counts["localizer"] == 0
