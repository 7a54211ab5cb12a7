"""gymnasium: every webagent/ environment passes gymnasium's own env checker (its seeded resets repeat,
animated pages included): with its default arguments (a browser of its own), and every registered id
on one shared browser (``GymRuntime``), which is what makes ~130 checks cheap enough for every run."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import webagent.env.gym  # noqa: F401  (registers the webagent/ environments)
from webagent.env.gym import KINDS, AsyncWebGymEnv, GymRuntime, miniwob_config
from webagent.errors import ConfigError
from webagent.testing.miniwob import PLAN

pytestmark = pytest.mark.browser


#: Every registered id: an animated page (chase-circle) must be as repeatable under a seed as a still one.
IDS = sorted(i for i in gymnasium.registry if i.startswith("webagent/"))


@pytest.fixture(scope="module")
def shared() -> Iterator[GymRuntime]:
    with GymRuntime() as runtime:
        yield runtime


@pytest.mark.parametrize("env_id", ["webagent/MiniWoB-v0", "webagent/miniwob.chase-circle-v0"])
def test_gymnasium_s_checker_passes_with_the_default_arguments(env_id: str) -> None:
    env = gymnasium.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=False)
    finally:
        env.close()


@pytest.mark.slow  # ~130 ids: a few seconds each (check_env resets each ~17 times), minutes in all
@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_s_checker_passes_on_every_id(env_id: str, shared: GymRuntime) -> None:
    # check_env's own env.spec.make() (its render and close checks) gets the same runtime.
    env = gymnasium.make(env_id, runtime=shared)
    try:
        check_env(env.unwrapped, skip_render_check=False)
    finally:
        env.close()


def test_a_runtime_s_environments_share_its_browser(shared: GymRuntime) -> None:
    envs = [gymnasium.make(env_id, runtime=shared) for env_id in IDS[:3]]
    try:
        for env in envs:
            obs, _ = env.reset(seed=2)
            assert obs in env.observation_space
        assert shared.agent.browsers.browsers == 1 and shared.agent.browsers.open_sessions >= 3
    finally:
        for env in envs:
            env.close()
    assert shared.agent.browsers.open_sessions == 0  # each closed its episode's context ...
    env = gymnasium.make(IDS[0], runtime=shared)  # ... and left the runtime running
    try:
        env.reset(seed=3)
    finally:
        env.close()
    assert copy.deepcopy(shared) is shared and copy.copy(shared) is shared  # a spec's copy shares it
    with pytest.raises(ConfigError, match="a config or a shared runtime"):
        gymnasium.make(IDS[0], runtime=shared, config=miniwob_config())


def test_registered_ids_cover_every_miniwob_task() -> None:
    assert "webagent/MiniWoB-v0" in IDS and "webagent/miniwob.chase-circle-v0" in IDS and len(IDS) > 100


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
