"""A HAR per run (``[run] har = true``): one sink, Playwright's own recording of the run's context,
written as network.har with the secrets, the cookies and the credential headers redacted, and
opened by Playwright's own ``route_from_har`` to replay the run's pages with their server gone."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser
from playwright.async_api import Error as PlaywrightError
from pydantic import SecretStr

from webagent import Agent, InputError
from webagent.config import AgentConfig
from webagent.guard.secrets import Secrets
from webagent.record import REDACTED, redact_har
from webagent.testing.offline import load_local_tasks, offline_config
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, load_task_script, make_config

API_KEY = "k3y-very-secret-0123456789"
COOKIE = "s3ss10n-c00kie-value-4242"
BEARER = "Bearer plain-bearer-token-77"


def test_redact_har_replaces_credentials_and_secret_values_everywhere() -> None:
    secrets = Secrets({"API_KEY": API_KEY})
    body = base64.b64encode(f"token={API_KEY}".encode()).decode()
    har: dict[str, Any] = {
        "log": {
            "entries": [
                {
                    "request": {
                        "url": f"http://127.0.0.1/x?key={API_KEY}",
                        "headers": [
                            {"name": "Cookie", "value": "sid=abc"},
                            {"name": "authorization", "value": BEARER},
                            {"name": "Accept", "value": "text/html"},
                        ],
                        "cookies": [{"name": "sid", "value": "abc"}],
                        "postData": {"text": f"key={API_KEY}"},
                    },
                    "response": {
                        "headers": [{"name": "Set-Cookie", "value": "sid=def; Path=/"}],
                        "cookies": [{"name": "sid", "value": "def"}],
                        "content": {"text": body, "encoding": "base64", "mimeType": "text/plain"},
                    },
                }
            ]
        }
    }
    out = redact_har(har, secrets)
    text = json.dumps(out)
    assert API_KEY not in text and "abc" not in text and "def" not in text and BEARER not in text
    request, response = out["log"]["entries"][0]["request"], out["log"]["entries"][0]["response"]
    assert [h["value"] for h in request["headers"]] == [REDACTED, REDACTED, "text/html"]
    assert request["url"].endswith("key={{API_KEY}}") and request["postData"]["text"] == "key={{API_KEY}}"
    assert base64.b64decode(response["content"]["text"]).decode() == "token={{API_KEY}}"
    assert response["headers"][0]["value"] == REDACTED and response["cookies"][0]["value"] == REDACTED


@pytest.mark.browser
async def test_a_runs_har_replays_its_pages_without_a_secret(
    browser: Browser, model_server: ServerFactory, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps({"cookies": [{"name": "sid", "value": COOKIE, "domain": "127.0.0.1", "path": "/"}], "origins": []})
    )
    state.chmod(0o600)
    with SiteServer() as site:
        task = load_local_tasks(site.url)["catalog-price"]
        async with model_server(load_task_script("catalog-price")) as server:
            config = make_config(server)
            config.run.har = True
            config.secrets = {"API_KEY": SecretStr(API_KEY)}
            config.browser.allowed_domains = ["127.0.0.1"]  # where the key's header may go
            config.browser.extra_http_headers = {"X-Api-Key": "{{API_KEY}}", "Authorization": BEARER}
            config.browser.storage_state = state
            async with Agent(config, browser=browser) as agent:
                result = await agent.run(task["url"], task["goal"], output_dir=tmp_path / "run")
                plain = await agent.run(task["url"], task["goal"], output_dir=tmp_path / "plain", har=False)
    assert result.success and plain.success
    assert not (tmp_path / "plain" / "network.har").exists()  # har=False wins over the config
    har = tmp_path / "run" / "network.har"
    raw = har.read_bytes()
    for value in (API_KEY, COOKIE, BEARER.split()[1]):
        assert value.encode() not in raw, value[:4]
    entries = json.loads(raw)["log"]["entries"]
    product = next(e for e in entries if "/catalog/product/" in e["request"]["url"])
    headers = {h["name"].lower(): h["value"] for h in product["request"]["headers"]}
    assert headers["x-api-key"] == "{{API_KEY}}" and headers["authorization"] == REDACTED
    assert headers["cookie"] == REDACTED
    # The server is gone: the run's pages come back from the archive alone, through Playwright's own replay.
    gone = await browser.new_context()
    try:
        page = await gone.new_page()
        with pytest.raises(PlaywrightError):
            await page.goto(product["request"]["url"], timeout=10_000)
        replay = await browser.new_context()
        await replay.route_from_har(har, not_found="abort")
        page = await replay.new_page()
        await page.goto(product["request"]["url"], timeout=10_000)
        assert "$12.50" in await page.content() and "Blue Widget" in await page.content()
        await replay.close()
    finally:
        await gone.close()


@pytest.mark.browser
async def test_a_har_asked_for_where_none_can_be_written_is_refused(browser: Browser, tmp_path: Path) -> None:
    context = await browser.new_context()
    try:
        page = await context.new_page()
        async with Agent(make_config_offline()) as agent:
            with pytest.raises(InputError, match="record_har_path"):
                agent.stream("http://127.0.0.1:9/", "g", page=page, har=True, output_dir=tmp_path)
            with pytest.raises(InputError, match="record_har_path"):
                agent.stream("http://127.0.0.1:9/", "g", context=context, har=True, output_dir=tmp_path)
            with pytest.raises(InputError, match="output_dir"):
                agent.stream("http://127.0.0.1:9/", "g", har=True)
            assert agent.stream("http://127.0.0.1:9/", "g", page=page).spec.har is None  # the config's: no HAR there
    finally:
        await context.close()


def make_config_offline() -> AgentConfig:
    return offline_config("http://127.0.0.1:9", "holo1.5")
