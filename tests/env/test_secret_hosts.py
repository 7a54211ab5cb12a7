"""An environment's client cannot steer a secret to a page of its own: the task URL it resets to is
not the operator's start, so a secret is typed there only when the operator allowed that host for it
(its hosts, or ``allowed_domains``). Real Chromium, the offline model server, the local sites; the
page's server records what it receives."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser
from pydantic import SecretStr

from webagent import Agent, WebEnv
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, make_config

pytestmark = pytest.mark.browser

VALUE = "env-s3cr3t-C0de"
CODE = {"action": "write_element", "element": "access code field", "content": "{{CODE}}", "press_enter": True}
GOAL = "Sign in to the test site as ada with the access code."


@pytest.mark.parametrize("allowed", [False, True])
async def test_a_client_task_url_does_not_get_the_secrets_typed_there(
    browser: Browser, model_server: ServerFactory, tmp_path: Path, allowed: bool
) -> None:
    elements = {"access code field": [560, 244]}
    script = {"tasks": [{"id": "login", "match": "Sign in to the test site", "elements": elements}]}
    with SiteServer() as site:  # the client's own site
        async with model_server(script) as server:
            config = make_config(server)
            config.browser.private_network = "allow"  # the operator lets clients open local pages
            config.secrets = {"CODE": SecretStr(VALUE)}
            if allowed:
                config.secret_hosts = {"CODE": [f"127.0.0.1:{site.port}"]}
            async with Agent(config, browser=browser) as agent, WebEnv(agent=agent) as env:
                await env.reset({"url": f"{site.url}/safety/login", "goal": GOAL}, output_dir=tmp_path / "run")
                obs, *_ = await env.step(CODE)
                url = env.session.url if env.session is not None else ""
        hits, logins, port = list(site.safety_hits), list(site.logins), site.port
    if allowed:
        assert logins == [{"user": "", "code": VALUE}] and url.endswith(f"code={VALUE}")
        return
    assert logins == [] and not [path for _, path in hits if "s3cr3t" in path], hits
    assert f"the secret CODE was not typed: it may not be typed on 127.0.0.1:{port}" in "\n".join(
        str(m["content"]) for m in obs.messages
    )
    written = b"".join(p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert VALUE.encode() not in written
