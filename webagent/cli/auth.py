"""``webagent auth save URL --goal "sign in ..." --output state.json``: sign in once, keep the state.

(Its options are in ``webagent.cli.parser``.) The agent runs the sign-in like any task (``--secret``s typed from ``{{NAME}}``, a 2FA code asked of
the person at the terminal through ``ask_user``); when the validator accepts its answer, the
browser's state (cookies, local storage, IndexedDB) is written to ``--output``, readable by its
owner only (0600). Later runs start signed in with ``[browser] storage_state = FILE`` or
``--storage-state FILE``. The state is never copied into the run directory (``--run-dir``), and its
cookies' values are redacted from everything the runs write, like secrets.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from ..config import AgentConfig
from ..errors import InputError
from ..inputs import check_text, terminal_text
from .commands import ConfigOptions, LoadConfig

__all__ = ["COMMAND", "run_auth"]


def run_auth(args: argparse.Namespace, config: AgentConfig) -> int:
    if args.auth_command != "save":
        raise InputError("say what to do: webagent auth save URL --goal '...' --output FILE")
    check_text(args.goal, "--goal")
    output = Path(args.output)
    if output.is_dir():
        raise InputError(f"--output {output} is a directory; give the state file's path, e.g. {output}/state.json")
    from .run import run_task

    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-auth"
    if output.resolve().is_relative_to(run_dir.resolve()):
        raise InputError(f"--output {output} is inside the run directory {run_dir}: keep the state file out of it")
    result = asyncio.run(run_task(config, args.url, args.goal, run_dir, args.quiet, None, save_state=output))
    if result.success and output.exists():
        print(
            terminal_text(f"webagent: signed-in state saved to {output} (0600); use it with --storage-state {output}")
        )
        return 0
    print(
        terminal_text(f"webagent: not signed in ({result.stop_reason}: {result.message}); nothing was saved"),
        file=sys.stderr,
    )
    return 1


class AuthCommand:
    """``webagent auth save``: a sign-in whose browser state is saved."""

    name = "auth"
    help = "sign in to a site once and save the browser state for later runs"

    def add_arguments(self, parser: argparse.ArgumentParser, config_options: ConfigOptions) -> None:
        parser.description = "Manage signed-in browser states."
        commands = parser.add_subparsers(dest="auth_command", metavar="ACTION", parser_class=type(parser))
        save = commands.add_parser(
            "save",
            help="sign in at URL (with --secret values) and save the browser state",
            description="Run the sign-in GOAL at URL; when it succeeds, write the browser's state (cookies, local "
            "storage, IndexedDB) to --output, readable by its owner only (0600). Use it with --storage-state FILE "
            "or [browser] storage_state. Exit code 0 = signed in and saved, 1 = not signed in (nothing written), "
            "2 = usage or configuration error.",
        )
        save.add_argument("url", metavar="URL", help="the sign-in page (or a page that leads to it)")
        save.add_argument(
            "--goal", required=True, help='what signing in takes, e.g. "sign in as ada with {{PASSWORD}}"'
        )
        save.add_argument("--output", required=True, metavar="FILE", help="where to write the state (JSON, 0600)")
        save.add_argument(
            "--run-dir",
            metavar="DIR",
            help="the sign-in's run directory (default: runs/<time>-auth); never holds the state",
        )
        config_options(save)

    def run(self, args: argparse.Namespace, config: LoadConfig) -> int:
        return run_auth(args, config())


COMMAND = AuthCommand()
