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
from ..files import write_atomic
from ..replay import ReplayCache
from ..stream import TraceMode
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
            [check.task(trace) for check in suite.checks],
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
    items = outcomes(suite, output)
    summary = totals(suite, items, config, interrupted=runner.stopping)
    private = runner.private  # its checks hold a secret: its outputs are its owner's only (webagent.files)
    write_atomic(output / "suite.json", (json.dumps(summary, indent=2) + "\n").encode(), private=private)
    for target in {output / "junit.xml", *([junit] if junit else [])}:
        write_junit(target, suite, items, output, private=private)
    write_suite_report(output / "report.html", suite, items, output, summary, private=private)
    return summary, items, runner.stopping
