"""``webagent batch``: wires the runner, the progress display, server metrics and the summary.

Exit codes: 0 = every task finished without an error, 1 = at least one task ended with stop reason
``error`` (in DIR/results.jsonl, resumed lines included) or has no result line, 2 = bad input or
configuration (``webagent.cli``), 130 = interrupted (resumable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from ..config import AgentConfig
from ..errors import InputError
from ..files import write_atomic
from ..runtime import checked_sessions
from .results import read_results
from .runner import DEFAULT_STALL_TIMEOUT_S, BatchRunner, BatchStats
from .servermetrics import sample, server_report
from .summary import print_summary, summarize
from .tasks import load_references, load_tasks

__all__ = ["EXIT_DONE", "EXIT_ERRORS", "EXIT_INTERRUPTED", "BatchProgress", "exit_code", "run_batch"]

EXIT_DONE, EXIT_ERRORS, EXIT_INTERRUPTED = 0, 1, 130


class BatchProgress:
    """done/total, validated success rate, steps/s, model tokens/s, errors — live on a terminal."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False)
        self.live: Live | None = None
        self._last = 0.0
        self._interval = 0.25 if sys.stderr.isatty() else 10.0

    def line(self, s: BatchStats) -> str:
        finished = s.finished_now
        rate = f"{s.succeeded / finished:.0%}" if finished else "-"
        wall = max(s.elapsed_s, 1e-9)
        return (
            f"{s.done}/{s.total} done ({s.resumed} resumed), success {rate}, {s.in_flight} running, "
            f"{s.steps / wall:.1f} steps/s, {s.tokens / wall:,.0f} model tokens/s, "
            f"{s.errors} errors, {s.retried} retried" + (f", {s.stalled} stalled" if s.stalled else "")
        )

    def __enter__(self) -> BatchProgress:
        if not self.quiet and sys.stderr.isatty():
            self.live = Live(Text(""), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def update(self, stats: BatchStats, *, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        if self.live is not None:
            self.live.update(Text(self.line(stats)))
        else:
            print(f"batch: {self.line(stats)}", file=sys.stderr, flush=True)


def run_batch(args: argparse.Namespace, config: AgentConfig) -> int:
    tasks = load_tasks(args.tasks)
    config = checked_sessions(config, (task.browser for task in tasks))
    references = load_references(args.references) if args.references else None
    if args.concurrency < 1:
        raise InputError("--concurrency must be at least 1")
    if args.attempts < 1:
        raise InputError("--attempts must be at least 1")
    stall_timeout_s = getattr(args, "stall_timeout_s", DEFAULT_STALL_TIMEOUT_S)
    if stall_timeout_s < 0:
        raise InputError("--stall-timeout-s must be at least 0 (0 turns the watchdog off)")
    config.require_endpoints()
    output = Path(args.output)
    progress = BatchProgress(quiet=args.quiet)
    if getattr(args, "ray", None) is not None:
        from .ray import RayBatchRunner

        if args.ray_actors < 1:
            raise InputError("--ray-actors must be at least 1")
        ray_runner = RayBatchRunner(
            config,
            tasks,
            output,
            address=None if args.ray == "local" else args.ray,
            actors=args.ray_actors,
            concurrency=args.concurrency,
            attempts=args.attempts,
            sample_all=args.sample_all,
            references=references,
            on_update=progress.update,
            stall_timeout_s=stall_timeout_s,
        )
        before = asyncio.run(sample(args.server_metrics)) if args.server_metrics else None
        with progress:
            stats = ray_runner.run()
            progress.update(stats, force=True)
        server = None
        if args.server_metrics:
            server = server_report(before, asyncio.run(sample(args.server_metrics)), args.server_metrics)
        return _finish(args, output, stats, server, config, interrupted=ray_runner.stopping)
    runner = BatchRunner(
        config,
        tasks,
        output,
        concurrency=args.concurrency,
        attempts=args.attempts,
        sample_all=args.sample_all,
        references=references,
        on_update=progress.update,
        stall_timeout_s=stall_timeout_s,
    )

    async def main() -> tuple[BatchStats, dict[str, Any] | None]:
        before = await sample(args.server_metrics) if args.server_metrics else None
        with progress:
            stats = await runner.run()
            progress.update(stats, force=True)
        server = None
        if args.server_metrics:
            server = server_report(before, await sample(args.server_metrics), args.server_metrics)
        return stats, server

    stats, server = asyncio.run(main())
    return _finish(args, output, stats, server, config, interrupted=runner.stopping)


def _finish(
    args: argparse.Namespace,
    output: Path,
    stats: BatchStats,
    server: dict[str, Any] | None,
    config: AgentConfig,
    *,
    interrupted: bool,
) -> int:
    results = read_results(output)
    summary = summarize(results, stats, config, attempts=args.attempts, server=server, interrupted=interrupted)
    write_atomic(output / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    if not args.quiet:
        print_summary(summary)
    if args.json:
        print(json.dumps(summary))
    return exit_code(summary)


def exit_code(summary: dict[str, Any]) -> int:
    """130 for an interrupted batch, 1 when a task ended with stop reason ``error`` or has no result
    (a bug in the runner), else 0."""
    if summary["interrupted"]:
        return EXIT_INTERRUPTED
    return EXIT_ERRORS if summary["errors"] or summary["finished"] < summary["tasks"] else EXIT_DONE
