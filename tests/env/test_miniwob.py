"""MiniWoB++ with its own rewards: the package's pages served locally, seeded, the reward read from the page."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser

from webagent import Agent, AgentConfig, InputError
from webagent.env import WebEnv
from webagent.tasks import MiniWoBTasks, benchmark_task
from webagent.testing.miniwob import PLAN, PLANNED_TASKS, WRONG, env_action

pytestmark = pytest.mark.browser


async def play(env: WebEnv, plan: str) -> tuple[float, bool, bool, dict[str, Any], int]:
    """Run the scripted plan to the episode's end: (reward, terminated, truncated, info, steps)."""
    assert env.session is not None and env.lease is not None
    planned = await env.session.page.evaluate(plan)
    assert planned, "the plan found nothing to do"
    obs = None
    for n, action in enumerate(planned, start=1):
        assert env.observation is not None
        frame = env.observation.screenshot.frame
        obs, reward, terminated, truncated, info = await env.step(
            env_action(action), point=frame.to_image(action["x"], action["y"])
        )
        if terminated or truncated:
            return reward, terminated, truncated, info, n
    raise AssertionError(f"the episode did not end after the plan's {len(planned)} actions ({obs})")


@pytest.mark.parametrize("name", PLANNED_TASKS)
async def test_the_page_rewards_the_right_actions_and_ends_the_episode(browser: Browser, name: str) -> None:
    async with Agent(AgentConfig(), browser=browser, require=()) as agent, WebEnv(agent=agent, reward="task") as env:
        obs, info = await env.reset(f"miniwob/{name}", seed=11)
        assert info == {"task_id": f"miniwob/{name}", "seed": 11, "goal": obs.goal, "setup_reruns": 0} and obs.goal
        assert obs.goal in obs.messages[-1]["content"][0]["text"]  # the policy is told the page's goal
        reward, terminated, truncated, info, _ = await play(env, PLAN)
        assert (reward, terminated, truncated) == (1.0, True, False), info
        assert info["task"]["raw_reward"] > 0 and info["result"].success and info["result"].reward == 1.0
        assert info["result"].stop_reason == "answered" and env.done

        await env.reset(f"miniwob/{name}", seed=11)
        reward, terminated, truncated, info, _ = await play(env, WRONG)
        assert (reward, terminated, truncated) == (0.0, True, False), info
        assert info["task"]["raw_reward"] <= 0 and not info["result"].success and info["result"].reward == 0.0


async def test_a_seed_gives_the_same_page_and_the_page_s_own_clock_does_not_end_it(browser: Browser) -> None:
    async with Agent(AgentConfig(), browser=browser, require=()) as agent, WebEnv(agent=agent, reward="task") as env:
        goals = []
        for seed in (5, 5, 6):
            obs, _ = await env.reset("miniwob/click-button", seed=seed)
            goals.append(obs.goal)
            assert env.session is not None
            assert await env.session.page.evaluate("core.EPISODE_MAX_TIME") == 1_000_000
        assert goals[0] == goals[1]
        # A step that does not end the task: the episode goes on, no reward yet.
        _, reward, terminated, truncated, info = await env.step({"action": "scroll", "direction": "down"})
        assert (reward, terminated, truncated) == (0.0, False, False) and info["task"]["raw_reward"] == 0.0


async def test_task_names_and_their_errors() -> None:
    assert {"click-button", "click-link", "enter-text", "choose-list", "click-checkboxes"} <= set(
        MiniWoBTasks().names()
    )
    task = benchmark_task("miniwob/click-test", seed=3)
    assert task.url.endswith("/miniwob/click-test.html") and task.url.startswith("http://127.0.0.1:")
    with pytest.raises(InputError, match="no MiniWoB"):
        benchmark_task("miniwob/no-such-task")
    with pytest.raises(InputError, match="no task set named 'webarena'"):
        benchmark_task("webarena/1")
    with pytest.raises(InputError, match="'<set>/<task>'"):
        benchmark_task("click-button")
    with pytest.raises(InputError, match="benchmark task"):
        await WebEnv(AgentConfig(), reward="task").reset({"url": "https://example.com", "goal": "x"})
