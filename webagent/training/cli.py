"""``webagent export``: training data (SFT JSONL + image files) from run and batch directories."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from ..config import AgentConfig
from ..errors import InputError
from ..inputs import terminal_json, terminal_text
from ..records import ROLES
from .export import ExportOptions, export_sft, find_runs

__all__ = ["COMMAND", "add_export_arguments", "run_export"]


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    """``webagent export``'s description and options."""
    p.description = (
        "Export run directories (webagent run --output) and batch directories (webagent batch "
        "--output) as training data: DIR/data.jsonl with one record per model call (or per step) in OpenAI "
        "chat-messages form, the exact prompts that were sent with screenshots as files under DIR/images/, "
        "and the reply as target. Identical records are written once. Load it with "
        "datasets.load_dataset('json', data_files='DIR/data.jsonl')."
    )
    p.add_argument("runs", nargs="+", metavar="RUNDIR", help="run directory or batch output directory")
    p.add_argument("--output", required=True, metavar="DIR", help="export directory (data.jsonl, images/)")
    p.add_argument("--format", choices=["sft"], default="sft", help="record format (default sft)")
    p.add_argument(
        "--per", choices=["call", "step"], default="call", help="one record per model call (default) or per step"
    )
    p.add_argument("--success-only", action="store_true", help="only runs whose answer the validator accepted")
    p.add_argument(
        "--role", action="append", choices=list(ROLES), metavar="ROLE", help="only this role's calls (repeatable)"
    )
    p.add_argument("--task", action="append", metavar="ID", help="only this task id (repeatable)")
    p.add_argument(
        "--include-failed", action="store_true", help="also export calls whose reply was unusable (error set)"
    )
    p.add_argument("--json", action="store_true", help="print the export statistics as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more to stderr")


def run_export(args: argparse.Namespace) -> int:
    output = Path(args.output)
    runs = find_runs(args.runs)
    if any(output.resolve() == r.directory.resolve() for r in runs):
        raise InputError(f"--output {output} is one of the run directories; choose a new directory")
    options = ExportOptions(
        per=args.per,
        success_only=args.success_only,
        roles=frozenset(args.role or ROLES),
        tasks=frozenset(args.task) if args.task else None,
        include_failed=args.include_failed,
    )
    stats = export_sft(runs, output, options)
    if args.json:
        print(terminal_json(json.dumps(stats.as_dict())))
    elif not args.quiet:
        skipped = f", {len(stats.skipped_runs)} unfinished runs skipped" if stats.skipped_runs else ""
        skipped += f", {stats.skipped_steps} steps without prompt context skipped" if stats.skipped_steps else ""
        print(
            terminal_text(
                f"exported {stats.records} records from {stats.runs} runs to {output / 'data.jsonl'} "
                f"({stats.duplicates} duplicates dropped, {stats.images} images written{skipped})"
            ),
            file=sys.stderr,
        )
    return 0


class ExportCommand:
    """``webagent export``: runs as training data."""

    name = "export"
    help = "export runs as training data (SFT JSONL)"

    def add_arguments(
        self, parser: argparse.ArgumentParser, config_options: Callable[[argparse.ArgumentParser], None]
    ) -> None:
        add_export_arguments(parser)

    def run(self, args: argparse.Namespace, config: Callable[[], AgentConfig]) -> int:
        return run_export(args)


COMMAND = ExportCommand()
