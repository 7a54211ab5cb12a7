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
from collections.abc import Callable
from pathlib import Path
from typing import Any, assert_never

from rich.console import Console
from rich.live import Live
from rich.text import Text

from ..config import AgentConfig
from ..errors import InputError
from ..files.disk import write_atomic
from ..inputs import terminal_json, terminal_text
from ..runtime import checked_sessions
from ..tasks import load_references, load_tasks
from .processes import auto_workers
from .ray import RayCluster
from .results import read_results
from .runner import DEFAULT_STALL_TIMEOUT_S, BatchPhase, BatchRunner, BatchStats
from .servermetrics import sample, server_report
from .summary import BatchSummary, hosts_summary, print_summary, summarize

__all__ = [
    "COMMAND",
    "EXIT_DONE",
    "EXIT_ERRORS",
    "EXIT_INTERRUPTED",
    "BatchProgress",
    "add_ray_options",
    "exit_code",
    "ray_cluster",
    "run_batch",
    "worker_count",
]

EXIT_DONE, EXIT_ERRORS, EXIT_INTERRUPTED = 0, 1, 130


class BatchProgress:
    """done/total, validated success rate, steps/s, model tokens/s, errors — live on a terminal.

    Before that, a line as each phase begins (launching the browser, the runs started): the first
    progress line comes when a step ends. ``label`` starts each line (``batch``, ``test``) and
    ``noun`` names what is run (``tasks``, ``checks``)."""

    def __init__(self, *, quiet: bool, label: str = "batch", noun: str = "tasks") -> None:
        self.quiet = quiet
        self.label = label
        self.noun = noun
        self.console = Console(stderr=True, highlight=False)
        self.live: Live | None = None
        self._last = 0.0
        self._interval = 0.25 if sys.stderr.isatty() else 10.0
        self._phase: BatchPhase | None = None
        self._told_resume = False

    def phase_line(self, s: BatchStats) -> str:
        match s.phase:
            case "launch":
                return f"{s.total - s.done} {self.noun} to run ({s.done} done before): launching the browser..."
            case "ray":
                return f"{s.total - s.done} {self.noun} to run ({s.done} done before): starting Ray and its actors..."
            case "run":
                return "runs started: opening their pages, then asking the models (a progress line as steps end)"
            case _:
                assert_never(s.phase)

    def line(self, s: BatchStats) -> str:
        finished = s.finished_now
        rate = f"{s.succeeded / finished:.0%}" if finished else "-"
        wall = max(s.elapsed_s, 1e-9)
        return (
            f"{s.done}/{s.total} done ({s.resumed} resumed), success {rate}, {s.in_flight} running{admitted(s)}, "
            f"{s.steps / wall:.1f} steps/s, {s.tokens / wall:,.0f} model tokens/s, "
            f"{s.errors} errors, {s.retried} retried"
            + (f", {s.stalled} stalled" if s.stalled else "")
            + (f", {s.setup_crashes} re-run after a crash in set-up" if s.setup_crashes else "")
            + (f", {s.infra_reruns} re-run after an infrastructure failure" if s.infra_reruns else "")
            + hosts_line(s)
        )

    def __enter__(self) -> BatchProgress:
        if not self.quiet and sys.stderr.isatty():
            self.live = Live(Text(""), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    @staticmethod
    def resume_line(s: BatchStats) -> str | None:
        """What a resumed batch found in its results file (None for a fresh one)."""
        if not (s.resumed or s.resumed_infra):
            return None
        line = f"resuming: {s.resumed} finished tasks kept ({s.resumed_failed} of them failed)"
        if s.resumed_infra:
            line += f", {s.resumed_infra} ended by an infrastructure error run again"
        if s.resumed_infra_kept:
            line += f", {s.resumed_infra_kept} ended by an infrastructure error kept (--no-retry-infra)"
        return line

    def update(self, stats: BatchStats, *, force: bool = False) -> None:
        if self.quiet:
            return
        if not self._told_resume:
            self._told_resume = True
            resume = self.resume_line(stats)
            if resume is not None:
                print(terminal_text(f"{self.label}: {resume}"), file=sys.stderr, flush=True)
        if not stats.steps and not stats.finished_now:  # nothing to count yet: the phase, once
            if stats.phase != self._phase:
                self._phase = stats.phase
                self._show(self.phase_line(stats))
            if not force:
                return
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        self._show(self.line(stats))

    def _show(self, text: str) -> None:
        line = terminal_text(f"{self.label}: {text}")  # an admission's reason may quote a browser's error
        if self.live is not None:
            self.live.update(Text(line))
        else:
            print(line, file=sys.stderr, flush=True)


def hosts_line(s: BatchStats) -> str:
    """Each browser host of a fleet: its sessions, crashes, p50 step latency (and a quarantine)."""
    parts = []
    for name, row in hosts_summary(s).items():
        p50 = row.step_latency_p50_s
        parts.append(
            f"{name} {row.sessions if row.sessions is not None else '-'} sessions/"
            f"{row.crashes if row.crashes is not None else '-'} crashes/"
            f"p50 {'-' if p50 is None else f'{p50:.2f}s'}" + (" quarantined" if row.quarantined else "")
        )
    return "; hosts: " + ", ".join(parts) if parts else ""


def admitted(s: BatchStats) -> str:
    """The admission's state, for the live line: how many may run, and why tasks are held back."""
    a = s.admission
    if a is None or (a.limit >= a.ceiling and not a.held):
        return ""
    held = f"; {a.held} held back: {a.reason}" if a.held_back else ""
    return f" (at most {a.limit} of {a.ceiling}{held})"


def run_batch(args: argparse.Namespace, config: AgentConfig) -> int:
    tasks = load_tasks(args.tasks, trusted=getattr(args, "trust_tasks", False))
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
    ray = ray_cluster(args)
    workers = worker_count(getattr(args, "workers", "1"), args.concurrency, ray=ray is not None)
    progress = BatchProgress(quiet=args.quiet)
    runner = BatchRunner(
        config,
        tasks,
        args.output,  # a folder or an fsspec URL (s3://bucket/prefix: outputs.py)
        concurrency=args.concurrency,
        attempts=args.attempts,
        sample_all=args.sample_all,
        references=references,
        on_update=progress.update,
        stall_timeout_s=stall_timeout_s,
        retry_infra=not getattr(args, "no_retry_infra", False),
        ray=ray,
        workers=workers,
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
    code = _finish(args, runner.output, stats, server, config, interrupted=runner.stopping, private=runner.private)
    if runner.store.remote:  # summary.json goes up beside results.jsonl; the staging folder goes
        asyncio.run(runner.store.publish("summary.json"))
        runner.store.discard()
    return code


def worker_count(value: str, concurrency: int, *, ray: bool) -> int:
    """The worker processes ``--workers N|auto`` names (``auto``: ``auto_workers``; 1 on Ray)."""
    if value == "auto":
        return 1 if ray else auto_workers(concurrency)
    try:
        workers = int(value)
    except ValueError:
        workers = 0
    if workers < 1:
        raise InputError(f"--workers must be a whole number of at least 1, or auto (not {value!r})")
    return workers


def ray_cluster(args: argparse.Namespace) -> RayCluster | None:
    """The Ray cluster ``--ray [ADDRESS]`` and ``--ray-actors N`` name (None without ``--ray``)."""
    if getattr(args, "ray", None) is None:
        return None
    if args.ray_actors < 1:
        raise InputError("--ray-actors must be at least 1")
    return RayCluster(address=None if args.ray == "local" else args.ray, actors=args.ray_actors)


def _finish(
    args: argparse.Namespace,
    output: Path,
    stats: BatchStats,
    server: dict[str, Any] | None,
    config: AgentConfig,
    *,
    interrupted: bool,
    private: bool = False,
) -> int:
    results = read_results(output)
    summary = summarize(results, stats, config, attempts=args.attempts, server=server, interrupted=interrupted)
    write_atomic(output / "summary.json", summary.text().encode(), private=private)
    if not args.quiet:
        print_summary(summary)
    if args.json:
        print(terminal_json(json.dumps(summary.as_json())))
    return exit_code(summary)


def exit_code(summary: BatchSummary) -> int:
    """130 for an interrupted batch, 1 when a task ended with stop reason ``error`` or has no result
    (a bug in the runner), else 0."""
    if summary.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_ERRORS if summary.errors or summary.finished < summary.tasks else EXIT_DONE


def add_ray_options(parser: argparse.ArgumentParser, what: str, positional: str) -> None:
    """``--trust-tasks`` and the Ray options of a command that runs a file of ``what`` (batch, test)."""
    parser.add_argument(
        "--trust-tasks",
        action="store_true",
        help=f"{positional} is yours: its {what} may use secrets ({{{{NAME}}}}), signed-in states, upload folders, "
        "proxies and credentials, and a local or file: start opens what one of 'webagent run' does (without it "
        "the file is data: docs/security.md)",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help=f"fan the {what} out to Ray actors: a new local Ray instance, or the cluster at ADDRESS "
        f"('auto': the one `ray start` made here); put it after {positional}",
    )
    parser.add_argument(
        "--ray-actors",
        type=int,
        default=2,
        metavar="N",
        help="Ray actors, each running --concurrency sessions (default 2)",
    )


class BatchCommand:
    """``webagent batch``: a task file, many sessions at once, resumable."""

    name = "batch"
    help = "run many tasks concurrently, resumably"

    def add_arguments(
        self, parser: argparse.ArgumentParser, config_options: Callable[[argparse.ArgumentParser], None]
    ) -> None:
        parser.description = (
            "Run a task file (JSONL: {id, url, goal}, a benchmark task {id, task: miniwob/NAME, seed} or "
            "WebVoyager's {web_name, id, ques, web}) with up to N concurrent sessions. Writes DIR/results.jsonl "
            "(one line per finished task), a run directory per attempt under DIR/runs/, and DIR/summary.json. "
            "Re-running the same command resumes (and runs again the tasks an infrastructure error ended). "
            "Exit code 0 = every task finished without an error, 1 = some task ended with stop reason 'error' "
            "(see results.jsonl) or has no result, 2 = bad input, 130 = interrupted (resumable)."
        )
        parser.add_argument("tasks", metavar="TASKS.jsonl", help="task file")
        parser.add_argument(
            "--output",
            required=True,
            metavar="DIR",
            help="batch directory (created; reused to resume), or an fsspec URL: s3://bucket/prefix, gs://...",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=8,
            metavar="N",
            help="sessions at once, at most (default %(default)s): fewer while the browsers do not keep up",
        )
        parser.add_argument(
            "--attempts", type=int, default=1, metavar="K", help="attempts per task, pass@k (default %(default)s)"
        )
        parser.add_argument(
            "--sample-all", action="store_true", help="run all K attempts even after a success (training data)"
        )
        parser.add_argument(
            "--references", metavar="FILE", help="reference answers (WebVoyager reference_answer.json or {id: answer})"
        )
        parser.add_argument(
            "--server-metrics", metavar="URL", help="vLLM /metrics URL: report server tokens/s and prefix-cache hits"
        )
        parser.add_argument(
            "--stall-timeout-s",
            type=float,
            default=DEFAULT_STALL_TIMEOUT_S,
            metavar="S",
            help="cancel and re-run (once) a session that made no progress (no step, no model reply, no "
            f"browser command answered or timed out) for S seconds (default {DEFAULT_STALL_TIMEOUT_S:g}; 0 = never)",
        )
        parser.add_argument(
            "--no-retry-infra",
            action="store_true",
            help="on resume, keep the lines of tasks that ended with an infrastructure error (a browser that died "
            "or did not answer in time, a model server that kept failing) instead of running them again",
        )
        parser.add_argument(
            "--workers",
            default="auto",
            metavar="N",
            help="processes of this machine the sessions are spread over, each with its own browsers, driver and "
            "admission (default auto: one per 100 sessions of --concurrency, at most one per CPU; 1: all in this "
            "process)",
        )
        add_ray_options(parser, "tasks", "TASKS.jsonl")
        parser.add_argument("--json", action="store_true", help="print summary.json on stdout")
        config_options(parser)

    def run(self, args: argparse.Namespace, config: Callable[[], AgentConfig]) -> int:
        return run_batch(args, config())


COMMAND = BatchCommand()
