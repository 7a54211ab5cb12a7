"""Third-party browser providers: a package registers a factory under the entry-point group
``webagent.browser_providers`` (``name = "package.module:factory"``); ``[browser] provider =
"plugin"`` with ``plugin = "name"`` loads it (``importlib.metadata``) and calls it with
``[browser] plugin_options``. A hosted browser service is then a small package, not a fork."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points

from ...errors import ConfigError
from .base import BrowserProvider

__all__ = ["GROUP", "installed", "load_plugin"]

#: The entry-point group browser providers register under.
GROUP = "webagent.browser_providers"


def installed() -> dict[str, EntryPoint]:
    """The browser providers installed, by name."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def load_plugin(name: str, options: Mapping[str, str | int | float | bool]) -> BrowserProvider:
    """The provider ``name``, made with ``options``; a ConfigError in one line when it is not
    installed, cannot be loaded, or does not make a ``BrowserProvider``."""
    found = installed()
    if name not in found:
        names = ", ".join(sorted(found)) or "none"
        raise ConfigError(
            f"browser.plugin {name!r}: no browser provider of that name is installed (entry point group "
            f"{GROUP}; installed: {names})"
        )
    try:
        factory = found[name].load()
        provider = factory(dict(options))
    except Exception as exc:  # a third party's import or constructor: its failure in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(
            f"browser.plugin {name!r} ({found[name].value}) could not be loaded: {type(exc).__name__}: {first}"
        ) from None
    if not isinstance(provider, BrowserProvider):
        raise ConfigError(
            f"browser.plugin {name!r} ({found[name].value}) made a value of type {type(provider).__name__}, not a "
            "webagent.browser.providers.BrowserProvider"
        )
    if provider.name == BrowserProvider.name:
        provider.name = name
    return provider
