"""The secrets' flags: ``--secret NAME=VALUE`` and ``--secret-host NAME=HOST`` (where each may be
typed: docs/security.md, "Secrets"), and the config overrides they make."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ConfigError

__all__ = ["SECRET_FLAGS", "add_secret_options", "secret_overrides"]

#: Config key prefix -> the flag that sets it (how a ConfigError about it is worded).
SECRET_FLAGS = {"secrets": "--secret", "secret_hosts": "--secret-host"}


def add_secret_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--secret",
        action="append",
        metavar="NAME=VALUE",
        help="a secret the policy types as {{NAME}} without seeing it; repeatable "
        "(prefer WEBAGENT_SECRET_<NAME>: command lines are visible to other users)",
    )
    group.add_argument(
        "--secret-host",
        action="append",
        metavar="NAME=HOST",
        help="type secret NAME only on pages of HOST (host, host:port or *.example.com); repeatable. A secret "
        "without: the --allow-domain hosts, else the start URL's host (never a client's or a task file's)",
    )


def secret_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``secrets.NAME`` and ``secret_hosts.NAME`` overrides of the flags (a secret's ``--secret-host``
    flags replace the config file's hosts of it). ConfigError for a malformed one, never quoting a value."""
    overrides: dict[str, Any] = {}
    for item in getattr(args, "secret", None) or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():  # the argument is not echoed: it may be the value itself
            raise ConfigError("--secret expects NAME=VALUE, e.g. --secret PASSWORD=...; one argument had no NAME=")
        overrides[f"secrets.{name.strip()}"] = value
    for item in getattr(args, "secret_host", None) or []:
        name, sep, host = (part.strip() for part in item.partition("="))
        if not sep or not name or not host:
            raise ConfigError(f"--secret-host expects NAME=HOST, e.g. --secret-host PASSWORD=example.com, not {item!r}")
        overrides.setdefault(f"secret_hosts.{name}", []).append(host)
    return overrides
