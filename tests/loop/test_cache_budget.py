"""The loop's budgets, replay cache and expectations, with a fake page and the real offline model server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from webagent import Agent
from webagent.budget import Budget, BudgetLimits
from webagent.config import AgentConfig
from webagent.loop import Episode
from webagent.records import RunResult, Step
from webagent.replay import ReplayCache, StepReplay

from ..conftest import ServerFactory, make_config
from .fakepage import FakePage
from .test_episode import GOAL, script

CLICK_FOREVER = [{"action": {"action": "click_element", "element": "big button"}}]
SOLVE = [
    {"when": {"step": 1}, "note": "start", "action": {"action": "click_element", "element": "big button"}},
    {"when": {"step": 2}, "action": {"action": "scroll", "direction": "down"}},
    {"action": {"action": "answer", "content": "42"}},
]


async def episode(
    config: AgentConfig,
    page: FakePage,
    *,
    budgets: list[Budget] | None = None,
    replay: StepReplay | None = None,
    expect: str | None = None,
) -> tuple[RunResult, list[Step]]:
    agent = Agent(config)
    try:
        ep = Episode(
            agent.new_roles(),
            page,
            config.agent,
            url="http://127.0.0.1:1/start",
            goal=GOAL,
            budgets=budgets or [],
            replay=replay,
            expect=expect,
        )
        steps = [step async for step in ep.steps()]
    finally:
        await agent.aclose()
    assert ep.result is not None
    return ep.result, steps


def budget(config: AgentConfig, scope: str = "run", **limits: Any) -> Budget:
    def price(call: Any) -> float:
        return config.role(call.role).cost(call.usage.prompt_tokens, call.usage.completion_tokens)

    return Budget(BudgetLimits(**limits), price, scope=scope)


async def test_call_budget_stops_the_run_before_the_next_call(model_server: ServerFactory) -> None:
    async with model_server(script(CLICK_FOREVER)) as server:
        config = make_config(server, max_steps=20)
        result, steps = await episode(config, FakePage(), budgets=[budget(config, calls=5)])
        sent = len(server.requests)
    assert result.stop_reason == "budget" and not result.success
    assert "budget of 5 model calls is spent" in result.message and "budget_calls" in result.message
    assert sent == 5  # policy+localizer, policy+localizer, policy: never a sixth request
    assert sum(len(s.calls) for s in steps) == 5
    assert steps[-1].outcome.startswith("stopped:")


async def test_token_and_dollar_budgets(model_server: ServerFactory) -> None:
    async with model_server(script(CLICK_FOREVER)) as server:
        config = make_config(server, max_steps=20)
        result, _ = await episode(config, FakePage(), budgets=[budget(config, tokens=1)])
        assert result.stop_reason == "budget" and "1 tokens" in result.message
        assert len(server.requests) == 1  # the first call spends the tokens; nothing after it
        config.policy.price_prompt_per_m = 1_000_000.0  # $1 per prompt token: the first call costs dollars
        result, _ = await episode(config, FakePage(), budgets=[budget(config, usd=0.5)])
        assert result.stop_reason == "budget" and "$0.5" in result.message


async def test_a_suite_budget_is_shared_by_runs(model_server: ServerFactory) -> None:
    async with model_server(script(SOLVE)) as server:
        config = make_config(server)
        shared = budget(config, scope="suite", calls=6)
        first, _ = await episode(config, FakePage(), budgets=[shared])
        assert first.success and shared.calls == 5  # policy, localizer, policy, policy, validator
        second, steps = await episode(config, FakePage(), budgets=[shared])
    assert second.stop_reason == "budget" and "suite's budget" in second.message
    assert sum(len(s.calls) for s in steps) == 1 and shared.calls == 6


async def test_config_budget_applies_to_agent_runs(model_server: ServerFactory) -> None:
    async with model_server(script(CLICK_FOREVER)) as server:
        config = make_config(server, max_steps=20, budget_calls=3)
        async with Agent(config) as agent:
            stream = agent.stream("http://127.0.0.1:1/start", GOAL)  # not iterated: its budgets are what it would use
            assert [b.scope for b in stream.budgets] == ["run"]
            result, _ = await episode(config, FakePage(), budgets=stream.budgets)
    assert result.stop_reason == "budget" and result.usage.policy.calls + result.usage.localizer.calls == 3


async def test_expectation_reaches_the_validator(model_server: ServerFactory) -> None:
    async with model_server(script(SOLVE)) as server:
        result, _ = await episode(make_config(server), FakePage(), expect="the basket shows 2 items")
        validator = [r for r in server.requests if r.role == "validator"]
    assert result.success
    assert len(validator) == 1 and "Expected final state" in validator[0].text
    assert "the basket shows 2 items" in validator[0].text


async def test_replay_runs_recorded_steps_without_models(model_server: ServerFactory, tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    async with model_server(script(SOLVE)) as server:
        config = make_config(server)
        cache = ReplayCache(path)
        replay = cache.replay_for("check", goal=GOAL)
        first_page = FakePage()
        first, steps = await episode(config, first_page, replay=replay)
        assert first.success and [s.replayed for s in steps] == [False, False, False]
        assert cache.update("check", replay, url="http://127.0.0.1:1/start", goal=GOAL)
        recorded = len(server.requests)

        page = FakePage()
        again, steps = await episode(config, page, replay=ReplayCache(path).replay_for("check", goal=GOAL))
        assert len(server.requests) == recorded  # zero model calls
    assert again.success and again.answer == "42" and again.stop_reason == "answered"
    assert [s.replayed for s in steps] == [True, True, True]
    assert again.replayed_steps == 3 and again.calls_saved == 5
    assert page.calls == first_page.calls  # the same clicks at the same points
    assert all(not s.calls for s in steps)


async def test_a_changed_page_is_replanned_from_that_step(model_server: ServerFactory, tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    async with model_server(script(SOLVE)) as server:
        config = make_config(server)
        cache = ReplayCache(path)
        replay = cache.replay_for("check", goal=GOAL)
        await episode(config, FakePage(), replay=replay)
        cache.update("check", replay, url="u", goal=GOAL)
        before = json.loads(path.read_text())

        class ChangesAfterFirstStep(FakePage):
            async def click(self, x: float, y: float) -> None:
                await super().click(x, y)
                self.text = "the page changed"

        n = len(server.requests)
        cache = ReplayCache(path)
        replay = cache.replay_for("check", goal=GOAL)
        result, steps = await episode(config, ChangesAfterFirstStep(), replay=replay)
        assert len(server.requests) - n == 3  # policy (step 2), policy + validator (step 3)
        assert result.success and [s.replayed for s in steps] == [True, False, False]
        assert replay.changed and cache.update("check", replay, url="u", goal=GOAL)  # self-healed
    after = json.loads(path.read_text())
    old, new = before["checks"]["check"]["steps"], after["checks"]["check"]["steps"]
    assert old[0] == new[0] and old[1]["fingerprint"]["text"] != new[1]["fingerprint"]["text"]


async def test_a_failed_run_does_not_touch_the_cache(model_server: ServerFactory, tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    async with model_server(script([{"action": {"action": "answer", "content": "wrong"}}])) as server:
        cache = ReplayCache(path)
        replay = cache.replay_for("check", goal=GOAL)
        result, _ = await episode(make_config(server, max_attempts=1), FakePage(), replay=replay)
    assert not result.success
    assert not replay.steps  # a rejected answer is never recorded
    assert not cache.update("check", replay, url="u", goal=GOAL) and not path.exists()


async def test_a_shared_call_budget_is_exact_under_concurrency(model_server: ServerFactory) -> None:
    async with model_server(script(CLICK_FOREVER, latency_s={"policy": 0.2, "localizer": 0.2})) as server:
        config = make_config(server, max_steps=20)
        shared = budget(config, scope="suite", calls=7)
        results = await asyncio.gather(*(episode(config, FakePage(), budgets=[shared]) for _ in range(4)))
        sent = len(server.requests)
    assert sent == 7 and shared.calls == 7 and shared.in_flight == 0  # never a call past the limit
    assert all(r.stop_reason == "budget" for r, _ in results)
