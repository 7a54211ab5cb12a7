"""Render the CLI reference (docs/cli.md) from the argparse help, so docs and --help never drift.

python -m webagent.cli.docs > docs/cli.md
"""

from __future__ import annotations

import argparse
import os
import sys

from .parser import build_parser

__all__ = ["render_cli_docs"]

WIDTH = "100"


def render_cli_docs() -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        parts = [
            "# CLI reference",
            "",
            "Generated from `webagent --help` by `python -m webagent.cli.docs > docs/cli.md`; a test keeps it in sync.",
            "",
            "Exit codes: `0` validated success, `1` task not accomplished, `2` usage or configuration error.",
            "",
            "## webagent",
            "",
            "```text",
            parser.format_help().rstrip(),
            "```",
        ]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    parts += ["", f"## webagent {name}", "", "```text", sub.format_help().rstrip(), "```"]
        return "\n".join(parts) + "\n"
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render_cli_docs())
