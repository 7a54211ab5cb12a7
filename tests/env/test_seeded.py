"""A seeded reset is repeatable: the page's clock (``Date``, ``performance.now``, timers, animation
frames) starts at the seed's time, paused, and runs a fixed step at a time; ``Math.random`` is seeded.
So an animated page shows the same first frame for the same seed, and the same actions give the same
episode; a web task with a seed too. (gymnasium's own checker covers every registered id in
test_gym.py; the OpenEnv server's seeded resets are in test_server_input.py.)"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import Browser

from webagent import Agent, AgentConfig, WebEnv
from webagent.env import Observation
from webagent.env.clock import STEP_MS, seeded_time
from webagent.testing.sites import SiteServer

pytestmark = pytest.mark.browser

ANIMATED = """<!doctype html><html><head><title>Animated</title></head><body style="margin:0;font:16px monospace">
<div id="date"></div><div id="random"></div><div id="later"></div>
<div id="box" style="position:absolute;top:120px;left:0;width:40px;height:40px;background:#c00"></div>
<script>
document.getElementById("date").textContent = new Date().toISOString() + " " + performance.now();
document.getElementById("random").textContent = Math.random() + " " + Math.random();
const box = document.getElementById("box");
const frame = (t) => { box.style.left = (t / 4) % 400 + "px"; requestAnimationFrame(frame); };
requestAnimationFrame(frame);
setInterval(() => { document.getElementById("later").textContent = Date.now() % 100000 + " " + Math.random(); }, 70);
</script></body></html>"""


def shot(obs: Observation) -> str:
    return hashlib.sha256(obs.screenshot.data()).hexdigest()


@pytest.fixture(scope="module")
def animated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("animated")
    (root / "index.html").write_text(ANIMATED)
    with SiteServer(root) as server:
        yield f"{server.url}/index.html"


async def test_an_animated_benchmark_page_repeats_for_its_seed(browser: Browser) -> None:
    async with Agent(AgentConfig(), browser=browser, require=()) as agent, WebEnv(agent=agent, reward="task") as env:

        async def episode(seed: int) -> list[str]:
            obs, _ = await env.reset("miniwob/chase-circle", seed=seed)
            shots = [shot(obs)]
            for point in ((60.0, 100.0), (90.0, 120.0)):
                obs, *_ = await env.step({"action": "click_element", "element": "there"}, point=point)
                shots.append(shot(obs))
            return shots

        first, again, other = await episode(123), await episode(123), await episode(124)
        assert first == again  # the first frame and each step's
        assert len(set(first)) == 3  # the circle moves between steps: the page's time runs
        assert other[0] != first[0]


async def test_a_seeded_step_is_observed_after_the_page_s_time_has_run(browser: Browser, animated: str) -> None:
    """A click's settle takes the next screenshot ahead (right after the input); the page's time then
    runs a step: the observation must show the page after it, as a screenshot taken afresh does, not
    the one taken ahead (which raced the clock and made a seed's episode differ under load)."""
    task = {"url": animated, "goal": "Read the page", "reference": ["x"]}
    async with (
        Agent(AgentConfig(), browser=browser, require=()) as agent,
        WebEnv(agent=agent, reward="reference") as env,
    ):
        await env.reset(task, seed=5)
        session = env.session
        assert session is not None
        for point in ((60.0, 100.0), (90.0, 120.0)):
            obs, *_ = await env.step({"action": "click_element", "element": "there"}, point=point)
            again = await session.screenshot(obs.screenshot.frame)  # the page's clock is paused: same page
            assert shot(obs) == hashlib.sha256(again.data()).hexdigest()
        assert session.prefetched_shots == 0


async def test_a_seeded_web_task_repeats_and_shows_its_seed_s_time(browser: Browser, animated: str) -> None:
    task = {"url": animated, "goal": "Read the page", "reference": ["x"]}
    async with (
        Agent(AgentConfig(), browser=browser, require=()) as agent,
        WebEnv(agent=agent, reward="reference") as env,
    ):

        async def start(seed: int | None) -> tuple[str, str]:
            obs, info = await env.reset(task, seed=seed)
            assert info["seed"] == seed and env.session is not None
            shown = await env.session.page.evaluate("document.body.innerText")
            return shot(obs), shown

        (first, text), (again, text_again), (other, _) = await start(7), await start(7), await start(8)
        assert first == again and text == text_again and other != first
        start_time = (
            datetime.fromtimestamp(seeded_time(7), UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        )
        assert text.startswith(f"{start_time} 0\n")  # Date and performance.now from the seed, paused at load
        # The 70 ms interval ran through the first step's STEP_MS of page time, and no further.
        last_tick = seeded_time(7) * 1000 + STEP_MS - STEP_MS % 70
        assert text.splitlines()[2].split()[0] == str(last_tick % 100000), text
        _, unseeded = await start(None)
        assert unseeded.split()[0][:4] != "2024"  # no seed: the page keeps real time
