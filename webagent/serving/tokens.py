"""Where a server's bearer tokens come from, and when one is required.

A token is given with ``--auth-token TOKEN`` (visible to other local users in the process list),
``--auth-token-file PATH`` (one token a line: several clients, each its own token; blank lines and
``#`` comments skipped), or the server's environment variable (``WEBAGENT_MCP_AUTH_TOKEN``,
``WEBAGENT_ENV_AUTH_TOKEN``), read when neither flag is given. A token has at least
``MIN_TOKEN_LENGTH`` characters and no whitespace. A server bound beyond loopback (``0.0.0.0``, a
LAN address) refuses to start without one (``require_token``): whoever can connect would drive its
browser, with its secrets and network access.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import InputError
from ..inputs import read_text

__all__ = [
    "ENV_TOKEN_ENV",
    "MCP_TOKEN_ENV",
    "MIN_TOKEN_LENGTH",
    "add_token_options",
    "is_loopback_bind",
    "read_tokens",
    "require_token",
]

#: The environment variables of the servers' tokens (``webagent mcp --http``, ``webagent env serve``).
MCP_TOKEN_ENV = "WEBAGENT_MCP_AUTH_TOKEN"
ENV_TOKEN_ENV = "WEBAGENT_ENV_AUTH_TOKEN"
MIN_TOKEN_LENGTH = 16
_MAX_TOKEN_FILE = 1 << 20


def add_token_options(parser: argparse.ArgumentParser, *, env: str, scope: str = "") -> None:
    """``--auth-token`` and ``--auth-token-file`` on ``parser``; ``env``: the variable read without them;
    ``scope``: what the options are for, put before their help (``with --http: ``)."""
    parser.add_argument(
        "--auth-token",
        metavar="TOKEN",
        help=f"{scope}every request must carry 'Authorization: Bearer TOKEN' (prefer the {env} environment "
        "variable or --auth-token-file: command lines are visible to other users); required when bound "
        "beyond loopback",
    )
    parser.add_argument(
        "--auth-token-file",
        metavar="PATH",
        help=f"{scope}read the bearer token from this file (one token a line: each client its own)",
    )


def is_loopback_bind(address: str) -> bool:
    """Whether a bound socket's address (an IP) is reachable from this machine only."""
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _checked(token: str, where: str) -> str:
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
        raise InputError(
            f"{where}: a token has at least {MIN_TOKEN_LENGTH} characters and no spaces "
            "(e.g. the output of: openssl rand -hex 32)"
        )
    return token


def read_tokens(token: str | None, token_file: str | None, env: str) -> list[str]:
    """The tokens a server accepts: ``--auth-token``, the lines of ``--auth-token-file``, or ``env``'s
    value; none when none is given. InputError (one line) for both flags at once, an unreadable or
    empty file, a token too short."""
    if token is not None and token_file is not None:
        raise InputError("give --auth-token or --auth-token-file, not both")
    if token is not None:
        return [_checked(token, "--auth-token")]
    if token_file is not None:
        path = Path(token_file)
        text = read_text(path, "token file", limit=_MAX_TOKEN_FILE)
        lines = [line.strip() for line in text.splitlines()]
        tokens = [_checked(line, f"{path}:{n}") for n, line in enumerate(lines, 1) if line and not line.startswith("#")]
        if not tokens:
            raise InputError(f"--auth-token-file {path} holds no token")
        return list(dict.fromkeys(tokens))
    value = os.environ.get(env, "").strip()
    return [_checked(value, env)] if value else []


def require_token(bound: str, tokens: Sequence[str], *, url: str, env: str, loopback: str) -> None:
    """InputError (one line) when a server listening on ``bound`` (its socket's address) is reachable
    beyond this machine and has no token; ``loopback`` says how to bind loopback instead."""
    if tokens or is_loopback_bind(bound):
        return
    raise InputError(
        f"{url} would be reachable beyond this machine without authentication: set a token "
        f"({env}=..., --auth-token-file PATH or --auth-token) or bind a loopback address ({loopback})"
    )
