"""Fixtures of both Playwright variants: the settings, the config and the browser's launch arguments."""

from __future__ import annotations

from typing import Any

import pytest

from ..config import AgentConfig
from ..errors import WebAgentError
from .launch import bundled_chromium_installed, extend_launch_args
from .options import PluginSettings

__all__ = ["SETTINGS", "browser_type_launch_args", "webagent_config"]

#: The run's ``PluginSettings`` (read at ``pytest_configure``).
SETTINGS = pytest.StashKey[PluginSettings]()


@pytest.fixture(scope="session")
def webagent_config(pytestconfig: pytest.Config) -> AgentConfig:
    """The webagent config of this run: defaults < ``--webagent-config`` < ``WEBAGENT_*`` < options."""
    try:
        return pytestconfig.stash[SETTINGS].load_config()
    except WebAgentError as exc:
        pytest.fail(f"webagent: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def browser_type_launch_args(
    browser_type_launch_args: dict[str, Any],
    webagent_config: AgentConfig,
    browser_name: str,
    connect_options: dict[str, Any] | None,
) -> dict[str, Any]:
    """pytest-playwright's launch arguments with the Chromium webagent would use (``launch.py``).

    It starts no Playwright: a test suite that launches its browsers itself (this project's own)
    can use these arguments without pytest-playwright's sync ``playwright`` fixture."""
    try:
        return extend_launch_args(
            browser_type_launch_args,
            webagent_config.browser,
            browser_name=browser_name,
            bundled_installed=bundled_chromium_installed(),
            remote=bool(connect_options),
        )
    except WebAgentError as exc:
        pytest.fail(f"webagent: {exc}", pytrace=False)
