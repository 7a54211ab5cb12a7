"""Who may talk to ``webagent env serve`` and what its clients may open: a client's start URL is not the
operator's (``file:`` and private starts refused), a MiniWoB++ start opens its own server and nothing
else local; Host, Origin and the bearer token are checked on HTTP and on the ``/ws`` handshake, and a
server bound beyond loopback does not start without a token. Through openenv-core's own client, and
raw requests and handshakes as a rebinding page or a foreign origin would send them."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from webagent.env.openenv import WebAction, WebagentClient
from webagent.testing.sites import SiteServer

from .server import TOKEN, TOKEN_ENV, Served, child_env, serve

pytestmark = pytest.mark.browser

GOAL = "Read the page"


async def refused_start(url: str, task: dict[str, object]) -> str:
    """The error openenv-core's client raises for a reset of ``task``."""
    async with WebagentClient(base_url=url) as client:
        with pytest.raises(RuntimeError) as refused:
            await client.reset(task=task)
        assert (await client.state()).task_id is None  # nothing started
    return str(refused.value)


async def test_a_client_s_file_and_private_starts_are_refused(tmp_path: Path, site: SiteServer) -> None:
    local = f"{site.url}/catalog/"
    async with serve(tmp_path, "--reward", "reference") as served:
        error = await refused_start(served.url, {"url": "file:///etc/passwd", "goal": GOAL, "reference": ["x"]})
        assert "opens http and https URLs only" in error and "file:" in error
        error = await refused_start(served.url, {"url": local, "goal": GOAL, "reference": ["x"]})
        assert "private and loopback addresses" in error and "--allow-domain" in error
        for spelling in (
            f"http://localhost:{site.port}/",
            f"http://0x7f000001:{site.port}/",
            f"http://[::1]:{site.port}/",
        ):
            assert "cannot open" in await refused_start(served.url, {"url": spelling, "goal": GOAL, "reference": ["x"]})
    # An allow-list that does not name the site's host:port opens it no more.
    async with serve(tmp_path, "--reward", "reference", "--allow-domain", f"127.0.0.1:{site.port + 1}") as served:
        error = await refused_start(served.url, {"url": local, "goal": GOAL, "reference": ["x"]})
        assert "cannot open" in error
        assert "opens http and https URLs only" in await refused_start(
            served.url, {"url": "file:///etc/passwd", "goal": GOAL, "reference": ["x"]}
        )
    # The operator's word opens it: the refusals above are the client's start, not a broken site.
    allowed = ("--reward", "reference", "--allow-domain", f"127.0.0.1:{site.port}")
    async with serve(tmp_path, *allowed) as served, WebagentClient(base_url=served.url) as client:
        result = await client.reset(task={"url": local, "goal": GOAL, "reference": ["x"]})
        assert result.observation.url == local
        # ... and a file: page stays shut during its episode.
        result = await client.step(WebAction(action={"action": "goto", "url": "file:///etc/passwd"}))
        assert result.observation.url == local and "was not opened" in (result.observation.error or "")


async def test_a_miniwob_start_opens_neither_files_nor_other_local_ports(tmp_path: Path, site: SiteServer) -> None:
    async with serve(tmp_path) as served, WebagentClient(base_url=served.url) as client:
        result = await client.reset(task="miniwob/click-test", seed=1)
        start = result.observation.url
        assert start.startswith("http://127.0.0.1:") and "/miniwob/click-test.html" in start
        for url in ("file:///root/", "file:///etc/passwd", f"{site.url}/catalog/", "http://localhost:9/"):
            result = await client.step(WebAction(action={"action": "goto", "url": url}))
            obs = result.observation
            assert obs.error and f"{url} was not opened" in obs.error, (url, obs.error)
            assert obs.url == start and "Index of" not in obs.title and "Catalog" not in obs.title, (url, obs.url)
            assert not result.done


async def handshake(url: str, headers: dict[str, str]) -> int:
    """The status of a ``/ws`` handshake with these headers (101 when accepted), sent raw: a forged
    ``Host`` replaces the real one, as a rebinding page's browser sends it."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    fields = {"Host": f"{host}:{port}", "Upgrade": "websocket", "Connection": "Upgrade"}
    fields |= {"Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(), "Sec-WebSocket-Version": "13"}
    fields |= headers
    request = "GET /ws HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    async with asyncio.timeout(30):
        reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
        try:
            writer.write(request.encode())
            await writer.drain()
            status = await reader.readline()
        finally:
            writer.close()
    return int(status.split()[1])


async def get(url: str, path: str, headers: dict[str, str]) -> int:
    async with httpx.AsyncClient(timeout=30) as http:
        return (await http.get(url + path, headers=headers)).status_code


async def check_gate(served: Served, auth: dict[str, str]) -> None:
    """Host and Origin as a rebinding page or a foreign origin sends them, on HTTP and on ``/ws``."""
    url, port = served.url, served.port
    assert await get(url, "/schema", auth) == 200 and await handshake(url, auth) == 101
    for forged, status in (
        ({"Host": f"evil.example:{port}"}, 421),  # a name rebound to this machine
        ({"Origin": "http://evil.example"}, 403),  # a page of a foreign origin
        ({"Origin": "null"}, 403),
        ({"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}, 421),
    ):
        assert await get(url, "/schema", {**auth, **forged}) == status, forged
        assert await get(url, "/state", {**auth, **forged}) == status, forged
        assert await handshake(url, {**auth, **forged}) == status, forged
    local_tool = {"Host": f"localhost:{port}", "Origin": "http://localhost:5173"}
    assert await get(url, "/schema", {**auth, **local_tool}) == 200
    assert await handshake(url, {**auth, **local_tool}) == 101
    assert not any("Traceback" in line for line in served.log), served.log


async def test_host_and_origin_are_checked_on_http_and_on_the_websocket(tmp_path: Path) -> None:
    async with serve(tmp_path, "--host", "127.0.0.2") as served:
        await check_gate(served, {})


async def test_a_token_is_asked_on_http_and_on_the_websocket(tmp_path: Path) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with serve(tmp_path, "--host", "0.0.0.0", env={TOKEN_ENV: TOKEN}) as served:
        url = served.url
        await check_gate(served, auth)
        for wrong in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
            assert await get(url, "/schema", wrong) == 401
            assert await handshake(url, wrong) == 401
            async with httpx.AsyncClient(timeout=30) as http:
                reset = await http.post(f"{url}/reset", json={"task": "miniwob/click-test"}, headers=wrong)
            assert reset.status_code == 401 and reset.headers["www-authenticate"].startswith("Bearer")
        assert await get(url, "/health", {}) == 200  # a container's health check needs no token
        # openenv-core's client without the token cannot connect; with it, it plays.
        with pytest.raises(ConnectionError):
            await WebagentClient(base_url=url, token="").connect()
        async with WebagentClient(base_url=url, token=TOKEN) as client:
            result = await client.reset(task="miniwob/click-test", seed=1)
            assert result.observation.goal == "Click the button."
    # From a file, one token a line; the client reads WEBAGENT_ENV_AUTH_TOKEN by default.
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# trainers\n{TOKEN}\n{TOKEN}-b\n")
    async with serve(tmp_path, "--auth-token-file", str(tokens)) as served:
        assert await handshake(served.url, {}) == 401
        assert await handshake(served.url, {"Authorization": f"Bearer {TOKEN}-b"}) == 101
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(TOKEN_ENV, TOKEN)
            async with WebagentClient(base_url=served.url) as client:
                assert (await client.reset(task="miniwob/click-test", seed=2)).observation.goal


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_bound_beyond_loopback_without_a_token_it_does_not_start(host: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "webagent", "env", "serve", "--host", host, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=180,
        env=child_env(),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "reachable beyond this machine without authentication" in lines[0], lines
    assert TOKEN_ENV in lines[0] and "--auth-token-file" in lines[0]


def test_a_short_token_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "webagent", "env", "serve", "--port", "0", "--auth-token", "short"],
        capture_output=True,
        text=True,
        timeout=180,
        env=child_env(),
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "at least 16 characters" in done.stderr
