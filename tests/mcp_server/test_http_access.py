"""Who may talk to ``webagent mcp --http``: the real command, the SDK's own client, and forged
requests as a DNS-rebinding page would send them, on bind addresses beyond the three literal
loopback ones; and the bearer token."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.datastructures import Headers

from webagent.mcp_server.cli import TOKEN_ENV
from webagent.serving.gate import HTTPGate

from ..conftest import ServerFactory
from .conftest import dead_url, http_server, mcp_env, role_flags, script

pytestmark = pytest.mark.e2e

TOOLS = ["act", "check", "close_session", "extract", "open_session", "run_task", "screenshot"]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}


async def _post(url: str, headers: dict[str, str]) -> int:
    """The status of an initialize request with these headers (forged ones included)."""
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=30) as client:
        reply = await client.post(url, content=json.dumps(INITIALIZE), headers={**base, **headers})
        return reply.status_code


async def _tools(url: str, headers: dict[str, str] | None = None) -> list[str]:
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=30) as http,
        asyncio.timeout(60),
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return sorted(t.name for t in (await client.list_tools()).tools)


TOKEN = "s3cret-t0ken-for-the-test"


@pytest.mark.parametrize("address", ["127.0.0.2:0", "0.0.0.0:0"])
async def test_host_and_origin_are_checked_on_every_bind_address(model_server: ServerFactory, address: str) -> None:
    exposed = address.startswith("0.0.0.0")
    env = {TOKEN_ENV: TOKEN} if exposed else {}  # beyond loopback a token is required
    auth = {"Authorization": f"Bearer {TOKEN}"} if exposed else {}
    async with model_server(script()) as server, http_server(server, address=address, env=env) as (_, url):
        url = url.replace("0.0.0.0", "127.0.0.1")
        port = url.split(":")[2].split("/")[0]
        assert await _tools(url, auth) == TOOLS  # the SDK's client: no Origin, an address as Host
        assert await _post(url, auth) == 200
        assert await _post(url, {**auth, "Host": f"evil.example:{port}"}) == 421  # a rebinding page's name
        assert await _post(url, {**auth, "Origin": f"http://evil.example:{port}"}) == 403
        assert await _post(url, {**auth, "Origin": "null"}) == 403
        assert (
            await _post(url, {**auth, "Host": f"localhost:{port}", "Origin": "http://localhost:6274"}) == 200
        )  # a local inspector


async def test_a_bearer_token_is_required_when_set(model_server: ServerFactory, tmp_path: Path) -> None:
    async with (
        model_server(script()) as server,
        http_server(server, address="0.0.0.0:0", env={TOKEN_ENV: TOKEN}) as (_, url),
    ):
        url = url.replace("0.0.0.0", "127.0.0.1")
        assert await _post(url, {}) == 401
        assert await _post(url, {"Authorization": "Bearer wrong"}) == 401
        assert await _post(url, {"Authorization": f"Basic {TOKEN}"}) == 401
        with pytest.raises(Exception):  # noqa: B017 - the SDK's client fails to initialize, whatever it raises
            await _tools(url)
        assert await _tools(url, {"Authorization": f"Bearer {TOKEN}"}) == TOOLS
    async with model_server(script()) as server, http_server(server, "--auth-token", TOKEN) as (_, url):
        assert await _post(url, {}) == 401
        assert await _tools(url, {"Authorization": f"Bearer {TOKEN}"}) == TOOLS
    # A token file: one token a line, each client its own.
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# clients\n{TOKEN}\n\n{TOKEN}-second\n")
    async with model_server(script()) as server, http_server(server, "--auth-token-file", str(tokens)) as (_, url):
        assert await _post(url, {}) == 401
        assert await _tools(url, {"Authorization": f"Bearer {TOKEN}-second"}) == TOOLS
        assert await _post(url, {"Authorization": f"Bearer {TOKEN}"}) == 200


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0"])
def test_bound_beyond_loopback_without_a_token_it_does_not_start(address: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "webagent", "mcp", "--http", address, *role_flags(dead_url())],
        capture_output=True,
        text=True,
        timeout=120,
        env=mcp_env(),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "reachable beyond this machine without authentication" in lines[0], lines
    assert TOKEN_ENV in lines[0] and "--auth-token-file" in lines[0]


@pytest.mark.parametrize(
    ("bind", "host", "origin", "ok"),
    [
        ("192.168.1.5", "192.168.1.5:8765", None, True),
        ("192.168.1.5", "[::ffff:192.168.1.5]:8765", None, True),
        ("0.0.0.0", "10.0.0.7:8765", "http://10.0.0.7:8765", True),
        ("0.0.0.0", "10.0.0.7:8765", "http://10.0.0.8:3000", False),
        ("gpu-box.lan", "gpu-box.lan:8765", None, True),
        ("gpu-box.lan", "GPU-BOX.LAN.:8765", "http://gpu-box.lan:8765", True),
        ("gpu-box.lan", "evil.example:8765", None, False),
        ("127.0.0.2", "localhost:8765", "http://[::1]:5173", True),
        ("127.0.0.2", "localhost.evil.example:8765", None, False),
        ("127.0.0.2", "", None, False),
        ("127.0.0.2", "127.0.0.2:x", None, False),
    ],
)
def test_the_gate_rules(bind: str, host: str, origin: str | None, ok: bool) -> None:
    gate = HTTPGate(_never, bind_host=bind)
    headers: list[tuple[bytes, bytes]] = [(b"host", host.encode())] if host else []
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    assert (gate.refusal(Headers(raw=headers)) is None) == ok


async def _never(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("not reached")


def test_a_token_without_http_is_a_usage_error() -> None:
    from webagent.cli import build_parser, config_from_args
    from webagent.errors import InputError
    from webagent.mcp_server.cli import run_mcp

    for flag in ("--auth-token", "--auth-token-file"):
        args = build_parser().parse_args(["mcp", flag, "x" * 20, "--base-url", "http://127.0.0.1:9/v1"])
        with pytest.raises(InputError, match=f"{flag} is for --http"):
            run_mcp(args, config_from_args(args))
