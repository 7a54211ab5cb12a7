"""What a client can make the server open, through the SDK's client: never a local file or another
scheme, and a private or loopback address only when the server was started to allow it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, make_config
from .conftest import GOAL, Connect, text_of

pytestmark = pytest.mark.e2e

READ_FILE_GOAL = "Read the server's password file and tell me what it says."


def _script(site: SiteServer) -> dict[str, Any]:
    """A policy that, asked to read a file, opens it (the goto action), then answers."""
    return {
        "viewport": {"width": 1280, "height": 800},
        "elements": {},
        "tasks": [
            {
                "id": "read-file",
                "match": "password file",
                "policy": [
                    {"when": {"step": 1}, "action": {"action": "goto", "url": "file:///etc/passwd"}},
                    {"action": {"action": "answer", "content": "nothing"}},
                ],
                "validator": {"accept": ["nothing"]},
            }
        ],
        "checks": [],
        "extracts": [],
    }


@pytest.mark.parametrize(
    ("allowed", "private_network"), [(["127.0.0.1"], "auto"), (["127.0.0.1"], "allow"), ([], "allow")]
)
async def test_no_local_file_or_other_scheme_is_ever_opened(
    model_server: ServerFactory,
    connect: Connect,
    site: SiteServer,
    tmp_path: Path,
    allowed: list[str],
    private_network: str,
) -> None:
    async with model_server(_script(site)) as server:
        config = make_config(server)
        config.browser.allowed_domains = allowed
        config.browser.private_network = private_network  # type: ignore[assignment]
        async with connect(config) as client:
            calls = {
                "file": await client.call_tool("open_session", {"url": "file:///etc/passwd"}),
                "directory": await client.call_tool("open_session", {"url": f"file://{tmp_path}/"}),
                "run": await client.call_tool("run_task", {"url": "file:///etc/passwd", "goal": GOAL}),
                "about": await client.call_tool("open_session", {"url": "about:blank"}),
            }
            opened = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
            sid = opened.structured_content["session_id"] if opened.structured_content else ""
            acted = await client.call_tool("act", {"session_id": sid, "goal": READ_FILE_GOAL})
    for name, result in calls.items():
        assert result.is_error, name
        assert "the MCP server opens http and https URLs only" in text_of(result), (name, text_of(result))
        assert [part.type for part in result.content] == ["text"], name  # no screenshot of anything
    # A session's own runs cannot open a file either (the goto action is refused, the page stays).
    assert acted.structured_content is not None, text_of(acted)
    assert acted.structured_content["final_url"] == f"{site.url}/catalog/"
    run_dir = Path(str(acted.structured_content["run_dir"]))
    first = json.loads((run_dir / "trajectory.jsonl").read_text().splitlines()[0])
    assert "file:///etc/passwd was not opened: local files may not be opened" in first["outcome"]


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:{port}", "localhost:{port}", "[::ffff:127.0.0.1]:{port}", "0.0.0.0:{port}", "169.254.169.254"],
)
async def test_a_private_start_url_is_refused_unless_the_server_allows_it(
    model_server: ServerFactory, connect: Connect, site: SiteServer, host: str
) -> None:
    url = f"http://{host.format(port=site.port)}/catalog/"
    async with model_server(_script(site)) as server:
        config = make_config(server)
        async with connect(config) as client:
            refused = await client.call_tool("open_session", {"url": url})
            refused_run = await client.call_tool("run_task", {"url": url, "goal": GOAL})
        for result in (refused, refused_run):
            assert result.is_error
            assert "is a private or local network address" in text_of(result), text_of(result)
            assert "--allow-domain" in text_of(result) and "--private-network allow" in text_of(result)
        if host.startswith("169.254"):
            return
        named = config.model_copy(deep=True)
        named.browser.allowed_domains = [f"127.0.0.1:{site.port}", f"localhost:{site.port}"]
        everything = config.model_copy(deep=True)
        everything.browser.private_network = "allow"
        for allowing in (named, everything):
            async with connect(allowing) as client:
                opened = await client.call_tool("open_session", {"url": url})
            assert not opened.is_error, text_of(opened)
