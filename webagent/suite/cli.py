"""``webagent test``: run a suite of checks, print a verdict per check, write JUnit and the report."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import SecretStr

from ..batch.cli import BatchProgress, add_ray_options, ray_cluster
from ..budget import BudgetLimits
from ..config import ROLES, AgentConfig
from ..errors import InputError
from ..files.disk import MAX_NAME_BYTES, cut_utf8
from ..guard.secrets import Secrets
from ..inputs import terminal_json, terminal_text
from ..replay import ReplayCache
from ..runtime import checked_sessions
from .model import CheckOutcome, Suite, load_suite
from .runner import prepare_output, run_suite

__all__ = ["ANY_ORIGIN_HELP", "CACHE_HELP", "COMMAND", "run_test", "with_variables"]

#: What ``--cache`` is, in the help of ``webagent run`` and ``webagent test``.
CACHE_HELP = "steps replayed with no model call while pages match, the answer judged again; code-equivalent: review it"
#: What ``--cache-any-origin`` is.
ANY_ORIGIN_HELP = "replay recordings made from another origin (scheme, host, port), e.g. staging's on production"

EXIT_PASSED, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


def _suite_budget(args: argparse.Namespace, base: BudgetLimits) -> BudgetLimits:
    update = {
        key: value
        for key, value in (
            ("calls", args.suite_budget_calls),
            ("tokens", args.suite_budget_tokens),
            ("usd", args.suite_budget_usd),
        )
        if value is not None
    }
    try:
        return BudgetLimits.model_validate(base.model_dump() | update)
    except ValueError:
        raise InputError("--suite-budget-calls/-tokens/-usd must not be negative") from None


def _line(item: CheckOutcome) -> str:
    result = item.result
    if result is None:
        return f"SKIP  {item.check.name}  not run (interrupted)"
    steps = f"{result.steps} steps" + (f", {result.replayed_steps} replayed" if result.replayed_steps else "")
    status = "PASS" if item.passed else "HUMAN" if result.stop_reason == "needs_human" else "FAIL"
    return f"{status}  {item.check.name}  ({steps}, {result.duration_s:.1f} s)  {item.reason}"


def run_test(args: argparse.Namespace, config: AgentConfig) -> int:
    suite = load_suite(args.suite, trusted=getattr(args, "trust_tasks", False))
    config = checked_sessions(config, (check.browser for check in suite.checks))
    suite = suite.model_copy(update={"budget": _suite_budget(args, suite.budget)})
    if args.concurrency < 1:
        raise InputError("--concurrency must be at least 1")
    secrets = config.secret_set()
    for check in suite.checks:  # a ${VAR} may hold a secret: it would be written to every output file
        if secrets and any(secrets.contains(t or "") for t in (check.url, check.goal, check.expect)):
            raise InputError(
                f"{suite.path}:{check.line}: check {check.name!r} holds the value of a secret in its url, goal or "
                "expect; write {{NAME}} in a write_element instead (the value is never written or shown to models)"
            )
    config = with_variables(config, suite)
    config.require_endpoints()
    ray = ray_cluster(args)
    if ray is not None and suite.budget.active:
        raise InputError(
            "a suite budget is kept in one process and cannot span Ray's actors; drop the suite's budget "
            "(and --suite-budget-*) or run without --ray"
        )
    output = Path(args.output) if args.output else Path("webagent-test") / _slug(suite.name)
    prepare_output(output, resume=args.resume)
    cache = ReplayCache(args.cache) if args.cache else None
    progress = BatchProgress(quiet=args.quiet, label="test", noun="checks")
    with progress:
        summary, items, interrupted = asyncio.run(
            run_suite(
                config,
                suite,
                output,
                concurrency=args.concurrency,
                cache=cache,
                trace=args.trace,
                junit=Path(args.junit) if args.junit else None,
                on_update=progress.update,
                ray=ray,
            )
        )
    if args.json:
        print(terminal_json(json.dumps(summary)))
    elif not args.quiet:
        for item in items:
            print(terminal_text(_line(item)))  # a check's name, the validator's feedback
        saved = f" ({summary['calls_saved']} saved by the replay cache)" if cache is not None else ""
        print(
            terminal_text(
                f"{summary['passed']}/{summary['checks']} checks passed · {summary['model_calls']} model calls{saved}"
                f" · ${summary['cost_usd']:.4f} · report: {output / 'report.html'}"
                + (f" · junit: {args.junit}" if args.junit else "")
            )
        )
        if cache is not None and cache.updated:
            updated = f"replay cache {cache.path} updated for: {', '.join(cache.updated)}"
            print(terminal_text(updated), file=sys.stderr)
    if interrupted:
        stopped = f"webagent: interrupted; resume with the same command plus --resume (output: {output})"
        print(terminal_text(stopped), file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_PASSED if summary["passed"] == summary["checks"] else EXIT_FAILED


def with_variables(config: AgentConfig, suite: Suite) -> AgentConfig:
    """``config`` with the values the suite's ``${VAR}`` read as its ``variables`` (redacted as
    ``${VAR}`` from everything the runs write and send, in every process: they travel with the
    config); InputError for a value that is, or holds, a secret's or an API key."""
    if not suite.variables:
        return config
    secrets = Secrets(config.secrets)
    given = [config.role(role).api_key for role in ROLES] + [os.environ.get("OPENAI_API_KEY")]
    keys = {key for key in given if key and key != "EMPTY"}
    for name, value in suite.variables.items():
        if (secrets and secrets.contains(value)) or any(key in value for key in keys):
            raise InputError(
                f"{suite.path}: ${{{name}}} holds the value of a secret or an API key, which no suite may read"
            )
    variables = {**config.variables, **{name: SecretStr(value) for name, value in suite.variables.items()}}
    return config.model_copy(update={"variables": variables})


def _slug(name: str) -> str:
    """The default output folder's name for a suite's name (cut by bytes: a file system's limit)."""
    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in name.lower()).strip("-")
    return cut_utf8(slug, MAX_NAME_BYTES).strip("-") or "suite"


class TestCommand:
    """``webagent test``: a suite of website checks."""

    __test__ = False  # (not a pytest test class)
    name = "test"
    help = "run a suite of website checks (CI smoke tests)"

    def add_arguments(
        self, parser: argparse.ArgumentParser, config_options: Callable[[argparse.ArgumentParser], None]
    ) -> None:
        parser.description = (
            "Run the checks of a suite file (YAML, or JSONL with one check per line: name, url, goal, "
            "optional expect and limits). Each verdict comes from the validator. Writes DIR/results.jsonl, "
            "DIR/junit.xml, DIR/report.html (the whole suite, self-contained), DIR/suite.json and a run directory "
            "per check. Exit code 0 = every check passed, 1 = a check failed, 2 = bad input, 130 = interrupted."
        )
        parser.add_argument("suite", metavar="SUITE", help="suite file (.yaml/.yml, or .jsonl)")
        parser.add_argument("--junit", metavar="FILE", help="also write the JUnit XML here")
        parser.add_argument("--output", metavar="DIR", help="output directory (default: webagent-test/<suite name>)")
        parser.add_argument(
            "--concurrency", type=int, default=4, metavar="N", help="checks at once (default %(default)s)"
        )
        parser.add_argument(
            "--cache",
            metavar="FILE",
            help=f"replay cache (JSON, commit it next to the suite): {CACHE_HELP}; re-plans and updates it when not",
        )
        parser.add_argument("--cache-any-origin", action="store_true", help=ANY_ORIGIN_HELP)
        parser.add_argument(
            "--trace",
            choices=["on-failure", "always", "off"],
            default="on-failure",
            help="keep a Playwright trace per check (default %(default)s; open with 'playwright show-trace')",
        )
        parser.add_argument("--resume", action="store_true", help="continue an interrupted run in the same --output")
        parser.add_argument(
            "--suite-budget-calls", type=int, metavar="N", help="hard limit on model calls for the suite"
        )
        parser.add_argument("--suite-budget-tokens", type=int, metavar="N", help="hard limit on tokens for the suite")
        parser.add_argument("--suite-budget-usd", type=float, metavar="USD", help="hard limit on dollars for the suite")
        add_ray_options(parser, "checks", "SUITE")
        parser.add_argument("--json", action="store_true", help="print suite.json on stdout")
        config_options(parser)

    def run(self, args: argparse.Namespace, config: Callable[[], AgentConfig]) -> int:
        return run_test(args, config())


COMMAND = TestCommand()
