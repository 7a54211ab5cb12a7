"""Chromium flags and binary lookup."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import playwright
import pytest

from webagent.browser import launcher
from webagent.browser.launcher import CHROMIUM_ARGS, DISABLED_FEATURES, connect_browser, find_chromium, launch_browser
from webagent.config import BrowserConfig
from webagent.errors import BrowserError

CORE_BUNDLE = Path(playwright.__file__).parent / "driver" / "package" / "lib" / "coreBundle.js"


def playwright_disabled_features() -> list[str]:
    """The ``disabledFeatures = [...]`` array of the installed Playwright driver, as strings."""
    assert CORE_BUNDLE.is_file(), f"Playwright's driver bundle is missing: {CORE_BUNDLE}"
    source = CORE_BUNDLE.read_text(encoding="utf-8")
    start = re.search(r"\bdisabledFeatures\s*=\s*\[", source)
    assert start, f"no `disabledFeatures = [` array in {CORE_BUNDLE}; has Playwright moved it?"
    features: list[str] = []
    for line in source[start.end() :].splitlines():
        code = line.split("//", 1)[0].strip()  # entries are commented line by line
        if code.startswith("]"):
            break
        features += [f for f in re.findall(r"""["']([^"']*)["']""", code) if f]
    else:
        pytest.fail(f"the disabledFeatures array in {CORE_BUNDLE} never ends")
    assert len(features) >= 5, f"suspiciously few disabled features parsed from {CORE_BUNDLE}: {features}"
    return features


def test_disabled_features_include_all_of_playwrights_own() -> None:
    # A later --disable-features flag replaces Playwright's, so its list must be repeated in ours.
    ours = set(DISABLED_FEATURES)
    missing = [f for f in playwright_disabled_features() if f not in ours]
    assert missing == [], f"DISABLED_FEATURES lacks Playwright's {missing}"


def test_playwright_feature_list_parser_reads_known_entries() -> None:
    features = playwright_disabled_features()
    # Long-standing entries of Playwright's list (chromiumSwitches.ts).
    assert "DestroyProfileOnBrowserClose" in features
    assert "MediaRouter" in features
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", f) for f in features), features


def test_omnibox_webui_features_are_disabled() -> None:
    for feature in ("WebUIOmniboxPopup", "WebUIOmniboxFullPopup", "WebUIOmniboxAimPopup", "PreloadTopChromeWebUI"):
        assert feature in DISABLED_FEATURES


def test_disabled_features_have_no_duplicates_or_blanks() -> None:
    assert len(set(DISABLED_FEATURES)) == len(DISABLED_FEATURES)
    assert all(f and f.strip() == f and "," not in f for f in DISABLED_FEATURES)


@pytest.mark.parametrize(
    "flag",
    [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ],
)
def test_chromium_args_contain_required_flag(flag: str) -> None:
    assert flag in CHROMIUM_ARGS


def test_chromium_args_have_exactly_one_disable_features_flag_with_our_list() -> None:
    flags = [a for a in CHROMIUM_ARGS if a.startswith("--disable-features")]
    assert len(flags) == 1, flags
    name, _, value = flags[0].partition("=")
    assert name == "--disable-features"
    assert value.split(",") == list(DISABLED_FEATURES)


def test_find_chromium_rejects_a_missing_executable_path(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "chromium"
    with pytest.raises(BrowserError) as err:
        find_chromium(BrowserConfig(executable_path=str(missing)))
    assert str(missing) in str(err.value)


def test_find_chromium_rejects_a_non_executable_file(tmp_path: Path) -> None:
    plain = tmp_path / "chromium"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    with pytest.raises(BrowserError) as err:
        find_chromium(BrowserConfig(executable_path=str(plain)))
    assert str(plain) in str(err.value)


def test_find_chromium_rejects_a_directory(tmp_path: Path) -> None:
    with pytest.raises(BrowserError, match=re.escape(str(tmp_path))):
        find_chromium(BrowserConfig(executable_path=str(tmp_path)))


def test_find_chromium_returns_a_configured_executable(tmp_path: Path) -> None:
    exe = tmp_path / "my-chromium"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert find_chromium(BrowserConfig(executable_path=str(exe))) == str(exe)


@pytest.mark.skipif(not Path("/usr/bin/chromium").is_file(), reason="no /usr/bin/chromium on this machine")
def test_find_chromium_defaults_to_the_system_chromium() -> None:
    assert os.access("/usr/bin/chromium", os.X_OK)
    assert find_chromium(BrowserConfig(headless=False)) == "/usr/bin/chromium"
    assert find_chromium(BrowserConfig(headless_shell=False)) == "/usr/bin/chromium"


def _shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, executable: bool = True) -> str:
    shell = tmp_path / "chromium-headless-shell"
    shell.write_text("#!/bin/sh\n")
    shell.chmod(0o755 if executable else 0o644)
    monkeypatch.setattr(launcher, "SYSTEM_HEADLESS_SHELL", (str(shell),))
    return str(shell)


def test_find_chromium_prefers_the_headless_shell_for_a_headless_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell = _shell(tmp_path, monkeypatch)
    assert find_chromium(BrowserConfig()) == shell
    assert find_chromium(BrowserConfig(headless=False)) != shell  # a window needs the full browser
    assert find_chromium(BrowserConfig(), headless=False) != shell  # the launch's headless wins
    assert find_chromium(BrowserConfig(headless=False), headless=True) == shell
    assert find_chromium(BrowserConfig(headless_shell=False)) != shell  # turned off
    assert find_chromium(BrowserConfig(), hardened=True) != shell  # its WebRTC switch does nothing there
    mine = tmp_path / "my-chromium"
    mine.write_text("#!/bin/sh\n")
    mine.chmod(0o755)
    assert find_chromium(BrowserConfig(executable_path=str(mine))) == str(mine)  # a configured binary wins


def test_find_chromium_skips_a_headless_shell_that_is_not_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell = _shell(tmp_path, monkeypatch, executable=False)
    assert find_chromium(BrowserConfig()) != shell


async def test_a_headed_or_hardened_launch_gets_the_full_browser_and_a_headless_one_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell = _shell(tmp_path, monkeypatch)
    fake = _Launcher()
    config = BrowserConfig(direct_cdp=False)
    await launch_browser(fake, config)  # type: ignore[arg-type]
    assert fake.kwargs["executable_path"] == shell
    await launch_browser(fake, config, options={"headless": False})  # type: ignore[arg-type]
    assert fake.kwargs["executable_path"] == find_chromium(config, headless=False) != shell
    assert fake.kwargs["headless"] is False
    await launch_browser(fake, config, hardened=True)  # type: ignore[arg-type]
    assert fake.kwargs["executable_path"] == find_chromium(config, hardened=True) != shell


async def test_a_guarded_browser_left_to_playwright_gets_its_full_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no system Chromium, Playwright's own headless launch is its headless shell, where WebRTC's
    UDP is not closed: a hardened browser asks for its full build (channel "chromium")."""
    monkeypatch.setattr(launcher, "find_chromium", lambda *_, **__: None)
    fake = _Launcher()
    config = BrowserConfig(direct_cdp=False)
    await launch_browser(fake, config, hardened=True)  # type: ignore[arg-type]
    assert fake.kwargs["channel"] == launcher.FULL_CHROMIUM_CHANNEL == "chromium"
    await launch_browser(fake, config)  # type: ignore[arg-type]
    assert "channel" not in fake.kwargs  # unguarded: Playwright's default (its shell)
    await launch_browser(fake, config, hardened=True, options={"headless": False})  # type: ignore[arg-type]
    assert "channel" not in fake.kwargs  # a window: the full build anyway
    await launch_browser(fake, config, hardened=True, options={"channel": "chrome"})  # type: ignore[arg-type]
    assert fake.kwargs["channel"] == "chrome"  # the caller's channel stays


async def test_a_guarded_remote_browser_server_is_asked_for_the_full_build() -> None:
    sent: list[dict[str, object]] = []

    class _Chromium:
        async def connect(self, endpoint: str, **kwargs: Any) -> object:
            sent.append(json.loads(kwargs["headers"]["x-playwright-launch-options"]))

            class Browser:
                version = "0"

            return Browser()

    class _Playwright:
        chromium = _Chromium()

    config = BrowserConfig(ws_endpoint="ws://127.0.0.1:1/x")
    await connect_browser(_Playwright(), config, hardened=True)  # type: ignore[arg-type]
    await connect_browser(_Playwright(), config)  # type: ignore[arg-type]
    assert sent[0]["channel"] == "chromium" and "channel" not in sent[1]
    mine = BrowserConfig(ws_endpoint="ws://127.0.0.1:1/x", executable_path="/opt/chromium")
    await connect_browser(_Playwright(), mine, hardened=True)  # type: ignore[arg-type]
    assert sent[2]["executablePath"] == "/opt/chromium" and "channel" not in sent[2]


@pytest.mark.skipif(
    not os.access("/usr/lib/chromium/chromium-headless-shell", os.X_OK), reason="no chromium-headless-shell here"
)
async def test_the_system_headless_shell_runs_a_page() -> None:
    """Debian's headless shell is what a default headless launch gets here: a session on it loads a
    page, clicks and takes a screenshot over the direct DevTools connection."""
    from playwright.async_api import async_playwright

    from webagent.browser.devtools import DevToolsSession
    from webagent.browser.session import BrowserSession
    from webagent.config import PROFILES
    from webagent.images import frame_for

    config = BrowserConfig()
    assert find_chromium(config) == "/usr/lib/chromium/chromium-headless-shell"  # not the wrapper script
    counter = (
        "data:text/html,<title>0</title><body style='margin:0'><button style='width:400px;height:300px' "
        "onclick='document.title = String(+document.title + 1)'>count</button></body>"
    )
    async with async_playwright() as pw:
        browser = await launch_browser(pw, config)
        session = await BrowserSession.create(browser, config)
        try:
            await session.goto(counter, start=True)
            await session.click(100, 100)
            shot = await session.screenshot(frame_for(1280, 800, PROFILES["holo1.5"]))
            assert isinstance(session._state.cdp, DevToolsSession)
            assert await session.title() == "1"
            assert shot.b64
        finally:
            await session.close()
            await browser.close()


class _Launcher:
    """A stand-in for ``playwright`` whose ``chromium.launch`` keeps its keyword arguments."""

    def __init__(self) -> None:
        self.chromium = self
        self.kwargs: dict[str, object] = {}

    async def launch(self, **kwargs: object) -> object:
        self.kwargs = kwargs

        class Browser:
            version = "0"

        return Browser()


async def test_launch_options_of_pytest_playwright_reach_the_launch() -> None:
    fake = _Launcher()
    config = BrowserConfig(direct_cdp=False, args=["--lang=fr"])
    options = {"headless": False, "slow_mo": 50, "args": ["--no-sandbox", "--window-size=800,600"]}
    await launch_browser(fake, config, options=options)  # type: ignore[arg-type]
    assert fake.kwargs["headless"] is False
    assert fake.kwargs["slow_mo"] == 50
    args = fake.kwargs["args"]
    assert isinstance(args, list)
    assert args[: len(CHROMIUM_ARGS)] == list(CHROMIUM_ARGS)  # webagent's flags first ...
    assert args[len(CHROMIUM_ARGS) :] == ["--lang=fr", "--window-size=800,600"]  # ... each flag once
    assert fake.kwargs["executable_path"] == find_chromium(config, headless=False)


async def test_launch_options_executable_and_channel_win_over_the_lookup() -> None:
    fake = _Launcher()
    config = BrowserConfig(direct_cdp=False)
    await launch_browser(fake, config, options={"executable_path": "/opt/chrome/chrome"})  # type: ignore[arg-type]
    assert fake.kwargs["executable_path"] == "/opt/chrome/chrome"
    assert fake.kwargs["headless"] is True
    await launch_browser(fake, config, options={"channel": "chrome"})  # type: ignore[arg-type]
    assert fake.kwargs["executable_path"] is None  # Playwright finds the channel's browser
    assert fake.kwargs["channel"] == "chrome"


async def test_a_launch_the_driver_never_answers_is_a_browser_error_in_bounded_time() -> None:
    """The pool launches one browser at a time and sessions waiting for it are not stalls: a
    Playwright driver that stops answering must not hang every run."""

    class _Chromium:
        async def launch(self, **kwargs: object) -> None:
            self.timeout = kwargs.get("timeout")
            await asyncio.Event().wait()

    class _Playwright:
        chromium = _Chromium()

    config = BrowserConfig(navigation_timeout_s=0.2, command_timeout_s=0.2, direct_cdp=False)
    started = time.monotonic()
    with pytest.raises(BrowserError, match=r"chromium\.launch: no answer from the browser within 0\.6 s"):
        await launch_browser(_Playwright(), config)  # type: ignore[arg-type]
    assert time.monotonic() - started < 5
    assert _Playwright.chromium.timeout == pytest.approx(400)  # Playwright's own timeout goes first
