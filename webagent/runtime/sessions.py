"""The session settings of one runtime: a run's ``ContextSettings`` as context options and secrets.

The config's ``[browser]`` settings are every context's; a run spec may replace some for its own
context (a batch task's ``browser``, a suite check's, an MCP session's profile). What a setting
holds that must never be written down -- a signed-in state's cookie and local-storage values, a
proxy's or a site's password -- joins the run's ``Secrets`` as values redacted everywhere
(``Secrets(hidden=...)``), so that the run's records, reports, logs and spans never hold them.

A state file is read once per version (its path, size and modification time): a hundred runs on
one signed-in state share one parsed copy and one set of secrets.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..browser.context import context_options, load_storage_state, secret_reach, state_secrets
from ..browser.pool import BrowserPool
from ..config import AgentConfig, BrowserConfig, ContextSettings
from ..errors import ActionError, ConfigError
from ..files.uploads import AllowedFiles
from ..guard.secrets import Secrets

__all__ = ["SessionSettings", "checked_sessions", "private_outputs"]

#: State files (and the secrets made of them) kept parsed at once.
_CACHED = 16


class SessionSettings:
    """Context options and run secrets for the settings of one runtime (``[browser]``), each run's
    own changes over them."""

    def __init__(self, browser: BrowserConfig, secrets: Secrets, pool: BrowserPool) -> None:
        self.base = browser
        self._secrets = secrets
        self._pool = pool
        self._states: OrderedDict[tuple[Path, int, int], tuple[dict[str, Any], list[str]]] = OrderedDict()
        self._run_secrets: OrderedDict[tuple[object, ...], Secrets] = OrderedDict()

    def effective(self, changes: ContextSettings | None) -> ContextSettings:
        """The settings of a run: the config's with ``changes`` over them."""
        return self.base.over(changes)

    def secrets(self, changes: ContextSettings | None = None) -> Secrets:
        """The config's secrets and what the run's settings hold that must never be written down."""
        settings = self.effective(changes)
        state = self._state(settings.storage_state)[1] if settings.storage_state is not None else []
        passwords = [
            p.get_secret_value()
            for p in (
                settings.proxy.password if settings.proxy is not None else None,
                settings.http_credentials.password if settings.http_credentials is not None else None,
            )
            if p is not None
        ]
        key = (tuple(state), tuple(passwords))
        found = self._run_secrets.get(key)
        if found is None:
            found = self._secrets.with_hidden({"STORAGE_STATE": state, "PASSWORD": passwords})
            self._remember(self._run_secrets, key, found)
        return found

    def private(self, changes: ContextSettings | None = None) -> bool:
        """Whether a run with these settings writes its outputs private (``private_outputs``)."""
        return _holds_secrets(bool(self._secrets), self.effective(changes))

    def uploads(self, changes: ContextSettings | None = None) -> AllowedFiles:
        """The files a run with these settings may upload (``upload_dir``, ``upload_files``)."""
        settings = self.effective(changes)
        return AllowedFiles(settings.upload_dir, settings.upload_files)

    async def options(self, changes: ContextSettings | None = None) -> dict[str, Any]:
        """``new_context`` options of a run's context (``webagent.browser.context.context_options``)."""
        settings = self.effective(changes)
        self.check_reach(changes)
        devices = await self._pool.devices() if settings.device else None
        state = self._state(settings.storage_state)[0] if settings.storage_state is not None else None
        return context_options(
            settings, viewport=self.base.viewport, devices=devices, substitute=self._substitute, state=state
        )

    def check_reach(self, changes: ContextSettings | None = None) -> None:
        """ConfigError when the settings would send a secret with hosts of its own (a header's or a
        password's ``{{NAME}}``) to a host outside them (``webagent.browser.context.secret_reach``)."""
        refusal = secret_reach(self.effective(changes), self._secrets, self.base.allowed_domains)
        if refusal is not None:
            raise ConfigError(f"[browser]: {refusal}")

    def check(self, changes: ContextSettings | None = None) -> None:
        """ConfigError now for a state file that cannot be read, a placeholder naming no secret, or one
        naming a secret that would be sent outside its hosts."""
        settings = self.effective(changes)
        self.check_reach(changes)
        if settings.storage_state is not None:
            self._state(settings.storage_state)
        without_device = settings.model_copy(update={"device": None})  # the registry is checked when opening
        context_options(without_device, viewport=self.base.viewport, substitute=self._substitute, state={})

    def _substitute(self, text: str) -> str:
        try:
            return self._secrets.substitute(text)[0]
        except ActionError as exc:  # an unknown {{NAME}}: a config error, never a value quoted
            raise ConfigError(f"[browser]: {exc}") from None

    def _state(self, path: Path) -> tuple[dict[str, Any], list[str]]:
        try:
            info = path.stat()
        except OSError:
            load_storage_state(path)  # the ConfigError saying what is wrong with it
            raise
        key = (path.resolve(), info.st_size, info.st_mtime_ns)
        found = self._states.get(key)
        if found is None:
            state = load_storage_state(path)
            found = (state, state_secrets(state))
            self._remember(self._states, key, found)
        return found

    @staticmethod
    def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        cache[key] = value
        while len(cache) > _CACHED:
            cache.popitem(last=False)


def private_outputs(config: AgentConfig, changes: Iterable[ContextSettings | None] = ()) -> bool:
    """Whether runs with this config (and these session settings: a batch's tasks, a suite's checks)
    write their outputs private, folders 0700 and files 0600 (``webagent.files.disk``): when they type
    secrets, or hold a signed-in state or a password. Their screenshots are of signed-in pages then,
    and other local users must not read them. Without any, outputs keep the umask's permissions: a
    CI job reads what a container running as another user wrote (docker/README.md)."""
    return _holds_secrets(bool(config.secrets), config.browser) or any(
        _holds_secrets(False, config.browser.over(change)) for change in changes if change is not None
    )


def _holds_secrets(typed: bool, settings: ContextSettings) -> bool:
    """The one rule: secrets to type (``typed``), or settings that hold a state or a password."""
    return typed or settings.secret_bearing


def checked_sessions(config: AgentConfig, changes: Iterable[ContextSettings | None]) -> AgentConfig:
    """``config`` for runs with these session settings (a batch's tasks, a suite's checks): a state
    file that cannot be read, or a ``{{NAME}}`` naming no secret, is one ConfigError up front (not
    one per task); and when any of them holds a secret (a signed-in state, a password), the
    browsers get no DevTools port that other local users could reach (unless ``direct_cdp`` is set).
    That decision is written down as set (``direct_cdp`` in the fields set), so that it holds in every
    process the config is sent to (a worker, a Ray actor), whose own tasks it does not see."""
    checker = SessionSettings(config.browser, config.secret_set(), BrowserPool(config.browser))
    bearing = config.browser.secret_bearing
    for change in changes:
        if change is not None:
            checker.check(change)
            bearing = bearing or checker.effective(change).secret_bearing
    if bearing and "direct_cdp" not in config.browser.model_fields_set:
        return config.model_copy(update={"browser": config.browser.model_copy(update={"direct_cdp": False})})
    return config
