"""The real ``webagent mcp`` command through the SDK's own clients: over stdio (the way an MCP host
starts it) and over streamable HTTP (``--http``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest
from mcp import Client

from webagent.mcp_server.server import READY_PREFIX
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory
from .conftest import GOAL, REPO, role_flags, script, stdio_server, text_of

pytestmark = pytest.mark.e2e
TOOLS = ["act", "check", "close_session", "extract", "open_session", "run_task", "screenshot"]


async def test_stdio_serves_the_tools_to_an_mcp_host(
    model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    async with model_server(script()) as server, asyncio.timeout(120):
        params = stdio_server(server, "--output", str(tmp_path / "runs"), "--max-sessions", "2")
        async with Client(params) as client:
            assert sorted(t.name for t in (await client.list_tools()).tools) == TOOLS
            task = await client.call_tool("run_task", {"url": f"{site.url}/catalog/", "goal": GOAL})
            opened = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
            assert opened.structured_content is not None, text_of(opened)
            sid = opened.structured_content["session_id"]
            acted = await client.call_tool("act", {"session_id": sid, "goal": GOAL, "max_steps": 5})
            check = await client.call_tool(
                "check", {"session_id": sid, "statement": "The page shows the Blue Widget at $12.50"}
            )
            wrong = await client.call_tool("check", {"session_id": sid, "statement": "search results are shown"})
            shot = await client.call_tool("screenshot", {"session_id": sid})
            unknown = await client.call_tool("screenshot", {"session_id": "nope"})
            closed = await client.call_tool("close_session", {"session_id": sid})
    assert task.structured_content is not None and task.structured_content["answer"] == "$12.50"
    run_dir = str(task.structured_content["run_dir"])
    assert run_dir.startswith(str(tmp_path / "runs"))
    assert (tmp_path / "runs" / run_dir.rpartition("/")[2] / "report.html").is_file()
    assert acted.structured_content is not None and acted.structured_content["success"]
    assert check.structured_content is not None and check.structured_content["holds"]
    assert wrong.structured_content is not None and not wrong.structured_content["holds"]
    assert wrong.structured_content["feedback"] == "This is not a search results page."
    assert [part.type for part in shot.content] == ["image"]
    assert unknown.is_error and "SessionError: no open session has the id 'nope'" in text_of(unknown)
    assert not closed.is_error
    assert (tmp_path / "runs" / f"session-{sid}" / "act-1" / "result.json").is_file()


async def test_streamable_http_serves_the_tools_and_stops_cleanly(
    model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    async with model_server(script()) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "webagent",
            "mcp",
            "--http",
            "127.0.0.1:0",
            "--output",
            str(tmp_path / "runs"),
            *role_flags(server.url),
            stderr=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            env=env,
        )
        try:
            assert proc.stderr is not None
            async with asyncio.timeout(60):
                line = (await proc.stderr.readline()).decode()
                while not line.startswith(READY_PREFIX):
                    assert line, "the server exited before it was ready"
                    line = (await proc.stderr.readline()).decode()
            url = line.removeprefix(READY_PREFIX).strip()
            assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
            async with asyncio.timeout(90), Client(url) as client:
                assert sorted(t.name for t in (await client.list_tools()).tools) == TOOLS
                opened = await client.call_tool("open_session", {"url": f"{site.url}/catalog/product/blue-widget"})
                assert opened.structured_content is not None, text_of(opened)
                sid = opened.structured_content["session_id"]
                check = await client.call_tool(
                    "check", {"session_id": sid, "statement": "The page shows the Blue Widget at $12.50"}
                )
                refused = await client.call_tool("open_session", {"url": "ftp://example.com/"})
            assert check.structured_content is not None and check.structured_content["holds"]
            assert refused.is_error and "InputError: invalid URL" in text_of(refused)
            proc.send_signal(signal.SIGTERM)  # the session left open is closed with the server
            async with asyncio.timeout(30):
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                with contextlib.suppress(ProcessLookupError):
                    await proc.wait()
