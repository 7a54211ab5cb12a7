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

__all__ = ["run_auth"]


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
