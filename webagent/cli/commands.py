"""The commands of ``webagent``, each registered by its feature.

A command is a :class:`Command`: its name, its line in ``webagent --help``, the options it adds to
its own parser and what it runs. Each feature's ``cli.py`` exposes one as ``COMMAND`` (``webagent
batch`` is ``webagent.batch.cli.COMMAND``); ``webagent.cli.parser.registered`` lists them in the
order ``webagent --help`` shows them. A command takes nothing from the CLI's modules: the shared options
of the config (the models, the agent's limits, the browser) are handed to ``add_arguments`` as a
function to call on any parser of its own, and the config those options make is handed to ``run``
as a function to call when it needs one (``webagent export`` needs none).

Adding a command is a class with these four members in the feature's ``cli.py`` and one line in
``registered``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Protocol

from ..config import AgentConfig

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "Command", "ConfigOptions", "LoadConfig"]

#: The exit codes every command shares: done (a validated success), failed, bad usage or input, interrupted.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

#: Adds the config's options (``--config``, the models, the agent's limits, the browser) to a parser.
ConfigOptions = Callable[[argparse.ArgumentParser], None]
#: The config the parsed options make (``ConfigError`` for a bad one).
LoadConfig = Callable[[], AgentConfig]


class Command(Protocol):
    """One ``webagent`` command."""

    @property
    def name(self) -> str:
        """The command's name (``webagent NAME``): a contract, never renamed."""
        ...

    @property
    def help(self) -> str:
        """Its line in ``webagent --help``."""
        ...

    def add_arguments(self, parser: argparse.ArgumentParser, config_options: ConfigOptions) -> None:
        """Its description and options, on its own parser (``config_options(parser)`` for the config's)."""
        ...

    def run(self, args: argparse.Namespace, config: LoadConfig) -> int:
        """Run it; its exit code."""
        ...
