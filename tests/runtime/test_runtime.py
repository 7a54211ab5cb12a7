"""The one runtime under every entry point: runs and guarded sessions opened from a ``RunSpec``,
with no ``Agent`` above them."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent.pilot import Pilot
from webagent.runtime import RunSpec, Runtime
from webagent.stream import RunStream
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, load_task_script, make_config

PACKAGE = Path(__file__).resolve().parents[2] / "webagent"


async def test_a_run_spec_runs_on_a_bare_runtime(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server:
        runtime = Runtime(make_config(server), browser=browser)
        try:
            stream = RunStream(runtime, RunSpec(url=task["url"], goal=task["goal"]))
            async for _ in stream:
                pass
        finally:
            await runtime.aclose()
    assert stream.result is not None and stream.result.success
    assert stream.spec.settings is not None and stream.spec.budgets == []


async def test_open_session_is_guarded_until_it_closes(
    browser: Browser, model_server: ServerFactory, site: SiteServer
) -> None:
    async with model_server(load_task_script("catalog-price")) as server:
        config = make_config(server)
        config.browser.blocked_domains = ["blocked.test"]
        runtime = Runtime(config, browser=browser)
        try:
            policy = runtime.navigation_policy(f"{site.url}/catalog/")
            opened: list[object] = []
            async with runtime.open_session(policy, on_open=opened.append) as session:
                assert opened == [session]
                assert session.guard is not None and session.guard.policy is policy
                await session.goto(f"{site.url}/catalog/", start=True)
                pilot = Pilot(runtime, session.page, policy=policy)
                assert (await pilot.screenshot()).startswith(b"\x89PNG")
                context = session.context
            assert context.pages == []  # the pooled context closed with the session
        finally:
            await runtime.aclose()


@pytest.mark.parametrize("module", ["stream.py", "pilot/pilot.py", "runtime/core.py", "runtime/spec.py"])
def test_nothing_below_the_agent_copies_its_signatures(module: str) -> None:
    """Calls go down: no Protocol of what the agent offers (the old ``StreamHost``, ``PilotHost``)."""
    tree = ast.parse((PACKAGE / module).read_text())
    protocols = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "Protocol" for b in node.bases)
    ]
    assert protocols == []
    assert not (PACKAGE / "pilot" / "host.py").exists()
