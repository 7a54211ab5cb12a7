"""gymnasium: the webagent/ environments pass gymnasium's own env checker with their default arguments."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import webagent.env.gym  # noqa: F401  (registers the webagent/ environments)
from webagent.env.gym import KINDS, AsyncWebGymEnv
from webagent.testing.miniwob import PLAN

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("env_id", ["webagent/MiniWoB-v0", "webagent/miniwob.click-button-v0"])
def test_gymnasium_s_checker_passes(env_id: str) -> None:
    env = gymnasium.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=False)
    finally:
        env.close()


def test_registered_ids_cover_every_miniwob_task() -> None:
    ids = [i for i in gymnasium.registry if i.startswith("webagent/")]
    assert "webagent/MiniWoB-v0" in ids and "webagent/miniwob.click-checkboxes-v0" in ids and len(ids) > 100


def test_points_and_text_solve_a_task_through_the_sync_api() -> None:
    env = gymnasium.make("webagent/miniwob.enter-text-v0")
    try:
        obs, info = env.reset(seed=4)
        assert obs in env.observation_space and obs["goal"] == info["goal"]
        assert obs["screenshot"].shape == env.observation_space["screenshot"].shape
        inner = env.unwrapped.inner
        session = inner.env.session
        assert session is not None
        planned = inner_run(env, session.page.evaluate(PLAN))
        frame = inner.last.screenshot.frame
        kinds = {"type": KINDS.index("type"), "click": KINDS.index("click")}
        for action in planned:
            point = np.array(frame.to_image(action["x"], action["y"]), dtype=np.float32)
            obs, reward, terminated, truncated, info = env.step(
                {"kind": kinds[action["kind"]], "point": point, "text": action.get("text") or ""}
            )
        assert (reward, terminated, truncated) == (1.0, True, False), info
        assert info["stop_reason"] == "answered" and info["task"]["raw_reward"] > 0
    finally:
        env.close()


def inner_run(env: gymnasium.Env, work: object) -> list[dict]:
    return env.unwrapped._run(work)  # the page belongs to the environment's own loop


async def test_the_async_form_awaits_on_the_caller_s_loop() -> None:
    env = AsyncWebGymEnv("miniwob/click-test")
    try:
        obs, info = await env.reset(seed=1)
        assert obs in env.observation_space and info["seed"] == 1
        obs, reward, terminated, truncated, info = await env.step({"kind": KINDS.index("scroll"), "text": "down"})
        assert (reward, terminated, truncated) == (0.0, False, False) and info["outcome"] == "ok"
    finally:
        await env.close()
