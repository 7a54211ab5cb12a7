"""The plugin's session settings: ``--webagent-storage-state`` starts every test's pages signed in, and
the webagent config's ``[browser]`` settings (a locale, a header) reach pytest-playwright's contexts."""

from __future__ import annotations

import http.cookiejar
import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from webagent.testing.teamsite import OTP_CODE, PASSWORD, USER, TeamSite

from .conftest import Project

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


@pytest.fixture(scope="module")
def team_site() -> Iterator[TeamSite]:
    with TeamSite() as site:
        yield site


def signed_in_state(site: TeamSite, path: Path) -> str:
    """Sign in over HTTP (password, then code) and write the session cookie as a storage state file."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{site.url}/login", urllib.parse.urlencode({"user": USER, "password": PASSWORD}).encode())
    opener.open(f"{site.url}/2fa", urllib.parse.urlencode({"code": OTP_CODE}).encode())
    sid = next(c.value for c in jar if c.name == "sid" and c.value)
    cookie = {"name": "sid", "value": sid, "domain": "127.0.0.1", "path": "/", "expires": -1,
              "httpOnly": True, "secure": False, "sameSite": "Lax"}  # fmt: skip
    path.write_text(json.dumps({"cookies": [cookie], "origins": []}))
    path.chmod(0o600)
    return sid


def test_a_saved_state_and_the_configs_browser_settings_reach_the_tests_pages(
    project: Project, team_site: TeamSite
) -> None:
    sid = signed_in_state(team_site, project.path / "state.json")
    with (project.path / "webagent.toml").open("a") as config:
        config.write('\n[browser]\nlocale = "fr-FR"\nextra_http_headers = { X-Suite = "smoke" }\n')
    project.write(
        "test_site.py",
        f"""
        def test_signed_in(page):
            page.goto("{team_site.url}/app/whoami")
            assert page.title().startswith("Session "), page.url

        def test_locale_and_header(page):
            page.goto("{team_site.url}/echo")
            page.wait_for_function("document.getElementById('browser').textContent.length > 0")
            assert page.evaluate("navigator.language") == "fr-FR"
        """,
    )
    before = len(team_site.requests)
    project.run("--webagent-storage-state", "state.json").assert_outcomes(passed=2)
    seen = team_site.requests[before:]
    assert not [r for r in seen if r.path.startswith("/login")]  # signed in from the start
    assert any(r.path == "/echo" and r.headers.get("X-Suite") == "smoke" for r in seen)
    # without the state the same test is sent to the sign-in page
    project.run().assert_outcomes(passed=1, failed=1)
    assert sid  # the state held a real session


def test_a_missing_state_file_fails_in_one_line(project: Project) -> None:
    project.write("test_one.py", "def test_page(page):\n    pass\n")
    result = project.run("--webagent-storage-state", "nope.json")
    result.assert_outcomes(errors=1)
    assert "webagent: storage state file" in result.stdout.str() and "does not exist" in result.stdout.str()
