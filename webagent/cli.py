"""The command line: ``webagent run``, ``batch``, ``test``, ``demo`` and the offline test servers.

Exit codes: 0 = validated success, 1 = task not accomplished, 2 = usage or configuration error.
This is the only module that configures logging.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import structlog

from . import __version__
from .config import ROLES, AgentConfig, load_config
from .errors import BrowserError, ConfigError, InputError, NavigationError, WebAgentError
from .records import RunResult
from .secrets import redact_log_event

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

_ROLE_FIELDS: list[tuple[str, str, Any]] = [
    ("base_url", "OpenAI-compatible base URL of the {role} model", str),
    ("model", "model name of the {role} model", str),
    ("api_key", "API key of the {role} endpoint", str),
    ("temperature", "sampling temperature of the {role} model", float),
    ("max_tokens", "max completion tokens of the {role} model", int),
    ("timeout_s", "request timeout of the {role} model, in seconds", float),
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"webagent: error: {message} (see '{self.prog} --help')\n")


def _add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config file ([policy] [localizer] [validator] [agent] [browser])",
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug) to stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print steps")
    g = p.add_argument_group("models (all roles at once; per-role flags win)")
    g.add_argument("--base-url", help="base URL for all three roles, e.g. http://localhost:8000/v1")
    g.add_argument("--model", help="model name for all three roles")
    g.add_argument("--api-key", help="API key for all three roles")
    for role in ROLES:
        g = p.add_argument_group(f"{role} model")
        for field, text, typ in _ROLE_FIELDS:
            g.add_argument(
                f"--{role}-{field.replace('_', '-')}",
                type=typ,
                metavar=field.upper(),
                help=text.format(role=role),
            )
        if role == "localizer":
            g.add_argument(
                "--localizer-profile",
                "--profile",
                choices=["holo1", "holo1.5", "holo2"],
                help="coordinate convention of the localizer model family (default holo1.5)",
            )
    g = p.add_argument_group("agent")
    g.add_argument("--max-steps", type=int, help="steps before a final answer is asked for (default 30)")
    g.add_argument("--max-attempts", type=int, help="answers the validator may judge (default 3)")
    g.add_argument("--max-time", type=float, metavar="SECONDS", help="time limit of the run (default 600)")
    g.add_argument("--screenshots", type=int, metavar="K", help="screenshots in each policy request (default 3)")
    g.add_argument("--budget-calls", type=int, metavar="N", help="hard limit on model calls per run")
    g.add_argument("--budget-tokens", type=int, metavar="N", help="hard limit on tokens (all roles) per run")
    g.add_argument("--budget-usd", type=float, metavar="USD", help="hard limit on dollars per run (per-role prices)")
    g = p.add_argument_group("browser")
    g.add_argument("--headed", action="store_true", help="show the browser window (default headless)")
    g.add_argument("--executable-path", metavar="PATH", help="Chromium binary (default /usr/bin/chromium if present)")
    g.add_argument("--viewport", metavar="WxH", help="viewport size in CSS pixels (default 1280x800)")
    g.add_argument("--ws-endpoint", metavar="URL", help="use a Playwright browser server (playwright run-server)")
    g.add_argument("--cdp-endpoint", metavar="URL", help="use a running Chromium's remote-debugging endpoint")
    g = p.add_argument_group("safety (see the SECURITY section of the README)")
    g.add_argument(
        "--allow-domain",
        action="append",
        metavar="HOST",
        help="only open/request these hosts (host, host:port or *.example.com); repeatable",
    )
    g.add_argument("--block-domain", action="append", metavar="HOST", help="never open/request these hosts; repeatable")
    g.add_argument(
        "--private-network",
        choices=["auto", "allow", "block"],
        help="private/loopback addresses: auto (default) = blocked unless the start URL is local",
    )
    g.add_argument(
        "--secret",
        action="append",
        metavar="NAME=VALUE",
        help="a secret the policy types as {{NAME}} without seeing it; repeatable "
        "(prefer WEBAGENT_SECRET_<NAME>: command lines are visible to other users)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="webagent", description="A web agent driven by vision-language models.")
    parser.add_argument("--version", action="version", version=f"webagent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="run one task: open URL and accomplish GOAL",
        description="Run one web task. Exit code 0 = validated success, 1 = not accomplished, "
        "2 = usage or configuration error.",
    )
    run.add_argument("--url", required=True, help="start page")
    run.add_argument("--goal", required=True, help="what to accomplish, in plain language")
    run.add_argument("--output", metavar="DIR", help="run directory to write (default: runs/<time>-<goal>)")
    run.add_argument(
        "--json", action="store_true", help="print the result (as in result.json) as one JSON object on stdout"
    )
    run.add_argument(
        "--cache", metavar="FILE", help="replay cache: replay recorded steps without models while the page matches"
    )
    _add_config_options(run)

    test = sub.add_parser(
        "test",
        help="run a suite of website checks (CI smoke tests)",
        description="Run the checks of a suite file (YAML, or JSONL with one check per line: name, url, goal, "
        "optional expect and limits). Each verdict comes from the validator. Writes DIR/results.jsonl, "
        "DIR/junit.xml, DIR/report.html (the whole suite, self-contained), DIR/suite.json and a run directory "
        "per check. Exit code 0 = every check passed, 1 = a check failed, 2 = bad input, 130 = interrupted.",
    )
    test.add_argument("suite", metavar="SUITE", help="suite file (.yaml/.yml, or .jsonl)")
    test.add_argument("--junit", metavar="FILE", help="also write the JUnit XML here")
    test.add_argument("--output", metavar="DIR", help="output directory (default: webagent-test/<suite name>)")
    test.add_argument("--concurrency", type=int, default=4, metavar="N", help="checks at once (default 4)")
    test.add_argument(
        "--cache",
        metavar="FILE",
        help="replay cache (JSON, commit it next to the suite): replays recorded steps with no model calls "
        "while pages match; re-plans and updates it when they do not",
    )
    test.add_argument(
        "--trace",
        choices=["on-failure", "always", "off"],
        default="on-failure",
        help="keep a Playwright trace per check (default on-failure; open with 'playwright show-trace')",
    )
    test.add_argument("--resume", action="store_true", help="continue an interrupted run in the same --output")
    test.add_argument("--suite-budget-calls", type=int, metavar="N", help="hard limit on model calls for the suite")
    test.add_argument("--suite-budget-tokens", type=int, metavar="N", help="hard limit on tokens for the suite")
    test.add_argument("--suite-budget-usd", type=float, metavar="USD", help="hard limit on dollars for the suite")
    test.add_argument("--json", action="store_true", help="print suite.json on stdout")
    _add_config_options(test)

    batch = sub.add_parser(
        "batch",
        help="run many tasks concurrently, resumably",
        description="Run a task file (JSONL: {id, url, goal} or WebVoyager's {web_name, id, ques, web}) with N "
        "concurrent sessions. Writes DIR/results.jsonl (one line per finished task), a run directory per "
        "attempt under DIR/runs/, and DIR/summary.json. Re-running the same command resumes. "
        "Exit code 0 = every task finished without an error, 1 = some task ended with stop reason 'error' "
        "(see results.jsonl) or has no result, 2 = bad input, 130 = interrupted (resumable).",
    )
    batch.add_argument("tasks", metavar="TASKS.jsonl", help="task file")
    batch.add_argument("--output", required=True, metavar="DIR", help="batch directory (created; reused to resume)")
    batch.add_argument("--concurrency", type=int, default=8, metavar="N", help="sessions at once (default 8)")
    batch.add_argument("--attempts", type=int, default=1, metavar="K", help="attempts per task, pass@k (default 1)")
    batch.add_argument(
        "--sample-all", action="store_true", help="run all K attempts even after a success (training data)"
    )
    batch.add_argument(
        "--references", metavar="FILE", help="reference answers (WebVoyager reference_answer.json or {id: answer})"
    )
    batch.add_argument(
        "--server-metrics", metavar="URL", help="vLLM /metrics URL: report server tokens/s and prefix-cache hits"
    )
    batch.add_argument(
        "--stall-timeout-s",
        type=float,
        default=300.0,
        metavar="S",
        help="cancel and re-run (once) a session that made no progress (no step, no model reply) for S "
        "seconds (default 300; 0 = never)",
    )
    batch.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="fan the tasks out to Ray actors: a new local Ray instance, or the cluster at ADDRESS "
        "('auto': the one `ray start` made here); put it after TASKS.jsonl",
    )
    batch.add_argument(
        "--ray-actors",
        type=int,
        default=2,
        metavar="N",
        help="Ray actors, each running --concurrency sessions (default 2)",
    )
    batch.add_argument("--json", action="store_true", help="print summary.json on stdout")
    _add_config_options(batch)

    demo = sub.add_parser(
        "demo",
        help="run a bundled task offline: local site + offline model server",
        description="Serve a bundled local site and the offline model server on 127.0.0.1, "
        "then run a real task against them and write its report.",
    )
    demo.add_argument("--task", default="catalog-price", help="bundled task id from tasks/local.jsonl")
    demo.add_argument(
        "--profile",
        choices=["holo1", "holo1.5", "holo2"],
        default="holo1.5",
        help="localizer profile to play",
    )
    demo.add_argument("--output", metavar="DIR", help="run directory (default: runs/demo-<task>)")
    demo.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    demo.add_argument("-q", "--quiet", action="store_true", help="do not print steps")
    demo.add_argument("-v", "--verbose", action="count", default=0, help="log more to stderr")

    fake = sub.add_parser(
        "fake-server",
        help="serve the offline OpenAI-compatible model server",
        description="Play the three model roles from a script on 127.0.0.1 (for tests and pipelines).",
    )
    fake.add_argument("--script", required=True, metavar="FILE", help="JSON script (see docs/offline-server.md)")
    fake.add_argument("--port", type=int, default=0, help="port (default: a free one)")

    from .exportcli import add_export_parser

    add_export_parser(sub)

    sites = sub.add_parser(
        "sites",
        help="serve the bundled local task sites on 127.0.0.1",
        description="Serve the local websites under tasks/sites for tests and demos.",
    )
    sites.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    return parser


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(message)s")
    structlog.configure(
        processors=[
            redact_log_event,  # no secret value in any log line
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S"),
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    overrides: dict[str, Any] = {}
    for role in ROLES:
        for field, _, _ in _ROLE_FIELDS:
            value = getattr(args, f"{role}_{field}", None)
            shared = getattr(args, field, None) if field in ("base_url", "model", "api_key") else None
            overrides[f"{role}.{field}"] = value if value is not None else shared
    overrides["localizer.profile"] = args.localizer_profile
    overrides["agent.max_steps"] = args.max_steps
    overrides["agent.max_attempts"] = args.max_attempts
    overrides["agent.max_time_s"] = args.max_time
    overrides["agent.screenshots_in_context"] = args.screenshots
    overrides["agent.budget_calls"] = args.budget_calls
    overrides["agent.budget_tokens"] = args.budget_tokens
    overrides["agent.budget_usd"] = args.budget_usd
    overrides["browser.headless"] = False if args.headed else None
    overrides["browser.executable_path"] = args.executable_path
    overrides["browser.viewport"] = args.viewport
    overrides["browser.allowed_domains"] = args.allow_domain
    overrides["browser.blocked_domains"] = args.block_domain
    overrides["browser.private_network"] = args.private_network
    for item in args.secret or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():  # the argument is not echoed: it may be the value itself
            raise ConfigError("--secret expects NAME=VALUE, e.g. --secret PASSWORD=...; one argument had no NAME=")
        overrides[f"secrets.{name.strip()}"] = value
    overrides["browser.ws_endpoint"] = args.ws_endpoint
    overrides["browser.cdp_endpoint"] = args.cdp_endpoint
    return load_config(args.config, overrides=overrides)


def default_output(goal: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", goal.lower()).strip("-")[:40] or "run"
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    configure_logging(getattr(args, "verbose", 0))
    try:
        output = getattr(args, "output", None)
        if output and Path(output).exists() and not Path(output).is_dir():
            raise InputError(f"--output {output} is a file; give a directory (it is created if missing)")
        if args.command == "run":
            config = config_from_args(args)
            output = Path(args.output) if args.output else default_output(args.goal)
            result = asyncio.run(_run(config, args.url, args.goal, output, args.quiet, args.cache))
            return _finish(result, args.json)
        if args.command == "batch":
            from .batchcli import run_batch

            return run_batch(args, config_from_args(args))
        if args.command == "test":
            from .suitecli import run_test

            return run_test(args, config_from_args(args))
        if args.command == "export":
            from .exportcli import run_export

            return run_export(args)
        if args.command == "demo":
            from .demo import run_demo

            result = run_demo(task_id=args.task, profile=args.profile, output=args.output, quiet=args.quiet)
            return _finish(result, args.json)
        if args.command == "fake-server":
            from .testing.server import main as fake_main

            return fake_main(["--script", args.script, "--port", str(args.port)])
        if args.command == "sites":
            from .testing.sites import main as sites_main

            return sites_main(["--port", str(args.port)])
    except (ConfigError, InputError, NavigationError, BrowserError) as exc:
        print(f"webagent: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WebAgentError as exc:
        print(f"webagent: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("webagent: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    parser.error(f"unknown command {args.command!r}")


async def _run(config: AgentConfig, url: str, goal: str, output: Path, quiet: bool, cache: str | None) -> RunResult:
    from .agent import Agent
    from .display import StepPrinter
    from .replay import ReplayCache

    printer = StepPrinter(quiet=quiet, max_steps=config.agent.max_steps)
    replay_cache = ReplayCache(cache) if cache else None
    async with Agent(config) as agent:
        stream = agent.stream(url, goal, output_dir=output, cache=replay_cache)
        async for step in stream:
            if step.index == 1:  # after the start page opened: bad input stays a one-line error
                printer.start(url, goal, config)
            printer.step(step)
        assert stream.result is not None
        printer.result(stream.result)
        return stream.result


def _finish(result: RunResult, as_json: bool) -> int:
    if as_json:
        print(json.dumps(result.model_dump(mode="json"), ensure_ascii=False))
    return EXIT_OK if result.success else EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
