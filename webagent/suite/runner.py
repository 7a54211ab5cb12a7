"""Running a suite: each check is a batch task whose options are its expectation, limits and trace.

The runner is the batch runner (so a suite gets the same concurrency, browser pool, atomic
``results.jsonl``, resume and signal handling, and runs on Ray as a batch does), given the checks as
tasks (``Check.task``), the replay cache (each check's recording under its name) and the suite's
budget; after it, the suite's outputs are written: ``junit.xml``, ``report.html`` (the whole
suite, self-contained) and ``suite.json`` (totals: passed, failed, model calls, replayed steps,
calls saved, cost).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..batch.ray import RayCluster
from ..batch.results import read_results
from ..batch.runner import BatchRunner, BatchStats
from ..budget import Budget
from ..config import ROLES, AgentConfig
from ..errors import InputError
from ..files.disk import write_atomic
from ..replay import ReplayCache
from ..tasks import TraceMode
from .junit import write_junit
from .model import CheckOutcome, Suite
from .report import write_suite_report

__all__ = ["CheckOutcome", "SuiteRunner", "run_suite"]

RUN_FILES = ("results.jsonl", "junit.xml", "report.html", "suite.json")


class SuiteRunner(BatchRunner):
    """A BatchRunner whose tasks are a suite's checks (``ray``: on that Ray cluster's actors; a
    suite budget then cannot be kept)."""

    def __init__(
        self,
        config: AgentConfig,
        suite: Suite,
        output: str | Path,
        *,
        concurrency: int = 4,
        cache: ReplayCache | None = None,
        trace: TraceMode = "on-failure",
        on_update: Callable[[BatchStats], None] | None = None,
        ray: RayCluster | None = None,
    ) -> None:
        budgets = [Budget(suite.budget, config.price, scope="suite")] if suite.budget.active else []
        super().__init__(
            config,
            suite.tasks(trace),
            output,
            concurrency=concurrency,
            on_update=on_update,
            cache=cache,
            budgets=budgets,
            ray=ray,
        )
        self.suite = suite


def prepare_output(output: Path, *, resume: bool) -> None:
    """A fresh run refuses to mix with an earlier one unless told to resume (or the dir is a suite's)."""
    if resume or not (output / "results.jsonl").exists():
        return
    if not (output / "suite.json").exists() and not (output / "junit.xml").exists():
        raise InputError(
            f"{output} holds results that are not a finished suite run; pass --resume to continue it "
            "or choose another --output"
        )
    for name in RUN_FILES:  # the previous suite run's own outputs: a new run replaces them
        (output / name).unlink(missing_ok=True)
    shutil.rmtree(output / "runs", ignore_errors=True)


def outcomes(suite: Suite, output: Path) -> list[CheckOutcome]:
    results = {r.id: r for r in read_results(output)}
    return [CheckOutcome(check=c, result=results.get(c.name)) for c in suite.checks]


def totals(suite: Suite, items: list[CheckOutcome], config: AgentConfig, *, interrupted: bool) -> dict[str, Any]:
    done = [o.result for o in items if o.result is not None]
    calls = sum(r.usage.role(role).calls for r in done for role in ROLES)
    tokens = sum(
        r.usage.role(role).prompt_tokens + r.usage.role(role).completion_tokens for r in done for role in ROLES
    )
    return {
        "suite": suite.name,
        "path": suite.path,
        "checks": len(items),
        "passed": sum(o.passed for o in items),
        "failed": sum(not o.passed for o in items if o.result is not None and o.result.stop_reason != "needs_human"),
        # Checks that asked for a person (ask_user) with none to answer: counted apart, never passed.
        "needs_human": sum(o.result.stop_reason == "needs_human" for o in items if o.result is not None),
        "not_run": sum(o.result is None for o in items),
        "interrupted": interrupted,
        "steps": sum(r.steps for r in done),
        "replayed_steps": sum(r.replayed_steps for r in done),
        "model_calls": calls,
        "calls_saved": sum(r.calls_saved for r in done),
        "tokens": tokens,
        "cost_usd": round(sum(r.cost_usd for r in done), 6),
        "duration_s": round(max((r.duration_s for r in done), default=0.0), 3),
        "results": [
            {
                "name": o.check.name,
                "passed": o.passed,
                "reason": o.reason,
                "steps": o.result.steps if o.result else 0,
                "replayed_steps": o.result.replayed_steps if o.result else 0,
                "calls_saved": o.result.calls_saved if o.result else 0,
                "duration_s": o.result.duration_s if o.result else 0.0,
                "downloads": [d.model_dump(mode="json") for d in o.result.downloads] if o.result else [],
            }
            for o in items
        ],
    }


async def run_suite(
    config: AgentConfig,
    suite: Suite,
    output: Path,
    *,
    concurrency: int = 4,
    cache: ReplayCache | None = None,
    trace: TraceMode = "on-failure",
    junit: Path | None = None,
    on_update: Callable[[BatchStats], None] | None = None,
    ray: RayCluster | None = None,
) -> tuple[dict[str, Any], list[CheckOutcome], bool]:
    """Run the suite and write its outputs; returns (totals, outcomes, interrupted)."""
    runner = SuiteRunner(
        config, suite, output, concurrency=concurrency, cache=cache, trace=trace, on_update=on_update, ray=ray
    )
    await runner.run()
    if ray is not None and cache is not None:  # the actors updated the cache file: what changed
        cache.refresh()
    shown = _shown(suite, config)  # what the outputs show of the checks: the variables' values redacted
    items = outcomes(shown, output)
    summary = totals(shown, items, config, interrupted=runner.stopping)
    private = runner.private  # its checks hold a secret: its outputs are its owner's only (webagent.files.disk)
    write_atomic(output / "suite.json", (json.dumps(summary, indent=2) + "\n").encode(), private=private)
    for target in {output / "junit.xml", *([junit] if junit else [])}:
        write_junit(target, shown, items, output, private=private)
    write_suite_report(output / "report.html", shown, items, output, summary, private=private)
    return summary, items, runner.stopping


def _shown(suite: Suite, config: AgentConfig) -> Suite:
    """The suite as its outputs show it: every secret's and suite variable's value redacted from its
    checks (``AgentConfig.secret_set``)."""
    secrets = config.secret_set()
    if not secrets:
        return suite
    checks = [
        check.model_copy(
            update={
                "url": secrets.redact(check.url),
                "goal": secrets.redact(check.goal),
                "expect": secrets.redact(check.expect) if check.expect is not None else None,
            }
        )
        for check in suite.checks
    ]
    return suite.model_copy(update={"checks": checks})
