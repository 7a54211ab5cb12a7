"""Fixtures of both Playwright variants: the config and the browser's launch arguments.

What the webagent config adds to pytest-playwright's ``browser_type_launch_args``: pytest-playwright
launches Playwright's bundled browser. Where that cannot be downloaded (a CI image with Debian's
Chromium, this project's machines), the launch goes to the Chromium webagent itself would use
(``webagent.browser.launcher.find_chromium``):

* ``[browser] executable_path`` of the webagent config, when set (an error if it is not an
  executable file);
* else, only when Playwright's bundled Chromium is not installed (``bundled_chromium_installed``:
  its revision in Playwright's ``browsers.json``, looked for where ``playwright install`` puts it,
  without starting Playwright), the system's Chromium (headless and unguarded: its headless shell
  when installed; else ``/usr/bin/chromium``, ``chromium`` on the PATH); a guarded headless
  browser left to Playwright gets its full build (``channel="chromium"``), not its headless shell.

With a binary of webagent's choosing the launch also gets webagent's Chromium flags
(``CHROMIUM_ARGS``). When the config sets a domain list or ``private_network = "block"`` (a
navigation policy for every run), the switches of webagent's guarded browsers come first
(``hardened_args``: no shared workers, no WebRTC over UDP, no FedCM; docs/security.md). The
config's ``[browser] args`` are added in any case, and ``headless = false``
opens a window like ``--headed``. Nothing changes for another browser (``--browser firefox``), a
``--browser-channel``, an ``executable_path`` already given, or a remote browser
(pytest-playwright's ``connect_options``).

The browser is the run's, shared by the tests that do not use ``web``: a config that cannot be
read changes their launch only as the defaults do (the system's Chromium when Playwright's own is
missing), and fails the tests using ``web`` alone.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from ..browser.context import context_options, secret_reach
from ..browser.launcher import CHROMIUM_ARGS, FULL_CHROMIUM_CHANNEL, find_chromium, hardened_args
from ..config import AgentConfig, BrowserConfig, ContextSettings
from ..errors import ConfigError, WebAgentError
from .options import SETTINGS, fail_with

__all__ = [
    "browser_context_args",
    "browser_type_launch_args",
    "bundled_chromium_installed",
    "extend_launch_args",
    "playwright_registry",
    "require_chromium",
    "shared_dir",
    "webagent_config",
]

log = structlog.get_logger("webagent.pytest")


def playwright_registry(env: Mapping[str, str] | None = None) -> Path:
    """Where ``playwright install`` puts browsers (``PLAYWRIGHT_BROWSERS_PATH``, else the user's cache)."""
    env = os.environ if env is None else env
    configured = env.get("PLAYWRIGHT_BROWSERS_PATH")
    if configured == "0":
        import playwright

        return Path(playwright.__file__).parent / "driver" / "package" / ".local-browsers"
    if configured:
        return Path(configured).expanduser()
    home = Path.home()
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "ms-playwright"
    if sys.platform == "win32":
        return Path(env.get("LOCALAPPDATA", home / "AppData" / "Local")) / "ms-playwright"
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "ms-playwright"


def bundled_chromium_installed(registry: Path | None = None) -> bool:
    """Whether this Playwright's own Chromium (or its headless shell) is installed. When its
    ``browsers.json`` cannot be read, say yes: the launch is then left as pytest-playwright makes it."""
    import playwright

    try:
        manifest = json.loads((Path(playwright.__file__).parent / "driver" / "package" / "browsers.json").read_text())
        revisions = {b["name"]: b["revision"] for b in manifest["browsers"]}
    except (OSError, ValueError, KeyError, TypeError):
        return True
    registry = playwright_registry() if registry is None else registry
    folders = (
        f"chromium-{revisions.get('chromium')}",
        f"chromium_headless_shell-{revisions.get('chromium-headless-shell')}",
    )
    return any((registry / folder).is_dir() for folder in folders)


def extend_launch_args(
    base: Mapping[str, Any],
    config: BrowserConfig,
    *,
    browser_name: str,
    bundled_installed: bool,
    remote: bool = False,
) -> dict[str, Any]:
    """``base`` (pytest-playwright's launch arguments) with what ``config`` adds; BrowserError if the
    configured ``executable_path`` is not an executable file."""
    args = dict(base)
    if browser_name != "chromium" or remote:
        return args
    guarded = bool(config.allowed_domains or config.blocked_domains or config.private_network == "block")
    extra = [*(hardened_args(config) if guarded else []), *config.args]
    if "channel" not in args and "executable_path" not in args:
        # the configured binary, else the system's when Playwright's own is not installed
        headless = bool(args.get("headless", True)) and config.headless
        executable = (
            find_chromium(config, headless=headless, hardened=guarded)
            if config.executable_path or not bundled_installed
            else None
        )
        if executable is not None:
            args["executable_path"] = executable
            extra = [*CHROMIUM_ARGS, *extra]
        elif guarded and headless:  # Playwright's headless default is its shell: its full build instead
            args["channel"] = FULL_CHROMIUM_CHANNEL
    if extra:
        args["args"] = [*args.get("args", []), *(a for a in extra if a not in args.get("args", []))]
    if not config.headless and "headless" not in args:
        args["headless"] = False
    return args


#: The run's ``PluginSettings`` (read at ``pytest_configure``).


@pytest.fixture(scope="session")
def webagent_config(pytestconfig: pytest.Config) -> AgentConfig:
    """The webagent config of this run: defaults < ``--webagent-config`` < ``WEBAGENT_*`` < options."""
    try:
        return pytestconfig.stash[SETTINGS].load_config()
    except WebAgentError as exc:
        fail_with(exc)


@pytest.fixture(scope="session")
def browser_type_launch_args(
    browser_type_launch_args: dict[str, Any],
    pytestconfig: pytest.Config,
    browser_name: str,
    connect_options: dict[str, Any] | None,
) -> dict[str, Any]:
    """pytest-playwright's launch arguments with the Chromium webagent would use (``extend_launch_args``).

    A bad webagent config (file, ``WEBAGENT_*`` variable, ``[browser] executable_path``) is
    ignored here with a warning (the default ``BrowserConfig``: only the system's Chromium when
    Playwright's own is missing): the browser is every pytest-playwright test's, and only the
    tests using ``web`` fail on a bad config (``WebSession.from_settings``). It starts no
    Playwright: a test suite that launches its browsers itself (this project's own) can use these
    arguments without pytest-playwright's sync ``playwright`` fixture."""
    bundled = bundled_chromium_installed()
    remote = bool(connect_options)
    try:
        config = pytestconfig.stash[SETTINGS].load_config().browser
        return extend_launch_args(
            browser_type_launch_args, config, browser_name=browser_name, bundled_installed=bundled, remote=remote
        )
    except WebAgentError as exc:
        log.warning("webagent_config_ignored_for_launch", error=f"webagent: {exc}")
    # the defaults: only the system's Chromium, when Playwright's own is not installed
    return extend_launch_args(
        browser_type_launch_args, BrowserConfig(), browser_name=browser_name, bundled_installed=bundled, remote=remote
    )


@pytest.fixture(scope="session")
def browser_context_args(
    browser_context_args: dict[str, Any], pytestconfig: pytest.Config, request: pytest.FixtureRequest
) -> dict[str, Any]:
    """pytest-playwright's context arguments with the webagent config's ``[browser]`` session settings
    (``--webagent-storage-state``: every test's pages start signed in; a locale, a proxy, headers, a
    device, ...), made as webagent makes its own contexts (``webagent.browser.context``). What
    pytest-playwright's arguments already set (``--device``, a ``browser_context_args`` of the
    project's) wins. A bad webagent config is ignored here with a warning, as for the launch
    arguments (only the tests using ``web`` fail on it); a session setting of a good config that
    cannot be used (a missing state file) fails the tests with one line."""
    try:
        config = pytestconfig.stash[SETTINGS].load_config()
    except WebAgentError as exc:
        log.warning("webagent_config_ignored_for_contexts", error=f"webagent: {exc}")
        return browser_context_args
    try:
        return {**session_context_args(config, request), **browser_context_args}
    except WebAgentError as exc:
        fail_with(exc)


def session_context_args(config: AgentConfig, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``new_context`` arguments of the config's ``[browser]`` session settings that it sets."""
    browser = config.browser
    named = set(ContextSettings.model_fields) & browser.model_fields_set
    if not named:
        return {}
    devices = request.getfixturevalue("playwright").devices if browser.device else None
    secrets = config.secret_set()
    refusal = secret_reach(browser, secrets, browser.allowed_domains)  # a secret of some hosts sent everywhere
    if refusal is not None:
        raise ConfigError(f"[browser]: {refusal}")
    options = context_options(
        browser, viewport=browser.viewport, devices=devices, substitute=lambda text: secrets.substitute(text)[0]
    )
    if not browser.device and "viewport" not in browser.model_fields_set:
        options.pop("viewport", None)  # pytest-playwright's own
    options.pop("device_scale_factor", None)
    return options


def shared_dir(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory all processes of the run share (xdist's workers each have a subdirectory)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(pytestconfig, "workerinput") else base


def require_chromium(browser_name: str) -> None:
    if browser_name != "chromium":
        pytest.fail(f"webagent: the web fixture drives Chromium only, not {browser_name} (--browser)", pytrace=False)
