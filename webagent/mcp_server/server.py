"""``webagent mcp``: the MCP server (the official SDK's ``MCPServer``) over stdio or streamable HTTP.

One ``Agent`` (one pooled Chromium, the model endpoints' connection pools) serves every call;
``run_task`` runs in a context of its own, the session tools on the kept sessions. When the
server stops (stdin closed, SIGINT/SIGTERM) every session is closed, then the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import structlog
import uvicorn
from mcp.server.mcpserver import MCPServer
from playwright.async_api import Browser

from .._version import __version__
from ..agent import Agent
from ..config import AgentConfig
from .sessions import SessionStore
from .tools import WebTools

__all__ = ["DEFAULT_MAX_SESSIONS", "HTTP_PATH", "READY_PREFIX", "WebagentMCP"]

log = structlog.get_logger("webagent.mcp")

DEFAULT_MAX_SESSIONS = 4
HTTP_PATH = "/mcp"
#: What the server prints on stderr once it serves streamable HTTP (then the endpoint's URL).
READY_PREFIX = "webagent mcp: streamable HTTP on "
_TOOLS = ("run_task", "open_session", "act", "check", "extract", "screenshot", "close_session")


class WebagentMCP:
    """The server: an ``MCPServer`` with webagent's tools, the agent and the kept sessions."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        output_dir: Path | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        browser: Browser | None = None,
    ) -> None:
        """``browser``: a Playwright browser to open contexts in (default: the agent launches its own)."""
        self.agent = Agent(config, browser=browser)
        self.sessions = SessionStore(self.agent, limit=max_sessions, output_dir=output_dir)
        self.tools = WebTools(self.agent, self.sessions, output_dir=output_dir)
        self.server: MCPServer = MCPServer(
            "webagent",
            version=__version__,
            instructions=_instructions(self.agent),
            log_level="WARNING",
        )
        for name in _TOOLS:
            self.server.add_tool(getattr(self.tools, name), name=name)

    async def aclose(self) -> None:
        """Close every kept session, then the agent's browsers and connections."""
        await self.sessions.close_all()
        await self.agent.aclose()

    async def serve_stdio(self) -> None:
        """Serve on stdin/stdout until stdin closes (or SIGINT/SIGTERM)."""
        task = asyncio.current_task()

        def stop() -> None:
            if task is not None:
                task.cancel()

        async with _on_signals(stop):
            await self.server.run_stdio_async()

    async def serve_http(self, host: str, port: int) -> None:
        """Serve streamable HTTP at ``http://host:port/mcp`` (port 0: a free one) until SIGINT/SIGTERM."""
        app = self.server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound = sock.getsockname()[1]
        server = _Uvicorn(uvicorn.Config(app, log_level="warning", lifespan="on"))
        shown = f"[{host}]" if ":" in host else host
        print(f"{READY_PREFIX}http://{shown}:{bound}{HTTP_PATH}", file=sys.stderr, flush=True)

        def stop() -> None:
            server.should_exit = True  # uvicorn's graceful shutdown; the sessions close after it

        try:
            async with _on_signals(stop):
                await server.serve(sockets=[sock])
        finally:
            sock.close()


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handling: it would raise the signal again once it stopped, ending
    the process before the sessions and browsers are closed (``_on_signals`` stops it instead)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def _on_signals(stop: Callable[[], None]) -> AsyncIterator[None]:
    """Call ``stop`` on SIGINT/SIGTERM while serving, so that the server ends through its clean-up."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
    try:
        yield
    except asyncio.CancelledError:
        log.info("mcp_stopped_by_signal")
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _instructions(agent: Agent) -> str:
    secrets = agent.secrets.names
    lines = [
        "webagent drives a real browser with vision-language models. run_task opens a URL and "
        "accomplishes a goal end to end; for several steps on one page, open_session, then act, "
        "check, extract and screenshot on it, and close_session when done.",
        "Navigation is limited to what the server's configuration allows.",
    ]
    if secrets:
        lines.append(
            "Secrets the agent can type without seeing them (write {{NAME}} in a goal): "
            + ", ".join(secrets)
            + ". Their values are never shown."
        )
    return "\n".join(lines)
