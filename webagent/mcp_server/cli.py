"""``webagent mcp``: serve the MCP tools over stdio (default) or streamable HTTP (``--http``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

from ..config import AgentConfig
from ..errors import ConfigError, InputError
from ..serving.tokens import MCP_TOKEN_ENV, add_token_options, read_tokens

__all__ = ["COMMAND", "READY_PREFIX", "TOKEN_ENV", "parse_http", "run_mcp"]

#: What the command prints on stderr once it serves streamable HTTP (then the endpoint's URL).
READY_PREFIX = "webagent mcp: streamable HTTP on "
#: The environment variable that holds the bearer token of ``--http`` (read without ``--auth-token``
#: and ``--auth-token-file``).
TOKEN_ENV = MCP_TOKEN_ENV


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; ``:PORT`` for 127.0.0.1) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not sep or not port.isdigit() or int(port) > 65535:
        raise InputError(f"--http expects HOST:PORT, e.g. 127.0.0.1:8765; got {value!r}")
    return host, int(port)


def run_mcp(args: argparse.Namespace, config: AgentConfig) -> int:
    """Serve until stdin closes (stdio) or the process is stopped; 0 afterwards."""
    if args.max_sessions < 1:
        raise InputError("--max-sessions must be at least 1")
    if args.session_idle_timeout < 0:
        raise InputError("--session-idle-timeout must be 0 (never) or a number of seconds")
    http = parse_http(args.http) if args.http else None
    for given, flag in ((args.auth_token, "--auth-token"), (args.auth_token_file, "--auth-token-file")):
        if given is not None and http is None:
            raise InputError(f"{flag} is for --http: over stdio only the host that started the server talks to it")
    tokens = read_tokens(args.auth_token, args.auth_token_file, TOKEN_ENV) if http is not None else []
    try:
        from .server import WebagentMCP
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("mcp", "uvicorn", "jsonschema", "starlette"):
            raise ConfigError("webagent mcp needs the MCP SDK: pip install 'webagent[mcp]'") from None
        raise
    server = WebagentMCP(
        config,
        output_dir=Path(args.output),
        max_sessions=args.max_sessions,
        session_idle_timeout_s=args.session_idle_timeout,
        profile_dir=Path(args.profile_dir) if args.profile_dir else None,
    )

    async def main() -> None:
        try:
            if http is None:
                await server.serve_stdio()
            else:
                await server.serve_http(*http, tokens=tokens, on_ready=_print_ready)
        finally:
            await server.aclose()

    asyncio.run(main())
    return 0


def _print_ready(url: str) -> None:
    print(f"{READY_PREFIX}{url}", file=sys.stderr, flush=True)


class McpCommand:
    """``webagent mcp``: webagent's tools to other agents."""

    name = "mcp"
    help = "serve webagent's tools to other agents (Model Context Protocol)"

    def add_arguments(
        self, parser: argparse.ArgumentParser, config_options: Callable[[argparse.ArgumentParser], None]
    ) -> None:
        parser.description = (
            "Serve the MCP tools run_task, open_session, act, check, extract, screenshot and "
            "close_session over stdio (the default: an MCP host starts this command) or streamable HTTP "
            "(--http). The config, allow-lists and secrets are the same as for 'webagent run'; secrets are "
            "named to the client, never shown. Clients open http(s) URLs only, and private or loopback "
            "addresses only when the server allows them (--allow-domain naming the host, or "
            "--private-network allow). Over HTTP, Host and Origin are checked and a bearer token is asked "
            "when one is set (required when bound beyond loopback). Needs the mcp extra: pip install "
            "'webagent[mcp]'. See docs/mcp.md."
        )
        parser.add_argument(
            "--http",
            metavar="HOST:PORT",
            help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: a free one, printed on "
            "stderr)",
        )
        add_token_options(parser, env=MCP_TOKEN_ENV, scope="with --http: ")
        parser.add_argument(
            "--max-sessions", type=int, default=4, metavar="N", help="browser sessions kept open at once (default 4)"
        )
        parser.add_argument(
            "--session-idle-timeout",
            type=float,
            default=900.0,
            metavar="SECONDS",
            help="close a kept session unused for this long (default 900; 0: never)",
        )
        parser.add_argument(
            "--output", default="runs/mcp", metavar="DIR", help="where run directories are written (default runs/mcp)"
        )
        parser.add_argument(
            "--profile-dir",
            metavar="DIR",
            help="keep named profiles here, DIR/NAME/ each (0700, locked while a session uses it): "
            "open_session(profile=NAME) loads NAME's signed-in state and saves it back (0600) after each act "
            "and at close",
        )
        config_options(parser)

    def run(self, args: argparse.Namespace, config: Callable[[], AgentConfig]) -> int:
        return run_mcp(args, config())


COMMAND = McpCommand()
