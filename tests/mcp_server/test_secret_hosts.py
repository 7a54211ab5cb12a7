"""An MCP client cannot steer a secret to a page of its own: a secret is typed only on the hosts the
operator allowed for it, and a client's start URL is not one of them. Through the SDK's client, real
Chromium, the offline model server scripted to write ``{{CODE}}`` into the sign-in page the client
chose; the page's server records every request it gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from pydantic import SecretStr

from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory
from .conftest import Connect, local_config, text_of

pytestmark = pytest.mark.e2e

VALUE = "mcp-s3cr3t-C0de!"
FORMS = (VALUE, quote(VALUE, safe=""), quote_plus(VALUE))
GOAL = "Sign in to the test site as ada with the access code, then say whether you are signed in."

SCRIPT: dict[str, Any] = {
    "tasks": [
        {
            "id": "client-steers-a-secret",
            "match": "Sign in to the test site",
            "elements": {"user field": [560, 164], "access code field": [560, 244]},
            "policy": [
                {"when": {"url": "/safety/login?user="}, "action": {"action": "answer", "content": "signed in"}},
                {"when": {"step": 1}, "action": {"action": "write_element", "element": "user field", "content": "ada"}},
                {
                    "when": {"step": 2},
                    "action": {
                        "action": "write_element",
                        "element": "access code field",
                        "content": "{{CODE}}",
                        "press_enter": True,
                    },
                },
                {"when": {}, "action": {"action": "answer", "content": "not signed in"}},
            ],
            "validator": {"accept": ["signed in"]},
        }
    ]
}


def _leaked(data: str | bytes) -> bool:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return any(form in text for form in FORMS)


@pytest.mark.parametrize("tool", ["run_task", "act"])
@pytest.mark.parametrize("allowed", [False, True])
async def test_a_client_cannot_steer_a_secret_to_its_own_page(
    model_server: ServerFactory, connect: Connect, tmp_path: Path, tool: str, allowed: bool
) -> None:
    with SiteServer() as site:  # the client's own site
        async with model_server(SCRIPT) as server:
            config = local_config(server)  # the server opens private addresses: the client's page opens
            config.secrets = {"CODE": SecretStr(VALUE)}
            if allowed:  # the operator allows it on that host: then it is typed there, as for a run of its own
                config.secret_hosts = {"CODE": [f"127.0.0.1:{site.port}"]}
            async with connect(config) as client:
                instructions = client.instructions or ""
                url = f"{site.url}/safety/login"
                if tool == "run_task":
                    result = await client.call_tool("run_task", {"url": url, "goal": GOAL})
                else:
                    opened = await client.call_tool("open_session", {"url": url})
                    session = opened.structured_content["session_id"]  # type: ignore[index]
                    result = await client.call_tool("act", {"session_id": session, "goal": GOAL})
        hits, logins, port = list(site.safety_hits), list(site.logins), site.port
    outcome = result.structured_content
    assert outcome is not None and not result.is_error, text_of(result)
    if allowed:
        assert "CODE (typed only on 127.0.0.1:" in instructions
        assert logins == [{"user": "ada", "code": VALUE}] and outcome["answer"] == "signed in"
        return
    # The client's page never got the value: no request with it, no sign-in; the policy was told why.
    assert "CODE (typed nowhere: the server allows it no host)" in instructions and VALUE not in instructions
    assert logins == [] and not any(_leaked(path) for _, path in hits), hits
    assert outcome["answer"] == "not signed in"
    trajectory = (Path(outcome["run_dir"]) / "trajectory.jsonl").read_text()
    assert f"the secret CODE was not typed: it may not be typed on 127.0.0.1:{port}" in trajectory
    assert "allowed: no host in this run" in trajectory
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file():
            assert not _leaked(path.read_bytes()), path
    assert not _leaked(text_of(result))
