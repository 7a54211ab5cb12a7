"""Commands register themselves: each feature's ``cli.py`` exposes its ``COMMAND``, the parser is built
from the registry, and the help's defaults are the settings' own."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

import pytest
import structlog

from webagent.cli.commands import EXIT_OK
from webagent.cli.main import main
from webagent.cli.parser import build_parser, registered
from webagent.config import AgentSettings, BrowserConfig

#: Command names are a contract (scripts, CI, docs): never renamed or dropped.
NAMES = ("run", "test", "batch", "demo", "mcp", "fake-server", "export", "env", "auth", "session", "skill", "sites")
#: Where each command lives: with its feature.
HOMES = {
    "run": "webagent.cli.run",
    "test": "webagent.suite.cli",
    "batch": "webagent.batch.cli",
    "demo": "webagent.cli.demo",
    "mcp": "webagent.mcp_server.cli",
    "export": "webagent.training.cli",
    "env": "webagent.env.cli",
    "auth": "webagent.cli.auth",
}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_parser_has_every_registered_command_in_order() -> None:
    assert tuple(c.name for c in registered()) == NAMES
    assert tuple(subparsers(build_parser())) == NAMES
    help_text = " ".join(build_parser().format_help().split())
    for command in registered():
        assert command.help in help_text


@pytest.mark.parametrize(("name", "module"), sorted(HOMES.items()))
def test_each_feature_exposes_its_command(name: str, module: str) -> None:
    command = importlib.import_module(module).COMMAND
    assert command.name == name
    assert any(c is command for c in registered())


def test_a_command_is_run_with_its_arguments_and_the_config_on_demand(monkeypatch: pytest.MonkeyPatch) -> None:
    """main dispatches to the registered command; the config is loaded only when the command asks."""
    # main configures structlog, logging and the excepthook for the process: undone for the tests after this
    saved, handlers = structlog.get_config(), list(logging.getLogger().handlers)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    seen: list[tuple[str, object]] = []
    export = importlib.import_module("webagent.training.cli").COMMAND

    def run(args: argparse.Namespace, config: object) -> int:
        seen.append((args.output, config))
        return EXIT_OK

    monkeypatch.setattr(export, "run", run)
    try:
        assert main(["export", "runs/x", "--output", "out-dir", "-q"]) == EXIT_OK
    finally:
        structlog.configure(**saved)
        logging.getLogger().handlers[:] = handlers
    assert [output for output, _ in seen] == ["out-dir"] and callable(seen[0][1])


def test_the_help_says_the_settings_own_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """A default changed in the settings is the default the help says: one place, not two."""
    monkeypatch.setattr(AgentSettings.model_fields["max_steps"], "default", 41)
    monkeypatch.setattr(AgentSettings.model_fields["max_time_s"], "default", 77.5)
    monkeypatch.setattr(BrowserConfig.model_fields["max_downloads"], "default", 9)
    run = subparsers(build_parser())["run"].format_help()
    flat = " ".join(run.split())
    assert "(default 41)" in flat and "(default 77.5)" in flat and "at most (default 9)" in flat
