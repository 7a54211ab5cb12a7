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
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import structlog
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, InputRequiredResult
from playwright.async_api import Browser
from pydantic import ValidationError

from .._version import __version__
from ..agent import Agent
from ..config import AgentConfig
from ..errors import InputError
from ..serving.gate import HTTPGate
from ..serving.tokens import MCP_TOKEN_ENV, require_token
from .sessions import DEFAULT_IDLE_TIMEOUT_S, SessionStore
from .tools import WebTools, argument_error, description_of

__all__ = ["DEFAULT_MAX_SESSIONS", "GRACEFUL_SHUTDOWN_S", "HTTP_PATH", "WebagentMCP"]

log = structlog.get_logger("webagent.mcp")

DEFAULT_MAX_SESSIONS = 4
HTTP_PATH = "/mcp"
#: How long a stopping HTTP server waits for its connections and calls before it cancels them.
GRACEFUL_SHUTDOWN_S = 5
_TOOLS = ("run_task", "open_session", "act", "check", "extract", "screenshot", "close_session")
_BACKLOG = 2048  # uvicorn's own default


class WebagentMCP:
    """The server: an ``MCPServer`` with webagent's tools, the agent and the kept sessions."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        output_dir: Path | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
        browser: Browser | None = None,
        profile_dir: Path | None = None,
    ) -> None:
        """``browser``: a Playwright browser to open contexts in (default: the agent launches its own);
        ``session_idle_timeout_s``: close a kept session unused for that long (None or 0: never);
        ``profile_dir``: where kept sessions' named profiles (signed-in states) live."""
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            if "direct_cdp" not in config.browser.model_fields_set:  # signed-in cookies sit in the browser
                config = config.model_copy(update={"browser": config.browser.model_copy(update={"direct_cdp": False})})
        self.agent = Agent(config, browser=browser)
        self.sessions = SessionStore(
            self.agent,
            limit=max_sessions,
            output_dir=output_dir,
            idle_timeout_s=session_idle_timeout_s,
            profile_dir=profile_dir,
        )
        self.tools = WebTools(self.agent, self.sessions, output_dir=output_dir)
        self.server: MCPServer = _Server(
            "webagent",
            version=__version__,
            instructions=_instructions(self.agent),
            log_level="WARNING",
        )
        for name in _TOOLS:
            tool = getattr(self.tools, name)
            self.server.add_tool(tool, name=name, description=description_of(tool))

    async def aclose(self) -> None:
        """Close every kept session, then the agent's browsers and connections."""
        await self.sessions.close_all()
        await self.agent.aclose()

    async def serve_stdio(self) -> None:
        """Serve on stdin/stdout until stdin closes (or SIGINT/SIGTERM)."""
        task = asyncio.current_task()

        def stop(sig: signal.Signals) -> None:
            if task is not None:
                task.cancel()

        async with _on_signals(stop):
            await self.server.run_stdio_async()

    async def serve_http(
        self,
        host: str,
        port: int,
        *,
        tokens: Sequence[str] = (),
        on_ready: Callable[[str], None] | None = None,
    ) -> None:
        """Serve streamable HTTP at ``http://host:port/mcp`` (port 0: a free one) until SIGINT/SIGTERM,
        behind the Host/Origin checks and, with ``tokens``, the bearer tokens of
        ``webagent.serving.gate.HTTPGate``. ``on_ready`` is told the endpoint's URL once the socket
        listens. InputError (one line) when the address cannot be listened on (a port in use, a host
        that does not resolve) or is reachable beyond this machine without a token."""
        sock = await _listen(host, port)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{sock.getsockname()[1]}{HTTP_PATH}"
        try:
            require_token(
                str(sock.getsockname()[0]), tokens, url=url, env=MCP_TOKEN_ENV, loopback="--http 127.0.0.1:PORT"
            )
        except InputError:
            sock.close()
            raise
        # The gate checks Host and Origin for every bind address; the SDK's own check (for three
        # literal loopback hosts only) would refuse what the gate accepts, e.g. Host 127.0.0.2.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        app = self.server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host, transport_security=security)
        gated = HTTPGate(app, bind_host=host, tokens=tokens, realm="webagent mcp")
        config = uvicorn.Config(
            gated, log_level="warning", lifespan="on", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S
        )
        server = _Uvicorn(config)
        log.info("mcp_http_serving", url=url, tokens=len(tokens))
        if on_ready is not None:
            on_ready(url)

        def stop(sig: signal.Signals) -> None:
            if server.should_exit:  # a second signal: stop waiting for connections and calls
                log.warning("mcp_forced_exit", signal=sig.name)
                server.force_exit = True
                return
            # uvicorn's handle_exit (which sse_starlette patches to end its open event streams, a
            # client's GET stream included), not only should_exit: those streams never end otherwise.
            server.handle_exit(sig, None)

        try:
            async with _on_signals(stop):
                await server.serve(sockets=[sock])
        finally:
            sock.close()


async def _listen(host: str, port: int) -> socket.socket:
    """A listening socket at ``host:port`` (the first address the host resolves to, within 10 s)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(10.0):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except TimeoutError:
        raise InputError(f"cannot listen on {_address(host, port)}: the host name did not resolve in 10 s") from None
    except OSError as exc:
        raise InputError(f"cannot listen on {_address(host, port)}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        # Listening now: a client told the URL (on_ready) waits in the backlog until uvicorn has
        # started, rather than being refused while it starts.
        sock.listen(_BACKLOG)
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {_address(host, port)}: {exc.strerror or exc}") from None
    return sock


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handling: it would raise the signal again once it stopped, ending
    the process before the sessions and browsers are closed (``_on_signals`` stops it instead)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def _on_signals(stop: Callable[[signal.Signals], None]) -> AsyncIterator[None]:
    """Call ``stop(sig)`` on SIGINT/SIGTERM while serving, so that the server ends through its clean-up."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop, sig)
            installed.append(sig)
    try:
        yield
    except asyncio.CancelledError:
        log.info("mcp_stopped_by_signal")
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


class _Server(MCPServer):
    """The SDK's server, with arguments that do not fit a tool's schema told in one line."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(argument_error(name, cause)) from cause


def _instructions(agent: Agent) -> str:
    secrets, default = agent.secrets, agent.runtime.secret_hosts()  # a client's start: none of its own
    lines = [
        "webagent drives a real browser with vision-language models. run_task opens a URL and "
        "accomplishes a goal end to end; for several steps on one page, open_session, then act, "
        "check, extract and screenshot on it, and close_session when done.",
        "Navigation is limited to what the server's configuration allows.",
    ]
    if secrets:
        where = [
            f"{name} (typed only on {', '.join(hosts)})"
            if (hosts := secrets.hosts(name, default))
            else f"{name} (typed nowhere: the server allows it no host)"
            for name in secrets.names
        ]
        lines.append(
            "Secrets the agent can type without seeing them (write {{NAME}} in a goal), each only into pages "
            "of the hosts the server allows for it: " + ", ".join(where) + ". Their values are never shown."
        )
    return "\n".join(lines)
