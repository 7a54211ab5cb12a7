"""The human hand-off: the policy's ``ask_user`` (a 2FA code) answered by a library callback while the
run keeps its browser (the sign-in's pending cookie lives in that context) and its clock paused; no
one to ask, no answer, or none in time end the run ``needs_human``; batch and suites count it apart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from webagent import Agent
from webagent.batch.results import read_results
from webagent.batch.runner import BatchRunner
from webagent.batch.summary import summarize
from webagent.config import AgentConfig
from webagent.loop import HumanRequest
from webagent.suite.model import load_suite
from webagent.suite.runner import run_suite
from webagent.tasks import load_tasks
from webagent.testing.server import FakeModelServer
from webagent.testing.teamscripts import item_goal, item_suite, team_script
from webagent.testing.teamsite import OTP_CODE, PASSWORD, TeamSite, item_status

from ..conftest import ServerFactory, make_config

pytestmark = pytest.mark.e2e


def _config(server: FakeModelServer, site: TeamSite | None = None, **agent: object) -> AgentConfig:
    config = make_config(server, **agent)
    config.secrets = {"PASSWORD": PASSWORD}  # type: ignore[assignment]
    if site is not None:  # a task or suite file's runs type it only where the operator allows it
        config.secret_hosts = {"PASSWORD": [f"{site.host}:{site.port}"]}
    return config


async def test_a_person_gives_the_code_and_the_run_goes_on_in_the_same_browser(
    model_server: ServerFactory, team_site: TeamSite
) -> None:
    asked: list[HumanRequest] = []

    async def person(request: HumanRequest) -> str:
        asked.append(request)
        await asyncio.sleep(2.5)  # longer than the run may take of its own time: paused out
        return OTP_CODE

    async with model_server(team_script(items=1, ask_code=True)) as server:
        config = _config(server, max_time_s=60.0)
        async with Agent(config, ask_user=person) as agent:
            stream = agent.stream(f"{team_site.url}/app/item/1", item_goal(1))
            steps = [step async for step in stream]
    result = stream.result
    assert result is not None and result.success, result
    assert [r.question for r in asked] == ["What is the 6-digit code from the authenticator app?"]
    assert "/2fa" in asked[0].url and asked[0].goal == item_goal(1)
    asking = next(s for s in steps if s.action is not None and s.action.action == "ask_user")
    assert asking.outcome == f"the user answered: {OTP_CODE}"
    assert result.answer == f"Item 1 is {item_status(1)}"


@pytest.mark.parametrize("how", ["nobody", "no answer", "too late"])
async def test_without_an_answer_the_run_ends_needing_a_person(
    model_server: ServerFactory, team_site: TeamSite, how: str
) -> None:
    async def silent(request: HumanRequest) -> str | None:
        if how == "too late":
            await asyncio.sleep(60)
        return None

    async with model_server(team_script(items=1, ask_code=True)) as server:
        config = _config(server, ask_user_timeout_s=0.5)
        async with Agent(config, ask_user=None if how == "nobody" else silent) as agent:
            result = await agent.run(f"{team_site.url}/app/item/1", item_goal(1))
    assert result.stop_reason == "needs_human" and not result.success
    assert "What is the 6-digit code" in result.message
    if how == "too late":
        assert "no answer within 0.5 s" in result.message


async def test_batch_and_suites_count_tasks_that_need_a_person_apart(
    model_server: ServerFactory, team_site: TeamSite, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": c["name"], "url": c["url"], "goal": c["goal"]}) + "\n"
                             for c in item_suite(team_site.url, 2)))  # fmt: skip
    suite_file = tmp_path / "suite.jsonl"
    suite_file.write_text("".join(json.dumps(c) + "\n" for c in item_suite(team_site.url, 2)))
    async with model_server(team_script(items=2, ask_code=True)) as server:
        config = _config(server, team_site)
        runner = BatchRunner(config, load_tasks(tasks), tmp_path / "batch", concurrency=2)
        await runner.run()
        summary = summarize(read_results(tmp_path / "batch"), runner.stats, config, attempts=1)
        totals, _items, _ = await run_suite(config, load_suite(suite_file), tmp_path / "suite", concurrency=2)
    assert summary.needs_human == 2 and summary.errors == 0 and summary.succeeded == 0
    assert totals["needs_human"] == 2 and totals["failed"] == 0 and totals["passed"] == 0
    junit = (tmp_path / "suite" / "junit.xml").read_text()
    assert junit.count("<skipped") == 2 and "needs a person" in junit and "<failure" not in junit
