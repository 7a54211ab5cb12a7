"""Each ``[browser]`` session setting in real Chromium, through the one runtime: locale, time zone, user
agent, headers (a secret among them), colour scheme, geolocation and permissions, device emulation,
a proxy with credentials, HTTP credentials, TLS errors; from config, a run's own settings and flags."""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from webagent import Agent
from webagent.cli.parser import build_parser, config_from_args
from webagent.config import AgentConfig, ContextSettings
from webagent.errors import ConfigError, NavigationError
from webagent.runtime import checked_sessions
from webagent.testing.proxy import LoggingProxy
from webagent.testing.teamsite import BASIC_PASSWORD, BASIC_USER, TeamSite

from ..conftest import ServerFactory, make_config
from .conftest import act, answer, everything_written, script

pytestmark = pytest.mark.e2e

GOAL = "Read what the echo page says"
ECHO = script(GOAL, [act({"action": "wait", "seconds": 0.5}, step=1), answer("seen")])
TOKEN = "team-token-9c4e7a1b55"


def with_browser(config: AgentConfig, **settings: object) -> AgentConfig:
    """``config`` with these ``[browser]`` settings (each validated as it is set)."""
    for name, value in settings.items():
        setattr(config.browser, name, value)
    return config


async def _run(config: AgentConfig, url: str, out: Path | None = None, **kwargs: object) -> tuple[object, Agent]:
    async with Agent(config) as agent:
        result = await agent.run(url, GOAL, output_dir=out, **kwargs)  # type: ignore[arg-type]
    return result, agent


async def test_locale_timezone_agent_headers_scheme_and_place_reach_the_page(
    model_server: ServerFactory, team_site: TeamSite, tmp_path: Path
) -> None:
    async with model_server(ECHO) as server:
        config = with_browser(
            make_config(server),
            locale="fr-FR",
            timezone_id="Asia/Tokyo",
            user_agent="TeamAgent/1.0 (smoke)",
            extra_http_headers={"X-Team": "blue", "Authorization": "Bearer {{API_TOKEN}}"},
            color_scheme="dark",
            geolocation="48.85,2.35",
            permissions=["geolocation"],
        )
        config.secrets = {"API_TOKEN": TOKEN}  # type: ignore[assignment]
        before = len(team_site.reports)
        result, _ = await _run(config, f"{team_site.url}/echo", tmp_path / "r")
    assert result.success  # type: ignore[attr-defined]
    report = team_site.reports[before]
    assert report["language"] == "fr-FR" and report["timezone"] == "Asia/Tokyo"
    assert report["userAgent"] == "TeamAgent/1.0 (smoke)" and report["dark"] is True
    assert report["geolocation"] == [48.85, 2.35]
    assert report["headers"]["X-Team"] == "blue" and report["headers"]["Accept-Language"].startswith("fr-FR")
    assert report["headers"]["Authorization"] == f"Bearer {TOKEN}"  # the placeholder filled when the context opened
    assert TOKEN.encode() not in everything_written(tmp_path / "r")  # the page showed it; the run never wrote it


async def test_a_device_sets_viewport_touch_and_the_localizers_frame(
    model_server: ServerFactory, team_site: TeamSite, tmp_path: Path
) -> None:
    async with model_server(ECHO) as server:
        config = make_config(server)
        before = len(team_site.reports)
        async with Agent(config) as agent:
            stream = agent.stream(f"{team_site.url}/echo", GOAL, browser=ContextSettings(device="iPhone 15"))
            steps = [step async for step in stream]
            devices = await agent.browsers.devices()
    report = team_site.reports[before]
    assert report["touch"] >= 1 and "iPhone" in report["userAgent"]
    width, height = devices["iPhone 15"]["viewport"]["width"], devices["iPhone 15"]["viewport"]["height"]
    image_w, image_h = steps[0].image_size
    assert abs(image_w / image_h - width / height) < 0.02  # the frame follows the device, not 1280x800
    assert image_w < 800


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "allow-list"])
async def test_a_proxy_with_a_secret_password_carries_the_requests(
    model_server: ServerFactory, team_site: TeamSite, tmp_path: Path, guarded: bool
) -> None:
    # Under an allow-list the guard's proxy net would replace the proxy: the user's proxy stays.
    password = "proxy-pass-31c7e2"
    with LoggingProxy(username="corp", password=password) as proxy:
        async with model_server(ECHO) as server:
            proxied = {
                "server": proxy.url,
                "bypass": "<-loopback>",
                "username": "corp",
                "password": "{{PROXY_PASSWORD}}",
            }
            config = with_browser(make_config(server), proxy=proxied)
            if guarded:
                config.browser.allowed_domains = ["127.0.0.1"]
            config.secrets = {"PROXY_PASSWORD": password}  # type: ignore[assignment]
            result, _ = await _run(config, f"{team_site.url}/echo", tmp_path / "r")
    assert result.success  # type: ignore[attr-defined]
    assert any(f.url.endswith("/echo") and f.authorized for f in proxy.forwarded)
    assert proxy.refused >= 1  # Chromium was challenged (407) and answered with the credentials
    assert password.encode() not in everything_written(tmp_path / "r")


async def test_http_credentials_answer_basic_authentication(
    model_server: ServerFactory, team_site: TeamSite, tmp_path: Path
) -> None:
    rules = [answer("welcome", url="/basic")]
    async with model_server(script(GOAL, rules)) as server:
        config = with_browser(make_config(server), http_credentials=f"{BASIC_USER}:{BASIC_PASSWORD}")
        result, _ = await _run(config, f"{team_site.url}/basic", tmp_path / "r")
        assert result.success  # type: ignore[attr-defined]
        hit = [r for r in team_site.requests if r.path == "/basic" and "Authorization" in r.headers]
        assert hit
    assert BASIC_PASSWORD.encode() not in everything_written(tmp_path / "r")


@pytest.fixture(scope="module")
def https_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<title>TLS</title><p>self-signed</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


async def test_ignore_https_errors_opens_a_self_signed_site(model_server: ServerFactory, https_site: str) -> None:
    async with model_server(script(GOAL, [answer("opened")])) as server:
        with pytest.raises(NavigationError, match="CERT"):
            await _run(make_config(server), https_site)
        config = with_browser(make_config(server), ignore_https_errors=True)
        result, _ = await _run(config, https_site)
    assert result.success  # type: ignore[attr-defined]


def test_the_flags_set_every_session_setting(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["run", "--url", "http://x.test", "--goal", "g", "--locale", "de-DE", "--timezone", "Europe/Berlin",
         "--user-agent", "UA/2", "--header", "X-A: 1", "--header", "X-B: two", "--proxy", "http://127.0.0.1:3128",
         "--proxy-bypass", ".corp", "--proxy-username", "u", "--proxy-password", "{{P}}",
         "--http-credentials", "me:{{Q}}", "--ignore-https-errors", "--geolocation", "1.5,2.5",
         "--permission", "geolocation", "--color-scheme", "dark", "--device", "Pixel 7",
         "--storage-state", str(tmp_path / "s.json"), "--upload-dir", str(tmp_path)]
    )  # fmt: skip
    browser = config_from_args(args).browser
    assert (browser.locale, browser.timezone_id, browser.user_agent) == ("de-DE", "Europe/Berlin", "UA/2")
    assert browser.extra_http_headers == {"X-A": "1", "X-B": "two"}
    assert browser.proxy is not None and browser.proxy.bypass == ".corp" and browser.proxy.username == "u"
    assert browser.http_credentials is not None and browser.http_credentials.username == "me"
    assert browser.ignore_https_errors and browser.color_scheme == "dark" and browser.device == "Pixel 7"
    assert browser.geolocation is not None and browser.geolocation.latitude == 1.5
    assert browser.permissions == ["geolocation"] and browser.storage_state == tmp_path / "s.json"
    with pytest.raises(ConfigError, match="need --proxy"):
        config_from_args(build_parser().parse_args(["run", "--url", "u", "--goal", "g", "--proxy-username", "u"]))


def test_bad_settings_are_one_line_errors_that_never_quote_a_password(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no secret named NOPE"):
        checked_sessions(AgentConfig(), [ContextSettings(extra_http_headers={"X": "{{NOPE}}"})])
    with pytest.raises(ConfigError, match=r"storage state file .* does not exist"):
        checked_sessions(AgentConfig(), [ContextSettings(storage_state=tmp_path / "missing.json")])
    with pytest.raises(ConfigError) as caught:
        from webagent.config import load_config

        load_config(overrides={"browser.proxy": {"server": "http://p:1", "password": "hunter2-secret", "bogus": 1}})
    assert "hunter2" not in str(caught.value)
    # a run's settings that hold a secret keep the DevTools port closed
    (tmp_path / "s.json").write_text('{"cookies": [], "origins": []}')
    config = checked_sessions(AgentConfig(), [None, ContextSettings(storage_state=tmp_path / "s.json")])
    assert config.browser.direct_cdp is False
    assert checked_sessions(AgentConfig(), [ContextSettings(locale="fr-FR")]).browser.direct_cdp is True


def test_unknown_devices_name_close_ones() -> None:
    from webagent.browser.context import resolve_device

    with pytest.raises(ConfigError, match="iPhone 15"):
        resolve_device("iphone15", {"iPhone 15": {}, "Pixel 7": {}})
    assert resolve_device("PIXEL 7", {"iPhone 15": {}, "Pixel 7": {"x": 1}}) == {"x": 1}
