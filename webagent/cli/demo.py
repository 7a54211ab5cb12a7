"""``webagent demo``: a real task on a bundled local site, with the offline model server as the VLM."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from ..errors import InputError
from ..families import DEFAULT_PROFILE, PROFILES
from ..records import RunResult
from .commands import ConfigOptions, LoadConfig

__all__ = ["COMMAND", "run_demo"]


def run_demo(*, task_id: str, profile: str, output: str | None, quiet: bool) -> RunResult:
    from ..testing.offline import load_local_tasks, offline_config
    from ..testing.server import FakeModelServer
    from ..testing.sites import SiteServer, data_dir
    from .run import run_task

    script = data_dir() / "scripts" / f"{task_id}.json"
    with SiteServer() as site:
        tasks = load_local_tasks(site.url)
        if task_id not in tasks or not script.exists():
            raise InputError(f"unknown demo task {task_id!r}; bundled tasks: {', '.join(sorted(tasks))}")
        task = tasks[task_id]
        server = FakeModelServer(script)
        server.start_in_thread()
        try:
            config = offline_config(server.url, profile, max_steps=12)
            out = Path(output) if output else Path("runs") / f"demo-{task_id}"
            return asyncio.run(run_task(config, task["url"], task["goal"], out, quiet, None))
        finally:
            server.stop_thread()


class DemoCommand:
    """``webagent demo``: a bundled task, offline."""

    name = "demo"
    help = "run a bundled task offline: local site + offline model server"

    def add_arguments(self, parser: argparse.ArgumentParser, config_options: ConfigOptions) -> None:
        parser.description = (
            "Serve a bundled local site and the offline model server on 127.0.0.1, "
            "then run a real task against them and write its report."
        )
        parser.add_argument(
            "--task", default="catalog-price", help="bundled task id from webagent/testing/data/local.jsonl"
        )
        parser.add_argument(
            "--profile", choices=list(PROFILES), default=DEFAULT_PROFILE, help="localizer profile to play"
        )
        parser.add_argument("--output", metavar="DIR", help="run directory (default: runs/demo-<task>)")
        parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
        parser.add_argument("-q", "--quiet", action="store_true", help="do not print steps")
        parser.add_argument("-v", "--verbose", action="count", default=0, help="log more to stderr")

    def run(self, args: argparse.Namespace, config: LoadConfig) -> int:
        from .run import exit_status

        result = run_demo(task_id=args.task, profile=args.profile, output=args.output, quiet=args.quiet)
        return exit_status(result, args.json)


COMMAND = DemoCommand()
