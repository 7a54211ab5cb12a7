"""WebEnv: reset/step/reward on the local tasks with real Chromium and the offline model server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser
from pydantic import SecretStr

from webagent import Agent, ConfigError, InputError, WebEnv
from webagent.env import shared_agent
from webagent.families import DEFAULT_PROFILE
from webagent.testing.offline import offline_config
from webagent.testing.server import FakeModelServer
from webagent.training.export import ExportOptions, RunRef, export_sft

from ..conftest import ServerFactory, load_task_script, make_config

pytestmark = pytest.mark.browser

WRITE = {"action": "write_element", "element": "catalog search box", "content": "blue widget", "press_enter": True}
CLICK = {"action": "click_element", "element": "first search result"}


def agent_for(server: FakeModelServer, browser: Browser, **settings: Any) -> Agent:
    return Agent(make_config(server, **settings), browser=browser)


def shown(obs: Any) -> str:
    """Every text the policy request holds after the system message (its turns and replies)."""
    out: list[str] = []
    for message in obs.messages[1:]:
        content = message["content"]
        parts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
        out.extend(parts)
    return "\n".join(out)


def images(obs: Any) -> int:
    return sum(
        1 for m in obs.messages if not isinstance(m["content"], str) for p in m["content"] if p["type"] == "image_url"
    )


async def test_reset_and_step_to_a_validated_answer(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server:
        agent = agent_for(server, browser)
        env = WebEnv(agent=agent)
        obs, _ = await env.reset(task, output_dir=tmp_path / "run")
        assert obs.step == 1 and obs.url.endswith("/catalog/") and obs.title and not obs.final
        system, user = obs.messages
        assert system["role"] == "system" and "Reply with one JSON object" in system["content"]
        assert task["goal"] in user["content"][0]["text"]
        assert user["content"][1]["image_url"]["url"] == obs.screenshot.data_url
        obs, reward, done, truncated, info = await env.step({"note": "home", "thought": "search", "action": WRITE})
        assert not truncated
        assert (reward, done, info["outcome"]) == (0.0, False, "ok, now at " + obs.url)
        assert "/catalog/search" in obs.url and obs.step == 2 and images(obs) == 2
        assert "home" in shown(obs)  # the note is shown, as in the agent
        obs, reward, done, truncated, info = await env.step(json.dumps({"action": CLICK}))  # the reply text works too
        assert "/catalog/product/" in obs.url and not done
        obs, reward, done, truncated, info = await env.step({"action": "answer", "content": "$12.50"})
        assert not truncated
        assert (reward, done) == (1.0, True)
        assert info["verdict"].success and info["result"].success and info["result"].steps == 3
        assert server.request_counts == {"policy": 0, "localizer": 2, "validator": 1}
        with pytest.raises(InputError, match="reset"):
            await env.step(CLICK)
        await env.aclose()
        await agent.aclose()
    # The rollout is a run directory like the agent's: it exports (no policy call: the caller is the policy).
    stats = export_sft([RunRef(tmp_path / "run", "catalog-price")], tmp_path / "export", ExportOptions())
    assert stats.records == 3 and stats.skipped_steps == 0


async def test_points_from_the_caller_skip_the_localizer(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server:
        async with agent_for(server, browser) as agent, WebEnv(agent=agent) as env:
            obs, _ = await env.reset(task)
            frame = obs.screenshot.frame
            obs, *_ = await env.step(WRITE, point=frame.to_image(560, 128))
            assert "/catalog/search" in obs.url
            obs, _, done, truncated, info = await env.step(CLICK, point=(frame.image_width + 5, 10))
            assert not done and "outside" in info["error"] and not truncated
            assert "(no valid action)" in shown(obs)
            obs, *_ = await env.step(CLICK, point=frame.to_image(650, 242))
            assert "/catalog/product/" in obs.url
        assert server.request_counts["localizer"] == 0


async def test_reference_reward_without_a_validator(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = {**local_tasks["catalog-price"], "reference": ["12.50"]}
    async with model_server(load_task_script("catalog-price")) as server:
        config = make_config(server, max_attempts=2)
        config.validator.base_url = None
        with pytest.raises(ConfigError, match="validator"):
            WebEnv(config)
        async with WebEnv(agent=Agent(config, browser=browser, require=()), reward="reference") as env:
            await env.reset(task)
            obs, reward, done, truncated, info = await env.step({"action": "answer", "content": "$13"})
            assert (reward, done, info["reference_match"]) == (0.0, False, False)
            assert "not the expected one" in shown(obs)  # the feedback is shown
            obs, reward, done, truncated, info = await env.step({"action": "answer", "content": "It costs $12.50"})
            assert not truncated
            assert (reward, done, info["reference_match"]) == (1.0, True, True)
            with pytest.raises(InputError, match="reference"):
                await env.reset(local_tasks["catalog-price"])
        assert server.request_counts["validator"] == 0


async def test_both_rewards_need_the_validator_and_the_reference(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    # The validator accepts "$12.50" on the product page; the reference here wants something else.
    task = {**local_tasks["catalog-price"], "reference": ["twelve fifty"]}
    async with (
        model_server(load_task_script("catalog-price")) as server,
        agent_for(server, browser) as agent,
        WebEnv(agent=agent, reward="both") as env,
    ):
        await env.reset(task)
        await env.step(WRITE)
        await env.step(CLICK)
        _, reward, done, truncated, info = await env.step({"action": "answer", "content": "$12.50"})
    assert not truncated
    assert done and info["verdict"].success and info["reference_match"] is False and reward == 0.0


async def test_unusable_actions_and_the_final_step(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    async with (
        model_server(load_task_script("catalog-price")) as server,
        agent_for(server, browser, max_steps=3) as agent,
        WebEnv(agent=agent) as env,
    ):
        await env.reset(local_tasks["catalog-price"])
        obs, reward, done, truncated, info = await env.step("Sure! Let me click {")
        assert (reward, done) == (0.0, False) and "not valid JSON" in info["error"]
        obs, reward, done, truncated, info = await env.step({"action": {"action": "fly"}})
        assert not done and obs.final and "FINAL STEP" in shown(obs)
        obs, reward, done, truncated, info = await env.step({"action": "scroll", "direction": "down"})
        # Out of steps: no verdict, so truncated (gymnasium's time limit), not a failure of the environment.
        assert (reward, done, truncated) == (0.0, False, True)
        assert info["truncated_by"] == "max_steps" and info["failure"] is None
        assert info["outcome"] == "no answer given at the final step"
        assert info["result"].stop_reason == "max_steps" and env.done


async def test_an_accepted_answer_at_the_final_step_is_rewarded(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    async with (
        model_server(load_task_script("catalog-price")) as server,
        agent_for(server, browser, max_steps=3) as agent,
        WebEnv(agent=agent) as env,
    ):
        await env.reset(local_tasks["catalog-price"])
        await env.step(WRITE)
        obs, *_ = await env.step(CLICK)
        assert obs.final
        obs, reward, done, truncated, info = await env.step({"action": "answer", "content": "$12.50"})
    assert (reward, done, truncated) == (1.0, True, False) and info["result"].success
    assert info["result"].stop_reason == "max_steps"  # the last step allowed, and its answer accepted


async def test_the_policy_s_thinking_time_is_not_the_run_s(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    """max_time_s bounds the agent's own time: a policy outside the process that takes longer than
    that to decide does not end the run (nor make its next step the final one)."""
    async with (
        model_server(load_task_script("catalog-price")) as server,
        agent_for(server, browser, max_time_s=6.0) as agent,  # room for a loaded machine
        WebEnv(agent=agent) as env,
    ):
        await env.reset(local_tasks["catalog-price"])
        await asyncio.sleep(6.5)  # the policy thinks
        obs, _, done, truncated, info = await env.step(WRITE)
        assert not done and not obs.final and info["error"] is None, info
        await asyncio.sleep(6.5)
        obs, _, done, truncated, _ = await env.step(CLICK)
        assert not done and not obs.final
        obs, reward, done, truncated, info = await env.step({"action": "answer", "content": "$12.50"})
    assert not truncated
    assert (reward, done) == (1.0, True) and info["result"].stop_reason == "answered"


async def test_many_environments_share_one_browser_pool(
    model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server:
        agent = shared_agent(make_config(server))
        envs = [WebEnv(agent=agent) for _ in range(3)]
        try:
            await asyncio.gather(*(env.reset(task) for env in envs))
            for action in (WRITE, CLICK, {"action": "answer", "content": "$12.50"}):
                results = await asyncio.gather(*(env.step(action) for env in envs))
            assert [r[1:4] for r in results] == [(1.0, True, False)] * 3
            assert agent.browsers.launched == 1
        finally:
            for env in envs:
                await env.aclose()
            await agent.aclose()


async def test_env_runs_guarded_and_types_secrets_without_writing_them(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    task = local_tasks["catalog-price"]
    value = "widget-s3cr3t-value"
    async with model_server(load_task_script("catalog-price")) as server:
        config = make_config(server)
        config.secrets = {"QUERY": SecretStr(value)}
        # An environment's start is its caller's, not the operator's: the secret's host is given.
        config.secret_hosts = {"QUERY": [task["url"].split("/")[2]]}
        async with Agent(config, browser=browser) as agent, WebEnv(agent=agent) as env:
            obs, _ = await env.reset(task, output_dir=tmp_path / "run")
            assert "{{QUERY}}" in shown(obs)  # the policy is told the name only
            obs, *_ = await env.step({**WRITE, "content": "{{QUERY}}"})
            assert obs.url.endswith("/catalog/search?q={{QUERY}}")  # what the policy sees
            assert env.session is not None and env.session.url.endswith(f"?q={value}")  # what was typed
        blocked = config.model_copy(deep=True)
        blocked.browser.allowed_domains = ["example.com"]
        async with Agent(blocked, browser=browser) as agent, WebEnv(agent=agent) as env:
            with pytest.raises(Exception, match="not in allowed_domains"):
                await env.reset(task)
    written = b"".join(p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert b"{{QUERY}}" in written and value.encode() not in written


async def test_the_run_budget_ends_an_episode(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    async with model_server(load_task_script("catalog-price")) as server:
        async with agent_for(server, browser, budget_calls=1) as agent, WebEnv(agent=agent) as env:
            await env.reset(local_tasks["catalog-price"])
            _, _, done, truncated, _ = await env.step(WRITE)  # one localizer call: the budget's only one
            assert not done
            _, reward, done, truncated, info = await env.step(CLICK)
        assert server.request_counts["localizer"] == 1
    # A spent budget is no verdict: the episode is truncated with its cause, and its 0.0 means nothing.
    assert truncated and not done and reward == 0.0 and info["result"].stop_reason == "budget"
    assert info["truncated_by"] == "budget" and "budget of 1 model calls is spent" in info["failure"]


async def test_a_grounded_reply_and_a_tool_call_are_steps_without_a_localizer(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    """With a policy that grounds its clicks (Holo3.1), step() takes the reply as the model writes it:
    H's JSON with its point in [0, 1000], or a native tool call; no localizer is asked."""
    async with model_server(load_task_script("catalog-price")) as server:
        config = offline_config(server.url, DEFAULT_PROFILE, family="holo3.1", grounding="policy")
        config.localizer.base_url = None  # not needed: the policy places its clicks
        # The validator is the policy's model on its server: an in-process policy's answer would be
        # judged in its conversation; the caller's is judged on its own (the reward is not its say).
        config.policy.base_url = config.validator.base_url = f"{server.url}/v1"
        assert config.validator_context() == "conversation"
        async with Agent(config, browser=browser) as agent, WebEnv(agent=agent) as env:
            obs, _ = await env.reset(local_tasks["catalog-price"])
            assert (obs.screenshot.frame.image_width, obs.screenshot.frame.image_height) == (1280, 800)
            write = {"tool_name": "write", "element": "search box", "content": "blue widget", "press_enter": True}
            obs, _, done, _, info = await env.step(
                {"note": None, "thought": "search", "tool_call": {**write, "x": 437, "y": 160}}
            )
            assert info["error"] is None and info["step"].point.viewport == pytest.approx((559.4, 128.0), abs=1)
            arguments = {"note": "", "element": "first search result", "x": 508, "y": 302}
            obs, _, done, _, info = await env.step(
                {"id": "call_9", "type": "function", "function": {"name": "click", "arguments": json.dumps(arguments)}}
            )
            assert info["error"] is None and "/catalog/product/blue-widget" in obs.url
            assert any(m.get("tool_calls") for m in obs.messages)  # the conversation keeps the call
            obs, reward, done, _, info = await env.step(
                {"name": "answer", "arguments": {"note": "", "content": "$12.50"}}
            )
    assert (reward, done) == (1.0, True) and info["result"].grounding == "policy"
    assert [r.role for r in server.requests] == ["validator"]
    assert server.requests[0].messages_count == 2 and info["step"].context.validator_context == "separate"
