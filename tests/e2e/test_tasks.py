"""The real agent solves the bundled local tasks through real HTTP and real Chromium."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent import Agent, RunResult, Step
from webagent.families import DEFAULT_PROFILE, FAMILIES, PROFILES
from webagent.runs.trajectory import read_trajectory
from webagent.testing.offline import offline_config
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, load_task_script, make_config

pytestmark = pytest.mark.e2e


async def run_task(
    browser: Browser,
    server_factory: ServerFactory,
    task: dict[str, Any],
    *,
    profile: str = "holo1.5",
    script: dict[str, Any] | None = None,
    output: Path | None = None,
    **agent: Any,
) -> tuple[RunResult, list[Step], Any]:
    async with server_factory(script or load_task_script(task["id"])) as server:
        agent_ = Agent(make_config(server, profile, **agent), browser=browser)
        stream = agent_.stream(task["url"], task["goal"], output_dir=output)
        steps = [step async for step in stream]
        await agent_.aclose()
        assert stream.result is not None
        return stream.result, steps, server


@pytest.mark.parametrize("profile", ["holo1", "holo1.5", "holo2"])
async def test_catalog_task_each_profile(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any], profile: str, tmp_path: Path
) -> None:
    result, steps, server = await run_task(
        browser, model_server, local_tasks["catalog-price"], profile=profile, output=tmp_path / "run"
    )
    assert result.success, result.message
    assert result.stop_reason == "answered"
    assert result.answer == "$12.50"
    assert "/catalog/product/blue-widget" in result.final_url
    assert [s.action.action for s in steps if s.action] == ["write_element", "click_element", "answer"]
    # Localizer requests carried the profile's image size and, for holo2, the chat template switch.
    loc = [r for r in server.requests if r.role == "localizer"]
    assert len(loc) == 2
    expected = {"holo1": [1260, 784], "holo1.5": [1260, 784], "holo2": [1280, 800]}[profile]
    assert all(r.image_sizes == [expected] for r in loc)
    if profile == "holo2":
        assert all(r.extra.get("chat_template_kwargs") == {"thinking": False} for r in loc)
    # Usage is accounted per role.
    assert result.usage.policy.calls == 3 and result.usage.localizer.calls == 2 and result.usage.validator.calls == 1
    assert result.usage.policy.prompt_tokens > 0
    # The run directory is complete.
    run = tmp_path / "run"
    records = read_trajectory(run)
    assert len(records) == 3
    for record in records:
        assert (run / str(record["screenshot"])).stat().st_size > 1000
    assert records[0]["point"]["viewport"] == pytest.approx([560, 128], abs=1.5)
    assert json.loads((run / "result.json").read_text())["success"] is True
    assert (run / "report.html").stat().st_size > 10_000


async def test_validator_feedback_reaches_policy(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    result, steps, server = await run_task(browser, model_server, local_tasks["catalog-feedback"])
    assert result.success, result.message
    assert result.attempts == 2
    assert result.answer == "$19.99"
    feedback = "Include the currency symbol in the price."
    assert result.feedback[0] == feedback
    verdicts = [s.verdict for s in steps if s.verdict]
    assert [v.success for v in verdicts] == [False, True]
    policy = [r for r in server.requests if r.role == "policy"]
    rejected_at = next(i for i, r in enumerate(policy) if "Validator feedback" in r.turn)
    assert f"Validator feedback on your last answer:\n{feedback}\n" in policy[rejected_at].turn
    assert all("Validator feedback" not in r.turn for r in policy[:rejected_at])


async def test_form_with_native_select(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any], site: SiteServer
) -> None:
    site.clear_submissions()
    result, steps, _ = await run_task(browser, model_server, local_tasks["form-register"])
    assert result.success, result.message
    assert site.submissions, "the form was never submitted"
    submitted = site.submissions[-1]
    assert submitted["name"] == "Ada Lovelace"
    assert submitted["email"] == "ada@example.com"
    assert submitted["country"].lower() in ("ca", "canada")
    assert any(s.action and s.action.action == "select_option" and "Canada" in s.outcome for s in steps)


async def test_long_page_needs_scrolling(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    result, steps, _ = await run_task(browser, model_server, local_tasks["longpage-code"])
    assert result.success, result.message
    assert any(s.action and s.action.action == "scroll" for s in steps)


async def test_new_tab_is_followed(browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]) -> None:
    result, steps, _ = await run_task(browser, model_server, local_tasks["tabs-order"])
    assert result.success, result.message
    assert "/tabs/details" in result.final_url
    assert any("new tab" in event for s in steps for event in s.events)


async def test_a_holo2_validator_is_asked_not_to_think(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script(task["id"])) as server:
        config = make_config(server, "holo1.5")
        config.validator.family = "holo2"
        agent = Agent(config, browser=browser)
        stream = agent.stream(task["url"], task["goal"])
        _ = [step async for step in stream]
        await agent.aclose()
    assert stream.result is not None and stream.result.success, stream.result
    validator = [r for r in server.requests if r.role == "validator"]
    assert validator and all(r.extra.get("chat_template_kwargs") == {"thinking": False} for r in validator)
    others = [r for r in server.requests if r.role != "validator"]
    assert others and all("chat_template_kwargs" not in r.extra for r in others)  # each role its own family


async def test_a_holotron_policy_asks_for_its_tile_limit_on_the_localizer_s_screenshots(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script(task["id"])) as server:
        config = make_config(server, "holo1.5")
        config.policy.family = "holotron"
        config.policy.image_uuid = True
        agent = Agent(config, browser=browser)
        stream = agent.stream(task["url"], task["goal"], output_dir=tmp_path / "run")
        steps = [step async for step in stream]
        await agent.aclose()
    assert stream.result is not None and stream.result.success, stream.result
    policy = [r for r in server.requests if r.role == "policy"]
    localizer = [r for r in server.requests if r.role == "localizer"]
    # One capture per step, at the localizer's exact pixels; the policy asks for 2 tiles at most.
    assert all(size == [1260, 784] for r in [*policy, *localizer] for size in r.image_sizes)
    assert all(r.extra.get("mm_processor_kwargs") == {"max_num_tiles": 2} for r in policy)
    assert all("mm_processor_kwargs" not in r.extra for r in localizer)
    assert steps[0].point is not None and steps[0].point.viewport == pytest.approx((560, 128), abs=1.5)
    # Each policy image carries its stable uuid, the same one every time it is re-sent.
    parts = [p for r in policy for m in r.messages if isinstance(m["content"], list) for p in m["content"]]
    uuids = [p["uuid"] for p in parts if p["type"] == "image_url"]
    assert len(uuids) == 1 + 2 + 3 and len(set(uuids)) == 3
    # The append-only conversation is served from the (simulated) prefix cache up to its new turn
    # (the server counts the images as its model name says: Holo1.5's 1,260 tokens each).
    assert [r.prompt_tokens - r.cached_tokens < 1260 + 400 for r in policy] == [False, True, True]


@pytest.mark.parametrize(
    ("profile", "family"), [("holo1", None), ("holo1.5", None), ("holo2", None), ("holo1.5", "holotron")]
)
async def test_the_local_tasks_pass_under_every_profile_and_policy_family(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any], profile: str, family: str | None
) -> None:
    """Every bundled task, concurrently on one Agent, with each localizer profile (the policy's
    screenshots sized by its family: the profile's own, or Holotron's tile-sized ones)."""
    async with model_server(load_task_script("local")) as server:
        config = make_config(server, profile)
        config.policy.family = family
        agent = Agent(config, browser=browser)
        try:
            results = await asyncio.gather(*(agent.run(t["url"], t["goal"]) for t in local_tasks.values()))
        finally:
            await agent.aclose()
    outcomes = {task: (r.success, r.stop_reason, r.message) for task, r in zip(local_tasks, results, strict=True)}
    assert all(ok and reason == "answered" for ok, reason, _ in outcomes.values()), outcomes


def _contracts() -> list[tuple[str, str, str]]:
    """(family, grounding, output) for every family, each grounding mode it has and each output."""
    return [
        (name, grounding, output)
        for name, family in FAMILIES.items()
        for grounding in ("policy", "localizer")
        if grounding == "localizer" or family.policy.point is not None
        for output in family.policy.outputs
    ]


async def _collect(stream: Any) -> list[Step]:
    return [step async for step in stream]


@pytest.mark.parametrize(("family", "grounding", "output"), _contracts())
async def test_the_local_tasks_pass_under_every_family_in_both_grounding_modes(
    browser: Browser,
    model_server: ServerFactory,
    local_tasks: dict[str, Any],
    family: str,
    grounding: str,
    output: str,
) -> None:
    """Every bundled task, concurrently on one Agent, with each family's policy speaking its own
    contract (reply shape, output, coordinates, reasoning switches, context mode), its clicks placed
    by itself or by a localizer (the family's own profile, else the default one), and its answers
    judged where the family says when the validator is the policy's model on its server (in the
    policy's conversation for H's agent-loop families)."""
    profile = family if family in PROFILES else DEFAULT_PROFILE
    async with model_server(load_task_script("local")) as server:
        config = offline_config(server.url, profile, family=family, grounding=grounding)
        config.policy.output = output  # type: ignore[assignment]
        config.policy.base_url = config.validator.base_url = f"{server.url}/v1"  # one model, one server
        for role in ("policy", "localizer", "validator"):
            config.role(role).timeout_s = 5.0
        agent = Agent(config, browser=browser)
        try:
            streams = [agent.stream(t["url"], t["goal"]) for t in local_tasks.values()]
            runs = await asyncio.gather(*(_collect(stream) for stream in streams))
        finally:
            await agent.aclose()
    results = [stream.result for stream in streams]
    outcomes = {
        task: (r and r.success, r and r.stop_reason, r and r.message)
        for task, r in zip(local_tasks, results, strict=True)
    }
    assert all(ok and reason == "answered" for ok, reason, _ in outcomes.values()), outcomes
    assert all(r is not None and r.grounding == grounding for r in results)
    steps = [step for run in runs for step in run]
    clicks = [
        s
        for s in steps
        if s.action is not None and s.action.action in ("click_element", "write_element", "select_option")
    ]
    assert clicks and all(s.grounding == grounding and s.point is not None for s in clicks)
    localizer = [r for r in server.requests if r.role == "localizer"]
    policy = [r for r in server.requests if r.role == "policy"]
    if grounding == "policy":  # one request per click step: the policy's, no localizer
        assert localizer == [] and all(len([c for c in s.calls if c.role == "policy"]) == 1 for s in clicks)
    else:
        assert len(localizer) >= len(clicks)
    # Each policy request spoke the family's contract.
    fields = FAMILIES[family].request_fields("agent", config.policy.max_num_tiles) or {}
    assert all(all(r.extra.get(k) == v for k, v in fields.items()) for r in policy)
    assert all(("tools" in r.extra) == (output == "tools") for r in policy)
    # Each answer judged in the policy's conversation (its screenshots, no new ones) or on its own.
    judged = [r for r in server.requests if r.role == "validator"]
    assert len(judged) >= len(local_tasks)
    if FAMILIES[family].policy.validator == "conversation":
        systems = {r.system for r in policy}
        assert all(r.messages_count > 2 and r.system in systems and "Candidate answer:" in r.turn for r in judged)
    else:
        assert all(r.messages_count == 2 and 1 <= r.n_images <= config.agent.validator_screenshots for r in judged)


PRESS_GOAL = "Type Ada into the name field, then scroll down three times and answer done"


async def test_a_scroll_that_changes_nothing_is_told_with_a_focused_field(
    browser: Browser, model_server: ServerFactory, site: SiteServer
) -> None:
    # The field keeps the focus (its caret would blink) while scrolling changes nothing: the policy
    # is told so, and that it repeated it (the blinking caret used to make screenshots differ).
    steps_script: list[dict[str, Any]] = [
        {"action": "write_element", "element": "full name field", "content": "Ada", "press_enter": False},
        {"action": "scroll", "direction": "down"},  # to the bottom of the form
        {"action": "scroll", "direction": "down"},  # nothing moves any more
        {"action": "scroll", "direction": "down"},
        {"action": "answer", "content": "done"},
    ]
    script = {
        "latency_s": {"policy": 0.5},  # steps as far apart as a blink of the caret
        "elements": {"full name field": [560, 164]},
        "tasks": [
            {
                "id": "press",
                "match": PRESS_GOAL,
                "policy": [{"when": {"step": i}, "action": a} for i, a in enumerate(steps_script, start=1)],
                "validator": {"accept": ["done"], "feedback": "Not done."},
            }
        ],
    }
    async with model_server(script) as server:
        agent = Agent(make_config(server), browser=browser)
        stream = agent.stream(site.url + "/form/", PRESS_GOAL)
        steps = [step async for step in stream]
        await agent.aclose()
    assert stream.result is not None and stream.result.success, stream.result
    assert [(s.unchanged, s.repeated) for s in steps] == [(False, 0), (False, 0), (False, 0), (True, 1), (True, 2)]
