"""``webagent mcp``: serve the MCP tools over stdio (default) or streamable HTTP (``--http``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from ..config import AgentConfig
from ..errors import ConfigError, InputError

__all__ = ["EXPOSED_WARNING", "READY_PREFIX", "TOKEN_ENV", "parse_http", "run_mcp"]

#: What the command prints on stderr once it serves streamable HTTP (then the endpoint's URL).
READY_PREFIX = "webagent mcp: streamable HTTP on "
#: The environment variable that holds the bearer token of ``--http`` (``--auth-token`` wins over it).
TOKEN_ENV = "WEBAGENT_MCP_AUTH_TOKEN"
#: Printed on stderr before that when other machines can reach the server and no token is set.
EXPOSED_WARNING = (
    "webagent mcp: WARNING: {url} is reachable beyond this machine and has no authentication: anyone who "
    "can connect drives the browser (with this server's secrets and network access). Set a token "
    "({env}=... or --auth-token) or bind a loopback address (--http 127.0.0.1:PORT)."
)


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
    if args.auth_token is not None and http is None:
        raise InputError("--auth-token is for --http: over stdio only the host that started the server talks to it")
    token = args.auth_token or os.environ.get(TOKEN_ENV) or None
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
                await server.serve_http(*http, auth_token=token, on_ready=_print_ready)
        finally:
            await server.aclose()

    asyncio.run(main())
    return 0


def _print_ready(url: str, exposed: bool) -> None:
    if exposed:
        print(EXPOSED_WARNING.format(url=url, env=TOKEN_ENV), file=sys.stderr, flush=True)
    print(f"{READY_PREFIX}{url}", file=sys.stderr, flush=True)
