"""The MCP server's human hand-off, with the official MCP client: the policy's ``ask_user`` (a 2FA
code) reaches the client as an elicitation while the session's browser waits; the answer goes on
with the same session; a client that declines, cannot elicit, or talks over a transport with no
back-channel for mid-call requests gets ``needs_human``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from playwright.async_api import Browser

from webagent.mcp_server import WebagentMCP
from webagent.testing.teamscripts import item_goal, team_script
from webagent.testing.teamsite import OTP_CODE, PASSWORD, TeamSite, item_status

from ..conftest import ServerFactory
from .conftest import local_config, text_of

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def team_site() -> Iterator[TeamSite]:
    with TeamSite() as site:
        yield site


@pytest.mark.parametrize("tool", ["run_task", "act"])
async def test_a_question_is_an_elicitation_and_its_answer_signs_in(
    browser: Browser, model_server: ServerFactory, team_site: TeamSite, tmp_path: Path, tool: str
) -> None:
    asked: list[str] = []

    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"answer": OTP_CODE})

    async with model_server(team_script(items=1, ask_code=True)) as server:
        config = local_config(server)
        config.secrets = {"PASSWORD": PASSWORD}  # type: ignore[assignment]
        config.secret_hosts = {"PASSWORD": [f"{team_site.host}:{team_site.port}"]}  # the operator's site
        app = WebagentMCP(config, output_dir=tmp_path / "runs", browser=browser)
        try:
            # A session of the protocol before 2026-07-28: the server asks mid-call (elicitation/create).
            async with Client(app.server, mode="legacy", elicitation_callback=answer) as client:
                url = f"{team_site.url}/app/item/1"
                if tool == "run_task":
                    result = await client.call_tool("run_task", {"url": url, "goal": item_goal(1)})
                else:
                    opened = await client.call_tool("open_session", {"url": url})
                    session = opened.structured_content["session_id"]  # type: ignore[index]
                    result = await client.call_tool("act", {"session_id": session, "goal": item_goal(1)})
        finally:
            await app.aclose()
    outcome = result.structured_content
    assert outcome is not None and outcome["success"], text_of(result)
    assert outcome["answer"] == f"Item 1 is {item_status(1)}"
    assert len(asked) == 1 and "What is the 6-digit code" in asked[0]


@pytest.mark.parametrize("client_does", ["decline", "nothing", "no back-channel"])
async def test_no_answer_from_the_client_is_needs_human(
    browser: Browser, model_server: ServerFactory, team_site: TeamSite, tmp_path: Path, client_does: str
) -> None:
    async def decline(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="decline")

    async with model_server(team_script(items=1, ask_code=True)) as server:
        config = local_config(server)
        config.secrets = {"PASSWORD": PASSWORD}  # type: ignore[assignment]
        config.secret_hosts = {"PASSWORD": [f"{team_site.host}:{team_site.port}"]}  # the operator's site
        app = WebagentMCP(config, output_dir=tmp_path / "runs", browser=browser)
        callback = decline if client_does != "nothing" else None
        # Without a back-channel (the stateless protocol in process) nothing can be asked mid-call.
        mode = "auto" if client_does == "no back-channel" else "legacy"
        try:
            async with Client(app.server, mode=mode, elicitation_callback=callback) as client:
                result = await client.call_tool(
                    "run_task", {"url": f"{team_site.url}/app/item/1", "goal": item_goal(1)}
                )
        finally:
            await app.aclose()
    outcome = result.structured_content
    assert outcome is not None and outcome["stop_reason"] == "needs_human", text_of(result)
    assert not outcome["success"] and "What is the 6-digit code" in outcome["message"]
