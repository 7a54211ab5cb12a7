"""The prompt strategies: what each context mode sends, step after step (no model, no browser)."""

from __future__ import annotations

import base64
import io
import itertools
from typing import Any

import pytest
from PIL import Image

from webagent.config import AgentSettings, RoleConfig
from webagent.images import Screenshot, frame_for
from webagent.model.client import ModelClient
from webagent.records import PolicyState, PromptContext
from webagent.roles.policy import Policy
from webagent.roles.prompting import PLACEHOLDER, PROMPTS, HistoryPrompt, PromptOptions, WindowPrompt

GOAL = "Find the price"


def _shot(look: int) -> Screenshot:
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (look * 40 % 256, 0, 0)).save(buf, format="PNG")
    return Screenshot(base64.b64encode(buf.getvalue()).decode(), "image/png", frame_for(1280, 800, None))


def _policy() -> Policy:
    return Policy(ModelClient("policy", RoleConfig(base_url="http://127.0.0.1:9/v1", model="m")))


def _state(step: int, **told: Any) -> PolicyState:
    return PolicyState(goal=GOAL, url=f"http://a/{step}", step=step, max_steps=20, **told)


def _images(messages: list[dict[str, Any]]) -> list[Any]:
    return [
        p["image_url"]["url"]
        for m in messages
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image_url"
    ]


def _placeholders(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "text" and p["text"] == PLACEHOLDER
    )


def _run(prompt: Any, steps: int) -> list[list[dict[str, Any]]]:
    requests = []
    for i in range(1, steps + 1):
        requests.append(
            prompt.observe(_state(i, outcome=f"step {i - 1}: scroll down -> ok" if i > 1 else None), _shot(i))
        )
        prompt.reply(f'{{"note": "n{i}", "thought": "t", "action": {{"action": "scroll", "direction": "down"}}}}')
    return requests


def test_history_keeps_at_most_n_screenshots_and_keeps_every_turn_s_text() -> None:
    for pruning in ("epoch", "step"):
        prompt = HistoryPrompt(_policy().speaker, PromptOptions(keep=3, pruning=pruning))  # type: ignore[arg-type]
        requests = _run(prompt, 8)
        for n, request in enumerate(requests, start=1):
            assert 1 <= len(_images(request)) <= 3
            assert len(_images(request)) + _placeholders(request) == n  # one observation a step, none lost
            assert _images(request)[-1] == _shot(n).data_url  # the current screenshot is always there
            assert [m["role"] for m in request][:2] == ["system", "user"]
            assert sum(1 for m in request if m["role"] == "assistant") == n - 1  # every reply kept
            # The observation wrapper stays around the placeholder too.
            texts = [p["text"] for m in request[1:] if m["role"] == "user" for p in m["content"] if p["type"] == "text"]
            assert sum(t.endswith("<observation>") for t in texts) == n
        assert "Task: Find the price" in requests[-1][1]["content"][0]["text"]


def test_step_pruning_keeps_the_last_n_and_rewrites_a_turn_every_step() -> None:
    prompt = HistoryPrompt(_policy().speaker, PromptOptions(keep=3, pruning="step"))
    requests = _run(prompt, 6)
    assert [len(_images(r)) for r in requests] == [1, 2, 3, 3, 3, 3]
    assert _images(requests[5]) == [_shot(i).data_url for i in (4, 5, 6)]
    # From step 4 on each request differs from the last one before the new turn: a turn was rewritten.
    for before, after in itertools.pairwise(requests[3:]):
        assert after[: len(before)] != before


def test_epoch_pruning_extends_the_last_request_until_the_screenshots_overflow() -> None:
    prompt = HistoryPrompt(_policy().speaker, PromptOptions(keep=3, pruning="epoch"))
    requests = _run(prompt, 8)
    assert [len(_images(r)) for r in requests] == [1, 2, 3, 1, 2, 3, 1, 2]
    extends = [after[: len(before)] == before for before, after in itertools.pairwise(requests)]
    assert extends == [True, True, False, True, True, False, True]
    # A rewrite turns all but the current screenshot into placeholders, at once.
    assert _images(requests[3]) == [_shot(4).data_url] and _placeholders(requests[3]) == 3


def test_each_mode_records_what_rebuilds_its_request() -> None:
    speaker = _policy().speaker
    for mode, strategy in PROMPTS.items():
        prompt = strategy(speaker, PromptOptions(epoch_steps=2, window=2, keep=2))
        contexts = []
        for i in range(1, 6):
            prompt.observe(_state(i), _shot(i))
            context = PromptContext(policy=_state(i))
            prompt.record(context)
            prompt.reply("{}")
            contexts.append(context)
        assert all(c.mode == mode for c in contexts)
        assert [c.screenshots for c in contexts] == {
            "window": [1, 2, 2, 2, 2],
            "append": [1, 2, 1, 2, 1],
            "history": [1, 2, 1, 2, 1],
        }[mode]
        first = [strategy.replay_from(i, c) for i, c in enumerate(contexts, start=1)]
        assert first == {"window": [1, 1, 2, 3, 4], "append": [1, 1, 3, 3, 5], "history": [1, 1, 1, 1, 1]}[mode]


def test_the_window_keeps_no_reply() -> None:
    prompt = WindowPrompt(_policy().speaker, PromptOptions(window=2))
    prompt.observe(_state(1), _shot(1))
    assert prompt.reply("{}") is None


@pytest.mark.parametrize(("mode", "expected"), [(None, "append"), ("history", "history"), ("window", "window")])
def test_the_context_mode_is_the_setting_else_the_contract_s(mode: str | None, expected: str) -> None:
    settings = AgentSettings(context=mode)  # type: ignore[arg-type]
    assert _policy().context_mode(settings) == expected
    assert _policy().prompt(settings).mode == expected
