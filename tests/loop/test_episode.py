"""The loop with a fake page driver and the real offline model server over HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import SecretStr

from webagent import Agent
from webagent.config import AgentConfig
from webagent.errors import BrowserError, BrowserTimeoutError
from webagent.images import Frame, Screenshot
from webagent.loop import Episode
from webagent.records import RunResult, Step

from ..conftest import ServerFactory, make_config
from .fakepage import FakePage

GOAL = "Find the answer to everything"


def script(policy: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "elements": {"big button": [640, 400], "name field": [300, 200]},
        "tasks": [
            {
                "id": "t",
                "match": GOAL,
                "policy": policy,
                "validator": {"accept": ["42"], "feedback": "Wrong, look again."},
            }
        ],
        **extra,
    }


async def run_episode(config: AgentConfig, page: FakePage) -> tuple[RunResult, list[Step]]:
    agent = Agent(config)
    episode = Episode(agent.new_roles(), page, config.agent, url="http://127.0.0.1:1/start", goal=GOAL)
    steps = [step async for step in episode.steps()]
    await agent.aclose()
    assert episode.result is not None
    return episode.result, steps


async def test_actions_reach_the_page_at_mapped_points(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"step": 1}, "action": {"action": "click_element", "element": "big button"}},
        {
            "when": {"step": 2},
            "action": {"action": "write_element", "element": "name field", "content": "Ada", "press_enter": True},
        },
        {"when": {"step": 3}, "action": {"action": "scroll", "direction": "down"}},
        {"when": {"step": 4}, "action": {"action": "press_key", "key": "ctrl+a"}},
        {"when": {"step": 5}, "action": {"action": "select_option", "element": "name field", "option": "Canada"}},
        {"when": {"step": 6}, "action": {"action": "goto", "url": "127.0.0.1:9/next"}},
        {"when": {"step": 7}, "action": {"action": "go_back"}},
        {"when": {"step": 8}, "action": {"action": "refresh"}},
        {"when": {"step": 9}, "action": {"action": "wait", "seconds": 0}},
        {"action": {"action": "answer", "content": "42"}},
    ]
    page = FakePage()
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server, "holo1"), page)
    assert result.success and result.steps == 10 and result.stop_reason == "answered"
    assert page.calls == [
        ("goto", "http://127.0.0.1:1/start"),
        ("click", 640.0, 400.0),
        ("write", 300.0, 200.0, "Ada", True),
        ("scroll", "down"),
        ("press", "ctrl+a"),
        ("select", 300.0, 200.0, "Canada"),
        ("goto", "http://127.0.0.1:9/next"),
        ("go_back",),
        ("refresh",),
        ("wait", 0.0),
    ]
    # One screenshot per step, sized for the profile.
    assert page.shots == 10
    assert steps[0].image_size == (1260, 784)
    assert steps[0].point is not None
    assert steps[0].point.image == pytest.approx((630, 394), abs=0.5)


@pytest.mark.parametrize("context", ["window", "append"])
async def test_prompt_does_not_grow_with_steps(model_server: ServerFactory, context: str) -> None:
    policy = [
        {
            "note": "Remember: the page lists many items and the answer is somewhere below.",
            "thought": "keep looking",
            "action": {"action": "scroll", "direction": "down"},
        }
    ]
    async with model_server(script(policy)) as server:
        config = make_config(server, max_steps=31, max_attempts=1, context=context)  # 30 actions, then the final
        result, steps = await run_episode(config, FakePage())
        policy_requests = [r for r in server.requests if r.role == "policy"]
    assert result.stop_reason == "max_steps"
    tokens = {s.index: next(c.usage.prompt_tokens for c in s.calls if c.role == "policy") for s in steps}
    if context == "append":  # grows within an epoch (6 steps), starts over compactly after it
        assert max(tokens.values()) <= 1.15 * max(tokens[i] for i in range(1, 7)), tokens
        assert tokens[7] < tokens[6] and tokens[31] <= 1.15 * tokens[7], tokens
        return
    assert tokens[30] <= 1.15 * tokens[3], tokens
    # Once the windows are full the text stops growing: step 30 is no longer than step 15.
    assert len(policy_requests[29].text) <= len(policy_requests[14].text) + 4
    assert policy_requests[29].n_images == 3


async def test_out_of_steps_asks_once_for_a_validated_final_answer(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"final": True}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "scroll", "direction": "down"}},
    ]
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server, max_steps=4), FakePage())
        finals = [r for r in server.requests if r.role == "policy" and "FINAL STEP" in r.turn]
    assert len(finals) == 1
    # max_steps counts every step, the final one too: the numbers agree everywhere.
    assert [s.kind for s in steps] == ["action"] * 3 + ["final"]
    assert result.steps == 4 and "Step: 4 of 4" in finals[0].turn
    assert result.stop_reason == "max_steps" and result.message.startswith("stopped after 4 steps;")
    assert result.success is True  # validated, not merely claimed
    assert result.attempts == 1 and steps[-1].verdict is not None


async def test_final_answer_rejected_is_not_success(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"final": True}, "action": {"action": "answer", "content": "41"}},
        {"action": {"action": "wait", "seconds": 0}},
    ]
    async with model_server(script(policy)) as server:
        result, _ = await run_episode(make_config(server, max_steps=2), FakePage())
    assert result.success is False and result.answer == "41" and result.stop_reason == "max_steps"


async def test_max_attempts_stops_after_rejected_answers(model_server: ServerFactory) -> None:
    policy = [{"action": {"action": "answer", "content": "wrong"}}]
    async with model_server(script(policy)) as server:
        result, _ = await run_episode(make_config(server, max_attempts=2), FakePage())
    assert result.success is False
    assert result.attempts == 2 and result.steps == 2
    assert result.stop_reason == "answered"
    assert result.feedback == ["Wrong, look again.", "Wrong, look again."]


async def test_max_time_stops_with_final_answer(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"final": True}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "wait", "seconds": 0}},
    ]
    # The final answer is asked for with a quarter of max_time_s left: plenty for two 50 ms calls.
    async with model_server({**script(policy), "latency_s": 0.05}) as server:
        result, steps = await run_episode(make_config(server, max_time_s=2.0, max_steps=1000), FakePage())
    assert result.stop_reason == "max_time"
    assert steps[-1].kind == "final" and result.success
    assert result.duration_s >= 1.5  # not before the reserve for the final answer


class StuckPage(FakePage):
    """A page whose click never returns (a browser that stopped answering, past every deadline)."""

    async def click(self, x: float, y: float) -> None:
        self._record("click", round(x), round(y))
        await asyncio.Event().wait()


async def test_max_time_is_a_hard_limit_that_ends_a_stuck_step(model_server: ServerFactory) -> None:
    policy = [{"action": {"action": "click_element", "element": "big button"}}]
    async with model_server(script(policy)) as server:
        async with asyncio.timeout(30):  # a hang fails the test instead of blocking the suite
            result, steps = await run_episode(make_config(server, max_time_s=1.0), StuckPage())
    assert result.stop_reason == "max_time" and not result.success
    assert "time limit" in result.message and "during step 1" in result.message
    assert len(steps) == 1 and steps[0].error and "time limit" in steps[0].error
    assert steps[0].calls  # what was done before the cut is kept


class StuckStart(FakePage):
    async def goto(self, url: str, *, start: bool = False) -> None:
        await asyncio.Event().wait()


async def test_max_time_ends_a_run_whose_start_page_never_opens(model_server: ServerFactory) -> None:
    async with model_server(script([])) as server:
        async with asyncio.timeout(30):
            result, steps = await run_episode(make_config(server, max_time_s=0.5), StuckStart())
    assert result.stop_reason == "max_time" and steps == [] and result.steps == 0
    assert "opening the start page" in result.message


async def test_malformed_reply_is_repaired(model_server: ServerFactory) -> None:
    policy = [{"action": {"action": "answer", "content": "42"}}]
    faults = [{"role": "policy", "nth": 1, "kind": "malformed"}, {"role": "validator", "nth": 1, "kind": "schema"}]
    async with model_server(script(policy, faults=faults)) as server:
        result, steps = await run_episode(make_config(server), FakePage())
        repair = [r for r in server.requests if r.role == "policy"][1]
    assert result.success
    assert result.usage.policy.repairs == 1 and result.usage.validator.repairs == 1
    assert repair.messages_count == 4  # system, user, bad assistant reply, repair request
    assert len(steps[0].calls[0].raw) == 2


async def test_unusable_reply_twice_fails_the_step_and_tells_the_policy(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"last_action": "policy's reply was unusable"}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "wait", "seconds": 0}},
    ]
    faults = [{"role": "policy", "nth": 1, "kind": "malformed"}, {"role": "policy", "nth": 2, "kind": "malformed"}]
    async with model_server(script(policy, faults=faults)) as server:
        result, steps = await run_episode(make_config(server), FakePage())
    assert steps[0].error and "unusable" in steps[0].error
    assert steps[0].action is None
    assert result.success and result.usage.policy.failures == 1


async def test_off_image_point_is_a_localization_failure(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"last_action": "outside"}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "click_element", "element": "big button"}},
    ]
    faults = [{"role": "localizer", "nth": 1, "kind": "offtarget"}]
    page = FakePage()
    async with model_server(script(policy, faults=faults)) as server:
        result, steps = await run_episode(make_config(server), page)
    assert steps[0].error and "outside" in steps[0].error
    assert not any(call[0] == "click" for call in page.calls)  # never a clamped click
    assert result.success


async def test_action_error_is_told_to_the_policy(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"last_action": "no element takes clicks there"}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "click_element", "element": "big button"}},
    ]
    page = FakePage()
    page.fail["click"] = "no element takes clicks there"
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server), page)
        second = [r for r in server.requests if r.role == "policy"][1]
    assert steps[0].error == "no element takes clicks there"
    assert 'click_element "big button" -> failed: no element takes clicks there' in second.turn
    assert result.success and result.steps == 2


async def test_unreachable_model_ends_the_run_with_error() -> None:
    config = AgentConfig.model_validate(
        {
            role: {"base_url": "http://127.0.0.1:9/v1", "model": "m", "max_retries": 1, "timeout_s": 2}
            for role in ("policy", "localizer", "validator")
        }
    )
    result, steps = await run_episode(config, FakePage())
    assert result.stop_reason == "error"
    assert "policy model at http://127.0.0.1:9/v1 could not be reached" in result.message
    assert result.infrastructure  # a model server that kept failing is not the task's fault
    assert result.usage.policy.failures == 1 and result.usage.policy.retries == 1
    assert len(steps) == 1


class FailingPage(FakePage):
    """A page whose second screenshot fails with ``error``."""

    def __init__(self, error: BrowserError) -> None:
        super().__init__()
        self.error = error

    async def screenshot(self, frame: Frame) -> Screenshot:
        if self.shots == 1:
            raise self.error
        return await super().screenshot(frame)


@pytest.mark.parametrize(
    ("error", "infrastructure"),
    [
        (BrowserTimeoutError("the page gives no screenshot (none within 10 s, twice) at http://x/"), True),
        (BrowserError("the browser is gone: Target page, context or browser has been closed"), False),
    ],
)
async def test_a_run_ended_by_the_infrastructure_says_so(
    model_server: ServerFactory, error: BrowserError, infrastructure: bool
) -> None:
    policy = [{"action": {"action": "scroll", "direction": "down"}}]
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server), FailingPage(error))
    assert result.stop_reason == "error" and result.message == str(error)
    assert result.infrastructure is infrastructure
    assert len(steps) == 2


async def test_server_errors_are_retried(model_server: ServerFactory) -> None:
    policy = [{"action": {"action": "answer", "content": "42"}}]
    faults = [
        {"role": "policy", "nth": 1, "kind": "500"},
        {"role": "policy", "nth": 2, "kind": "429"},
        {"role": "validator", "nth": 1, "kind": "disconnect"},
    ]
    async with model_server(script(policy, faults=faults, retry_after_s=0)) as server:
        result, _ = await run_episode(make_config(server), FakePage())
    assert result.success
    assert result.usage.policy.retries == 2 and result.usage.validator.retries == 1


# -- progress signals --------------------------------------------------------------------------

UNCHANGED = 'Your last action (click_element "big button") changed nothing visible on the page'
REPEATED = 'WARNING: you have done the same action (click_element "big button")'


async def test_an_action_that_changes_nothing_is_told_and_recorded(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"step": 1}, "action": {"action": "click_element", "element": "big button"}},
        {"when": {"step": 2}, "action": {"action": "scroll", "direction": "down"}},
        {"action": {"action": "answer", "content": "42"}},
    ]
    page = FakePage()
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server), page)
        texts = [r.turn for r in server.requests if r.role == "policy"]
    assert result.success and len(texts) == 3
    assert "changed nothing" not in texts[0]  # no signal at step 1
    line = UNCHANGED + " (same URL, same screenshot)."
    assert line in texts[1].split("\n")
    assert "Your last action (scroll down) changed nothing visible" in texts[2]
    assert UNCHANGED not in texts[2] and "WARNING" not in texts[2]
    assert [(s.unchanged, s.repeated) for s in steps] == [(False, 0), (True, 1), (True, 1)]
    assert (
        steps[1].context is not None
        and steps[1].context.policy is not None
        and steps[1].context.policy.progress == line
    )
    # Recorded in the trajectory record.
    record = steps[1].model_dump(mode="json")
    assert record["unchanged"] is True and record["repeated"] == 1 and record["context"]["policy"]["progress"] == line


@pytest.mark.parametrize("after", [2, 3])
async def test_the_same_action_repeated_on_an_unchanged_page_is_flagged(
    model_server: ServerFactory, after: int
) -> None:
    policy = [
        {"when": {"step": 6}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "click_element", "element": "big button"}},
    ]
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server, repeat_warning_after=after), FakePage())
        texts = [r.turn for r in server.requests if r.role == "policy"]
    assert result.success and len(steps) == 6
    assert [s.repeated for s in steps] == [0, 1, 2, 3, 4, 5]
    flagged = [i + 1 for i, text in enumerate(texts) if REPEATED in text]
    assert flagged == list(range(after + 1, 7))  # step N+1 sees the Nth click that changed nothing
    assert f"{REPEATED} {after} times and the page has not changed" in texts[after]
    assert all(UNCHANGED in text for text in texts[1:after])  # the plain line until then


async def test_a_page_that_changes_gives_no_signal(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"step": 5}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "click_element", "element": "big button"}},
    ]
    page = FakePage()
    page.changing = True
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server, repeat_warning_after=2), page)
        texts = [r.turn for r in server.requests if r.role == "policy"]
    assert result.success and len(texts) == 5
    assert not any("changed nothing" in t or "WARNING" in t for t in texts)
    assert not any(s.unchanged or s.repeated for s in steps)
    assert all(
        s.context is not None and s.context.policy is not None and s.context.policy.progress is None for s in steps
    )


async def test_a_wait_on_an_unchanged_page_is_told_but_no_repeat(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"step": 4}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "wait", "seconds": 0}},
    ]
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server, repeat_warning_after=1), FakePage())
        texts = [r.turn for r in server.requests if r.role == "policy"]
    assert result.success
    assert all("Nothing visible changed while you waited (wait 0s)" in t for t in texts[1:])
    assert not any("WARNING" in t for t in texts)
    assert [(s.unchanged, s.repeated) for s in steps] == [(False, 0), (True, 0), (True, 0), (True, 0)]


async def test_a_failed_action_gives_no_progress_signal(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"step": 2}, "action": {"action": "answer", "content": "42"}},
        {"action": {"action": "click_element", "element": "big button"}},
    ]
    page = FakePage()
    page.fail["click"] = "no element takes clicks there"
    async with model_server(script(policy)) as server:
        result, steps = await run_episode(make_config(server), page)
        second = [r for r in server.requests if r.role == "policy"][1]
    assert result.success and steps[0].error
    assert "changed nothing" not in second.turn and not steps[1].unchanged


async def test_a_note_is_redacted_before_it_is_cut(model_server: ServerFactory) -> None:
    # The policy read a secret off a screenshot and wrote it at the end of a long note: the note is
    # kept cut to its limit, and the cut must not leave part of the secret for the next prompt.
    secret = "hunter2-Correct-Horse"
    policy = [
        {"when": {"step": 1}, "note": "x" * 395 + secret, "action": {"action": "scroll", "direction": "down"}},
        {"action": {"action": "answer", "content": "42"}},
    ]
    async with model_server(script(policy)) as server:
        config = make_config(server, context="window")  # each request carries the notes so far
        config.secrets = {"PW": SecretStr(secret)}
        result, _ = await run_episode(config, FakePage())
        prompts = [r.text for r in server.requests if r.role == "policy"]
    assert result.success and len(prompts) == 2
    assert "xxxxx{{PW" in prompts[1] and "hunter" not in prompts[1]
