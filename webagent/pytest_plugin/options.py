"""The plugin's pytest options and ini keys, read once per run into ``PluginSettings``.

Every option has an ini key of the same name (``--webagent-max-steps`` / ``webagent_max_steps``);
the command line wins. The agent's config is then built as everywhere else in webagent
(``load_config``): defaults < the TOML file (``--webagent-config``) < ``WEBAGENT_*`` environment
variables < these options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, cast, get_args

import pytest

from ..families import DEFAULT_PROFILE
from ..families import PROFILES as _PROFILES
from ..records import ROLES

if TYPE_CHECKING:
    from ..config import AgentConfig

__all__ = [
    "MISSING",
    "REPORTS",
    "SETTINGS",
    "CacheMode",
    "PluginSettings",
    "RunsMode",
    "add_options",
    "fail_with",
    "pytest_option",
    "read_settings",
]

MISSING = (
    "webagent: the web fixture needs pytest-playwright: pip install 'webagent[pytest]' "
    "(or 'webagent[pytest-async]' for async tests)"
)

CacheMode = Literal["auto", "read", "write", "off"]
RunsMode = Literal["retain-on-failure", "on", "off"]
PROFILES = _PROFILES

#: (option name without "--webagent-", metavar, help, choices or None). The ini key is
#: ``webagent_<name>`` with dashes as underscores.
_OPTIONS: tuple[tuple[str, str | None, str, tuple[str, ...] | None], ...] = (
    ("config", "FILE", "webagent config file (TOML); in an ini file, relative to it", None),
    ("base-url", "URL", "OpenAI-compatible base URL of all three model roles (policy, localizer, validator)", None),
    ("model", "NAME", "model name of all three roles", None),
    ("localizer-profile", None, f"coordinate convention of the localizer model (default {DEFAULT_PROFILE})", PROFILES),
    (
        "storage-state",
        "FILE",
        "start every test's pages signed in: a browser state saved by `webagent auth save` (a secret, kept out of "
        "every run folder); in an ini file, relative to it",
        None,
    ),
    ("max-steps", "N", "steps of one web.act before it gives up (default: [agent] max_steps, 30)", None),
    ("max-calls-per-test", "N", "hard limit on model calls of one test (all its act/check/extract)", None),
    ("max-calls-per-session", "N", "hard limit on model calls of the whole run (all workers under -n)", None),
    (
        "cache",
        None,
        "replay cache next to the tests (__webagent_cache__/): auto = replay and record, read = replay only "
        "(never write), write = record anew, off (default auto)",
        get_args(CacheMode),
    ),
    (
        "runs",
        None,
        "keep each act/check/extract's run directory (report.html, trajectory.jsonl) in the test's --output "
        "folder: retain-on-failure (default), on, off",
        get_args(RunsMode),
    ),
)


#: Config key -> the option of the plugin that sets it (the ini key of the same name too).
_KEYS: dict[str, str] = {
    **{f"{role}.{field}": name for role in ROLES for field, name in (("base_url", "base-url"), ("model", "model"))},
    "localizer.profile": "localizer-profile",
    "agent.max_steps": "max-steps",
}


def pytest_option(key: str) -> str | None:
    """How the plugin's user sets a config key (``"policy.base_url"`` -> ``--webagent-base-url``):
    how a ``ConfigError`` about it is worded in a pytest run."""
    name = _KEYS.get(key)
    if name is None:
        return None
    return f"--webagent-{name} (or the ini key webagent_{name.replace('-', '_')})"


def fail_with(exc: Exception) -> NoReturn:
    """Fail the test with ``webagent: <exc>``, one line (not the traceback of ``exc`` before it);
    a config error names the plugin's options, not the CLI's."""
    from ..errors import ConfigError

    text = exc.worded(pytest_option) if isinstance(exc, ConfigError) else str(exc)
    raise pytest.fail.Exception(f"webagent: {text}", pytrace=False) from None


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("webagent", "webagent (natural-language steps and checks)")
    for name, metavar, help_text, choices in _OPTIONS:
        dest = "webagent_" + name.replace("-", "_")
        group.addoption(f"--webagent-{name}", dest=dest, default=None, metavar=metavar, choices=choices, help=help_text)
        parser.addini(dest, help=f"default of --webagent-{name}")


@dataclass(frozen=True)
class PluginSettings:
    """What the options and ini keys say."""

    config_path: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    #: Config key -> the option or ini key its override came from (what a bad value is said to come from).
    sources: dict[str, str] = field(default_factory=dict)
    max_calls_per_test: int | None = None
    max_calls_per_session: int | None = None
    cache: CacheMode = "auto"
    runs: RunsMode = "retain-on-failure"

    def load_config(self) -> AgentConfig:
        """The agent's config: defaults < TOML < ``WEBAGENT_*`` environment < options (ConfigError if bad)."""
        from ..config import load_config  # imported when a test needs the agent, not for every pytest run

        return load_config(self.config_path, overrides=self.overrides, option=self.sources.get)


def _value(config: pytest.Config, name: str) -> tuple[str | None, str]:
    """The option's value (command line, else ini) and where it came from, for messages."""
    dest = "webagent_" + name.replace("-", "_")
    value = config.getoption(dest, default=None)
    if value is not None:
        return str(value), f"--webagent-{name}"
    ini = config.getini(dest)
    if isinstance(ini, str) and ini.strip():
        return ini.strip(), f"ini key {dest}"
    return None, ""


def _count(config: pytest.Config, name: str, *, minimum: int) -> int | None:
    raw, source = _value(config, name)
    if raw is None:
        return None
    try:
        number = int(raw)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise pytest.UsageError(f"webagent: {source} must be an integer of at least {minimum}, got {raw!r}")
    return number


def _choice(config: pytest.Config, name: str, choices: tuple[str, ...], default: str) -> str:
    raw, source = _value(config, name)
    if raw is None:
        return default
    if raw not in choices:
        raise pytest.UsageError(f"webagent: {source} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def _config_path(config: pytest.Config, name: str = "config") -> Path | None:
    raw = config.getoption(f"webagent_{name}", default=None)
    if raw is not None:
        path = Path(str(raw))
        return path if path.is_absolute() else config.invocation_params.dir / path
    ini = config.getini(f"webagent_{name}")
    if isinstance(ini, str) and ini.strip():
        base = config.inipath.parent if config.inipath is not None else config.rootpath
        return base / ini.strip()
    return None


def read_settings(config: pytest.Config) -> PluginSettings:
    """The settings of this pytest run; a bad value is a ``pytest.UsageError`` of one line."""
    overrides: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, name in _KEYS.items():
        if key not in ("localizer.profile", "agent.max_steps"):
            overrides[key], sources[key] = _value(config, name)
    profile = _choice(config, "localizer-profile", PROFILES, "")
    overrides["localizer.profile"] = profile or None
    overrides["agent.max_steps"] = _count(config, "max-steps", minimum=1)
    overrides["browser.storage_state"] = _config_path(config, "storage_state")
    return PluginSettings(
        config_path=_config_path(config),
        overrides={key: value for key, value in overrides.items() if value is not None},
        sources={key: source for key, source in sources.items() if source},
        max_calls_per_test=_count(config, "max-calls-per-test", minimum=0),
        max_calls_per_session=_count(config, "max-calls-per-session", minimum=0),
        cache=cast(CacheMode, _choice(config, "cache", get_args(CacheMode), "auto")),
        runs=cast(RunsMode, _choice(config, "runs", get_args(RunsMode), "retain-on-failure")),
    )


#: The plugin's settings of this run, and each test's reports by phase (what decides whether its
#: run folders are kept).
SETTINGS = pytest.StashKey[PluginSettings]()
REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
