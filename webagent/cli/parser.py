"""The command line's parser: one subparser per registered command (each feature's ``COMMAND``,
``webagent.cli.commands``), the config's options every command that runs the agent takes (their
help's defaults read from the settings' fields), and the config they make (the precedence of flags
over the environment over the config file is ``load_config``'s)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn, get_args

from pydantic import BaseModel

from .._version import __version__
from ..config import ROLES, AgentConfig, AgentSettings, BrowserConfig, Viewport, load_config
from ..families import DEFAULT_PROFILE, FAMILIES, PROFILES, Grounding
from .commands import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Command
from .secretflags import SECRET_FLAGS, add_secret_options, secret_overrides
from .sessionflags import SESSION_FLAGS, add_session_options, session_overrides

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "cli_option",
    "config_from_args",
    "registered",
]

_ROLE_FIELDS: list[tuple[str, str, Callable[[str], object]]] = [
    ("base_url", "OpenAI-compatible base URL of the {role} model", str),
    ("model", "model name of the {role} model", str),
    ("api_key", "API key of the {role} endpoint", str),
    ("temperature", "sampling temperature of the {role} model", float),
    ("max_tokens", "max completion tokens of the {role} model", int),
    ("timeout_s", "request timeout of the {role} model, in seconds", float),
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"webagent: error: {message} (see '{self.prog} --help')\n")


def _default(section: type[BaseModel], key: str) -> str:
    """A config field's default as its flag's help shows it: the settings say it once."""
    value = section.model_fields[key].get_default(call_default_factory=True)
    if isinstance(value, Viewport):
        return f"{value.width}x{value.height}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config file ([policy] [localizer] [validator] [agent] [browser])",
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug) to stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print steps")
    g = p.add_argument_group("models (all roles at once; per-role flags win)")
    g.add_argument("--base-url", help="base URL for all three roles, e.g. http://localhost:8000/v1")
    g.add_argument("--model", help="model name for all three roles")
    g.add_argument("--api-key", help="API key for all three roles")
    for role in ROLES:
        g = p.add_argument_group(f"{role} model")
        for field, text, typ in _ROLE_FIELDS:
            g.add_argument(
                f"--{role}-{field.replace('_', '-')}",
                type=typ,
                metavar=field.upper(),
                help=text.format(role=role),
            )
        if role != "localizer":  # the localizer's convention is its profile
            g.add_argument(
                f"--{role}-family",
                choices=list(FAMILIES),
                help=f"{role} model family: its contract and what its requests ask of the server (a tile "
                "limit, reasoning switches; see docs/serving.md); unset, nothing is added",
            )
        if role == "policy":
            g.add_argument(
                "--policy-output",
                choices=["json", "tools"],
                help="how the policy replies: one JSON object, or native tool calls (default: the family's)",
            )
        if role == "localizer":
            g.add_argument(
                "--localizer-profile",
                choices=list(PROFILES),
                help=f"coordinate convention of the localizer model family (default {DEFAULT_PROFILE})",
            )
    g = p.add_argument_group("agent")
    agent = {key: _default(AgentSettings, key) for key in ("max_steps", "max_attempts", "max_time_s")}
    g.add_argument(
        "--max-steps",
        type=int,
        help=f"steps in all, the last asking for the final answer (default {agent['max_steps']})",
    )
    g.add_argument(
        "--max-attempts", type=int, help=f"answers the validator may judge (default {agent['max_attempts']})"
    )
    g.add_argument(
        "--max-time", type=float, metavar="SECONDS", help=f"time limit of the run (default {agent['max_time_s']})"
    )
    g.add_argument(
        "--screenshots",
        type=int,
        metavar="K",
        help=f"screenshots in each policy request (default {_default(AgentSettings, 'screenshots_in_context')})",
    )
    g.add_argument(
        "--grounding",
        choices=list(get_args(Grounding)),
        help="who places clicks on the screenshot: the policy in its reply (one request a step) or the "
        "localizer (default: the policy family's)",
    )
    g.add_argument(
        "--max-actions-per-turn",
        type=int,
        metavar="N",
        help="actions one policy reply may carry, carried out in order up to the first that changes the page "
        "(default: the policy family's, 1)",
    )
    g.add_argument("--budget-calls", type=int, metavar="N", help="hard limit on model calls per run")
    g.add_argument("--budget-tokens", type=int, metavar="N", help="hard limit on tokens (all roles) per run")
    g.add_argument("--budget-usd", type=float, metavar="USD", help="hard limit on dollars per run (per-role prices)")
    g = p.add_argument_group("browser")
    g.add_argument("--headed", action="store_true", help="show the browser window (default headless)")
    g.add_argument(
        "--executable-path",
        metavar="PATH",
        help="Chromium binary (default: the system's chromium-headless-shell when headless and unguarded, "
        "else /usr/bin/chromium)",
    )
    g.add_argument(
        "--viewport", metavar="WxH", help=f"viewport size in CSS pixels (default {_default(BrowserConfig, 'viewport')})"
    )
    g.add_argument("--ws-endpoint", metavar="URL", help="use a Playwright browser server (playwright run-server)")
    g.add_argument("--cdp-endpoint", metavar="URL", help="use a running Chromium's remote-debugging endpoint")
    g.add_argument(
        "--downloads",
        choices=["keep", "refuse"],
        help="what becomes of a file a page downloads: keep (saved in the run's downloads/ folder) or refuse "
        f"(cancelled); default {_default(BrowserConfig, 'downloads')}",
    )
    g.add_argument(
        "--max-downloads",
        type=int,
        metavar="N",
        help=f"downloads a run keeps at most (default {_default(BrowserConfig, 'max_downloads')})",
    )
    g.add_argument(
        "--max-download-mb",
        type=float,
        metavar="MB",
        help=f"a larger download is cancelled (default {_default(BrowserConfig, 'max_download_mb')} MiB)",
    )
    g = p.add_argument_group("safety (see the SECURITY section of the README)")
    g.add_argument(
        "--allow-domain",
        action="append",
        metavar="HOST",
        help="only open/request these hosts (host, host:port or *.example.com); repeatable",
    )
    g.add_argument("--block-domain", action="append", metavar="HOST", help="never open/request these hosts; repeatable")
    g.add_argument(
        "--private-network",
        choices=["auto", "allow", "block"],
        help=f"private/loopback addresses: auto = blocked unless the start URL is local (default "
        f"{_default(BrowserConfig, 'private_network')})",
    )
    add_secret_options(g)
    add_session_options(p)


def registered() -> tuple[Command, ...]:
    """Every command, each exposed by its feature's ``cli.py``, in the order ``webagent --help`` lists them."""
    from ..batch.cli import COMMAND as BATCH
    from ..env.cli import COMMAND as ENV
    from ..mcp_server.cli import COMMAND as MCP
    from ..shell.cli import SESSION, SKILL
    from ..suite.cli import COMMAND as TEST
    from ..training.cli import COMMAND as EXPORT
    from .auth import COMMAND as AUTH
    from .demo import COMMAND as DEMO
    from .run import COMMAND as RUN
    from .servers import FAKE_SERVER, SITES

    return (RUN, TEST, BATCH, DEMO, MCP, FAKE_SERVER, EXPORT, ENV, AUTH, SESSION, SKILL, SITES)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="webagent", description="A web agent driven by vision-language models.")
    parser.add_argument("--version", action="version", version=f"webagent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in registered():
        command.add_arguments(sub.add_parser(command.name, help=command.help), _add_config_options)
    return parser


#: Config key -> the flag that sets it (besides the per-role ones), for config_from_args and errors.
_FLAGS: dict[str, str] = {
    "localizer.profile": "--localizer-profile",
    "policy.family": "--policy-family",
    "validator.family": "--validator-family",
    "agent.max_steps": "--max-steps",
    "agent.max_attempts": "--max-attempts",
    "agent.max_time_s": "--max-time",
    "agent.screenshots_in_context": "--screenshots",
    "agent.grounding": "--grounding",
    "agent.max_actions_per_turn": "--max-actions-per-turn",
    "policy.output": "--policy-output",
    "agent.budget_calls": "--budget-calls",
    "agent.budget_tokens": "--budget-tokens",
    "agent.budget_usd": "--budget-usd",
    "browser.headless": "--headed",
    "browser.executable_path": "--executable-path",
    "browser.viewport": "--viewport",
    "browser.allowed_domains": "--allow-domain",
    "browser.blocked_domains": "--block-domain",
    "browser.private_network": "--private-network",
    "browser.ws_endpoint": "--ws-endpoint",
    "browser.cdp_endpoint": "--cdp-endpoint",
    "browser.downloads": "--downloads",
    "browser.max_downloads": "--max-downloads",
    "browser.max_download_mb": "--max-download-mb",
}
_FLAGS |= {f"{role}.{field}": f"--{role}-{field.replace('_', '-')}" for role in ROLES for field, _, _ in _ROLE_FIELDS}


def cli_option(key: str) -> str | None:
    """The flag that sets a config key (``"policy.base_url"`` -> ``--policy-base-url``): how the
    CLI words a ``ConfigError`` about it."""
    if key.startswith(("secrets.", "secret_hosts.")):
        return SECRET_FLAGS[key.partition(".")[0]]
    return _FLAGS.get(key) or SESSION_FLAGS.get(".".join(key.split(".")[:2]))


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    overrides: dict[str, Any] = session_overrides(args)
    if getattr(args, "cache_any_origin", False):  # (run and test only)
        overrides["agent.replay_any_origin"] = True
    for role in ROLES:
        for field, _, _ in _ROLE_FIELDS:
            value = getattr(args, f"{role}_{field}", None)
            shared = getattr(args, field, None) if field in ("base_url", "model", "api_key") else None
            overrides[f"{role}.{field}"] = value if value is not None else shared
    for key, flag in _FLAGS.items():
        if key not in overrides:
            overrides[key] = getattr(args, flag.removeprefix("--").replace("-", "_"))
    overrides["browser.headless"] = False if args.headed else None
    overrides |= secret_overrides(args)
    return load_config(args.config, overrides=overrides, option=cli_option)
