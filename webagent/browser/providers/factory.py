"""The pool a runtime gets for ``[browser] provider``: ``local`` is the launcher's ``BrowserPool``
exactly as it was (a browser launched here, or the one ``ws_endpoint``/``cdp_endpoint``); ``hosts``
and a plugin get a ``FleetPool`` over their leases."""

from __future__ import annotations

from playwright.async_api import Browser

from ...config import BrowserConfig
from ...guard.secrets import Secrets
from ..pool import BrowserPool
from .base import BrowserProvider
from .hosts import HostsProvider
from .plugins import load_plugin
from .pool import FleetPool

__all__ = ["make_pool", "provider_of"]


def provider_of(config: BrowserConfig, secrets: Secrets) -> BrowserProvider | None:
    """The provider ``config`` names (None: ``local``); a ConfigError in one line when it cannot be had."""
    if config.provider == "hosts":
        return HostsProvider(config.hosts, secrets)
    if config.provider == "plugin":
        assert config.plugin is not None  # the config's own check
        return load_plugin(config.plugin, config.plugin_options)
    return None


def make_pool(config: BrowserConfig, secrets: Secrets, *, browser: Browser | None = None) -> BrowserPool:
    """The browser pool for ``config`` (``browser``: a caller's own, which only the local pool takes)."""
    provider = None if browser is not None else provider_of(config, secrets)
    if provider is None:
        return BrowserPool(config, browser=browser)
    return FleetPool(config, provider)
