"""The real ``webagent mcp`` command through the SDK's own clients: over stdio (the way an MCP host
starts it) and over streamable HTTP (``--http``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client

from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory
from .conftest import GOAL, alive, descendants, http_server, mcp_env, role_flags, script, stdio_server, text_of

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
    async with model_server(script()) as server, http_server(server, "--output", str(tmp_path / "runs")) as (proc, url):
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


async def test_sigterm_stops_the_http_server_while_a_client_is_connected_and_mid_call(
    model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    data = script()
    data["latency_s"] = {"validator": 60.0}  # the check below is still waiting for its model when stopped
    async with (
        model_server(data) as server,
        http_server(server, "--output", str(tmp_path / "runs")) as (proc, url),
        contextlib.AsyncExitStack() as stack,
    ):
        client = await stack.enter_async_context(Client(url))  # connected (its event stream open)
        stack.push_async_exit(lambda *exc: _true())  # the server is gone by then: leaving may fail
        opened = await client.call_tool("open_session", {"url": f"{site.url}/catalog/product/blue-widget"})
        assert opened.structured_content is not None, text_of(opened)
        chromium = [pid for pid in descendants(proc.pid) if b"chrom" in _cmdline(pid)]
        assert chromium, "the server has no browser"
        sid = opened.structured_content["session_id"]
        call = asyncio.ensure_future(client.call_tool("check", {"session_id": sid, "statement": "anything"}))
        await asyncio.sleep(1.0)
        assert not call.done()
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(25):
                assert await proc.wait() == 0
        finally:
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
    assert time.monotonic() - started < 25
    for _ in range(50):  # Chromium's helpers end a moment after the browser
        if not any(alive(pid) for pid in chromium):
            break
        await asyncio.sleep(0.2)
    assert not [pid for pid in chromium if alive(pid)], "Chromium outlived the server"


async def _true() -> bool:
    return True


@pytest.mark.parametrize("where", ["busy", "unresolvable"])
def test_an_address_that_cannot_be_listened_on_is_a_one_line_error(where: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}" if where == "busy" else "no-such-host.invalid:8765"
        done = subprocess.run(
            [sys.executable, "-m", "webagent", "mcp", "--http", address, *role_flags("http://127.0.0.1:9")],
            env=mcp_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"webagent: error: cannot listen on {address}: "), done.stderr
    assert "Traceback" not in done.stderr


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
