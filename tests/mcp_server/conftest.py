"""Helpers and fixtures of the MCP server tests: the script, the agent flags, a dead port, tool results as
data, a server in process with its client (``connect``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult
from playwright.async_api import Browser

from webagent.config import AgentConfig
from webagent.mcp_server import WebagentMCP
from webagent.mcp_server.cli import READY_PREFIX
from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer

from ..conftest import make_config
from ..pilot.conftest import pilot_script
from ..procs import alive, descendants

__all__ = [
    "GOAL",
    "REPO",
    "Connect",
    "alive",
    "connect",
    "dead_url",
    "descendants",
    "http_server",
    "local_config",
    "mcp_env",
    "role_flags",
    "script",
    "stdio_server",
    "text_of",
]

REPO = Path(__file__).resolve().parents[2]
GOAL = "Find the price of the Blue Widget in the local product catalog and answer with the price."


def script() -> dict[str, Any]:
    return pilot_script()


#: The local test sites are loopback addresses, which the server opens only when told to.
LOCAL_FLAGS = ["--private-network", "allow"]


def local_config(server: FakeModelServer) -> AgentConfig:
    """``make_config`` for a server whose clients open the local test sites (private addresses allowed)."""
    config = make_config(server)
    config.browser.private_network = "allow"
    return config


def dead_url() -> str:
    """A URL on a local port that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    return f"http://127.0.0.1:{port}"


def role_flags(base: str, profile: str = "holo1.5") -> list[str]:
    """The flags pointing the three roles at an offline model server at ``base``."""
    flags = ["--localizer-profile", profile, "--model", PROFILE_MODELS[profile], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", f"{base}/{role}/v1"]
    return flags


def mcp_env() -> dict[str, str]:
    """The environment of a ``webagent mcp`` child: no WEBAGENT_ settings, this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def stdio_server(server: FakeModelServer, *args: str) -> StdioServerParameters:
    """``python -m webagent mcp`` on the offline server, as an MCP host would start it."""
    env = mcp_env()
    command = [sys.executable, "-m", "webagent", "mcp", *role_flags(server.url), *LOCAL_FLAGS, *args]
    return StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(REPO))


def text_of(result: CallToolResult) -> str:
    """The text parts of a tool result."""
    return "\n".join(getattr(part, "text", "") for part in result.content)


@contextlib.asynccontextmanager
async def http_server(
    server: FakeModelServer,
    *args: str,
    address: str = "127.0.0.1:0",
    env: dict[str, str] | None = None,
    banner: list[str] | None = None,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``python -m webagent mcp --http ADDRESS`` on the offline server: the process and the
    endpoint's URL once it is ready (killed at the end if it is still running); ``banner`` gets
    the lines it printed on stderr before it was ready."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "webagent",
        "mcp",
        "--http",
        address,
        *LOCAL_FLAGS,
        *args,
        *role_flags(server.url),
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        env={**mcp_env(), **(env or {})},
    )
    try:
        assert proc.stderr is not None
        async with asyncio.timeout(60):
            line = (await proc.stderr.readline()).decode()
            while not line.startswith(READY_PREFIX):
                assert line, "the server exited before it was ready"
                if banner is not None:
                    banner.append(line)
                line = (await proc.stderr.readline()).decode()
        yield proc, line.removeprefix(READY_PREFIX).strip()
    finally:
        if proc.returncode is None:
            proc.kill()
            with contextlib.suppress(ProcessLookupError):
                await proc.wait()


Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect(browser: Browser, tmp_path: Path) -> Connect:
    """``async with connect(config, max_sessions=...) as client``: a server in process, its client."""

    @asynccontextmanager
    async def open_client(config: AgentConfig, **kwargs: Any) -> AsyncIterator[Client]:
        app = WebagentMCP(config, output_dir=tmp_path / "runs", browser=browser, **kwargs)
        try:
            async with Client(app.server) as client:
                yield client
        finally:
            await app.aclose()
        assert app.sessions.ids == []  # every kept session is closed when the server stops

    return open_client
