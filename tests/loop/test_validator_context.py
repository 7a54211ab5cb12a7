"""Where the validator judges an answer: in the policy's own conversation (its screenshots already in
the server's prefix cache), or in a request of its own; with the real offline server and its
simulated vLLM prefix cache."""

from __future__ import annotations

from typing import Any

import pytest

from webagent import Agent
from webagent.config import AgentConfig
from webagent.errors import ConfigError
from webagent.loop import Episode
from webagent.records import RunResult, Step
from webagent.testing.server import FakeModelServer, RecordedRequest

from ..conftest import ServerFactory, make_config
from .fakepage import FakePage
from .test_episode import GOAL, script

SOLVE = [
    {"when": {"step": 1}, "note": "start", "action": {"action": "click_element", "element": "big button"}},
    {"when": {"step": 2}, "action": {"action": "scroll", "direction": "down"}},
    {"action": {"action": "answer", "content": "42"}},
]
#: Prompt tokens of one 1280x800 screenshot for the Qwen3-VL processor (40 x 25 patches of 32 px).
SHOT = 1000


def shared_config(server: FakeModelServer, family: str, **agent: Any) -> AgentConfig:
    """The policy and the validator as one model behind one URL (``webagent run --base-url ... --model ...``)."""
    config = make_config(server, family if family in ("holo3", "holo3.1") else "holo1.5", family=family, **agent)
    config.policy.base_url = config.validator.base_url = f"{server.url}/v1"
    return config


async def run(config: AgentConfig, **settings: Any) -> tuple[RunResult, list[Step]]:
    agent = Agent(config)
    try:
        episode = Episode(
            agent.new_roles(),
            FakePage(),
            config.agent.model_copy(update=settings),
            url="http://127.0.0.1:1/start",
            goal=GOAL,
        )
        steps = [step async for step in episode.steps()]
    finally:
        await agent.aclose()
    assert episode.result is not None
    return episode.result, steps


def by_role(server: FakeModelServer, role: str) -> list[RecordedRequest]:
    return [r for r in server.requests if r.role == role]


@pytest.mark.parametrize(("family", "output"), [("holo3", "json"), ("holo3.1", "tools")])
async def test_the_policy_s_own_model_judges_in_its_conversation_from_the_cache(
    model_server: ServerFactory, family: str, output: str
) -> None:
    async with model_server(script(SOLVE)) as server:
        config = shared_config(server, family)
        config.policy.output = output  # type: ignore[assignment]
        assert config.validator_context() == "conversation"  # the family's default: same model, same server
        result, steps = await run(config)
        policy, validator = by_role(server, "policy"), by_role(server, "validator")
    assert result.success and len(validator) == 1
    last, judged = policy[-1], validator[0]
    # The policy's last request, its reply (and the answer to its tool call), then the validator's turn.
    replies = 2 if output == "tools" else 1
    assert judged.messages[: last.messages_count] == last.messages
    assert judged.messages_count == last.messages_count + replies + 1
    assert judged.messages[last.messages_count]["role"] == "assistant"
    assert "Candidate answer:\n42" in judged.turn and '"success"' in judged.turn
    assert judged.n_images == last.n_images  # the screenshots the policy saw, none sent again
    # It extends the request just answered: all of it comes from the cache, the reply and the turn do not.
    assert judged.cached_tokens >= last.prompt_tokens - 16
    assert judged.prompt_tokens - judged.cached_tokens < SHOT // 2
    assert judged.extra["response_format"]["json_schema"]["name"] == "validator_verdict"
    if output == "tools":  # the tools offered again (the template renders them), none to be called
        assert judged.extra["tools"] == last.extra["tools"] and judged.extra["tool_choice"] == "none"
    else:
        assert "tools" not in judged.extra and "structured_outputs" not in judged.extra
    context = steps[-1].context
    assert context is not None and context.validator_context == "conversation"
    assert context.validator_screenshots == context.screenshots


async def test_a_separate_validator_prefills_its_screenshots_again(model_server: ServerFactory) -> None:
    async with model_server(script(SOLVE)) as server:
        result, steps = await run(shared_config(server, "holo3"), validator_context="separate")
        validator = by_role(server, "validator")
    assert result.success and len(validator) == 1
    judged = validator[0]
    assert judged.messages_count == 2 and judged.n_images == 2  # its own request: the last two screenshots
    assert judged.prompt_tokens - judged.cached_tokens > 2 * SHOT
    context = steps[-1].context
    assert context is not None and (context.validator_context, context.validator_screenshots) == ("separate", 2)


async def test_the_default_is_a_separate_request_unless_the_validator_is_the_policy_s_model_and_server(
    model_server: ServerFactory,
) -> None:
    async with model_server(script(SOLVE)) as server:
        own_urls = make_config(server, "holo3", family="holo3")  # the same model behind another URL
        older = shared_config(server, "holo2")  # a family whose validator is its own role
        other_model = shared_config(server, "holo3")
        other_model.validator.model = "Hcompany/Holo2-8B"
        assert [c.validator_context() for c in (own_urls, older, other_model)] == ["separate"] * 3
        for config in (own_urls, older):
            result, steps = await run(config)
            assert result.success and steps[-1].context and steps[-1].context.validator_context == "separate"
        assert all(r.messages_count == 2 for r in by_role(server, "validator"))


async def test_judging_in_the_conversation_needs_the_policy_s_model(model_server: ServerFactory) -> None:
    async with model_server(script(SOLVE)) as server:
        config = shared_config(server, "holo3")
        config.validator.model = "Hcompany/Holo2-8B"
        with pytest.raises(ConfigError, match="validator to be the policy's model"):
            await run(config, validator_context="conversation")
        with pytest.raises(ValueError, match=r"validator\.model to it, or agent\.validator_context = 'separate'"):
            AgentConfig.model_validate(
                {**config.model_dump(), "agent": {**config.agent.model_dump(), "validator_context": "conversation"}}
            )
