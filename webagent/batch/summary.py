"""Batch summaries: summary.json (:class:`BatchSummary`) made from the results, and the printed table."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..config import ROLES, AgentConfig
from ..inputs import terminal_text
from ..records import Usage
from .results import TaskResult, cost_of
from .stats import BatchStats
from .summaryfile import (
    AdmissionFigures,
    BatchSummary,
    BenchmarkFigures,
    HostFigures,
    ReferenceFigures,
    RunFigures,
    ServerFigures,
    StepLatency,
    TokenFigures,
)

__all__ = ["BatchSummary", "hosts_summary", "percentile", "print_summary", "summarize"]


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _crashed(result: TaskResult) -> bool:
    """Re-run after its browser died (lines written before re-runs were itemised: any re-run)."""
    reruns = [r for a in result.attempt_records for r in a.reruns]
    return any(r.reason == "browser_crash" for r in reruns) if reruns else result.retried


def _setup_crashes(result: TaskResult) -> int:
    """Runs of it re-run because the browser failed before their first step."""
    return sum(r.reason == "setup_crash" for a in result.attempt_records for r in a.reruns)


def _stalled(result: TaskResult) -> bool:
    """A run of it was stopped by the watchdog (and re-run, or the task ended with that error)."""
    return any(a.stalled or any(r.reason == "stalled" for r in a.reruns) for a in result.attempt_records)


def _show(value: object, unit: str = "") -> str:
    """A value of the printed table; "-" for one there is none of (nothing ran, no metrics)."""
    return "-" if value is None else f"{value}{unit}"


def summarize(
    results: list[TaskResult],
    stats: BatchStats,
    config: AgentConfig,
    *,
    attempts: int,
    server: Mapping[str, object] | None = None,
    interrupted: bool = False,
) -> BatchSummary:
    """The summary of a batch directory (all finished tasks) and of this invocation's run."""
    n = len(results)
    usage = Usage()
    for result in results:
        for role in ROLES:
            usage.role(role).add(result.usage.role(role))
    scored = [r for r in results if r.reference_match is not None]
    wall = stats.elapsed_s
    run = RunFigures(
        wall_time_s=_r(wall),
        tasks_finished=stats.finished_now,
        tasks_resumed=stats.resumed,
        resumed_failed=stats.resumed_failed,
        resumed_infra_errors_rerun=stats.resumed_infra,
        infra_rerun_causes=dict(stats.infra_causes.most_common()),
        setup_crash_causes=dict(stats.setup_causes.most_common()),
        steps=stats.steps,
        steps_per_s=_r(stats.steps / wall if wall > 0 else None),
        model_tokens_per_s=_r(stats.tokens / wall if wall > 0 else None, 1),
        step_latency_s=StepLatency(
            p50=_r(percentile(stats.step_total_s, 0.5)),
            p90=_r(percentile(stats.step_total_s, 0.9)),
            model_p50=_r(percentile(stats.step_model_s, 0.5)),
            model_p90=_r(percentile(stats.step_model_s, 0.9)),
            browser_p50=_r(percentile(stats.step_browser_s, 0.5)),
            browser_p90=_r(percentile(stats.step_browser_s, 0.9)),
        ),
    )
    hosts = hosts_summary(stats)
    if hosts:  # a fleet of browser hosts: each one's sessions, crashes and step latency
        run.browser_hosts = hosts
    if stats.ray_browsers:  # under --ray: one browser per node, or one per actor and why
        run.ray_browsers = stats.ray_browsers
    summary = BatchSummary(
        tasks=stats.total,
        finished=n,
        interrupted=interrupted,
        succeeded=sum(r.success for r in results),
        success_rate=_r(sum(r.success for r in results) / n if n else None),
        pass_at=attempts,
        reference=ReferenceFigures(
            scored=len(scored),
            matched=sum(bool(r.reference_match) for r in scored),
            match_rate=_r(sum(bool(r.reference_match) for r in scored) / len(scored) if scored else None),
        ),
        steps_per_task=_r(sum(r.steps for r in results) / n if n else None),
        attempts_per_task=_r(sum(r.attempts for r in results) / n if n else None),
        errors=sum(r.stop_reason == "error" for r in results),
        # Tasks that asked for a person (a CAPTCHA, a 2FA code) with none to answer: not a failure of the agent.
        needs_human=sum(r.stop_reason == "needs_human" for r in results),
        # Of the errors: the infrastructure's (a browser that died or did not answer in time, a model
        # server that kept failing), re-runs spent; a resumed batch runs them again.
        infrastructure_errors=sum(r.infrastructure and r.stop_reason == "error" for r in results),
        retried_after_crash=sum(_crashed(r) for r in results),
        # Runs re-run because the browser failed before their first step (a renderer, page, context or
        # browser gone, or a deadline, while their session was set up): never the task's failure.
        setup_crash_reruns=sum(_setup_crashes(r) for r in results),
        stalled=sum(_stalled(r) for r in results),
        infra_reruns=sum(r.infra_reruns for r in results),
        tokens={
            role: TokenFigures(
                prompt=usage.role(role).prompt_tokens,
                cached=usage.role(role).cached_tokens,
                completion=usage.role(role).completion_tokens,
            )
            for role in ROLES
        },
        cost_usd={
            **{
                role: round(
                    config.role(role).cost(usage.role(role).prompt_tokens, usage.role(role).completion_tokens), 6
                )
                for role in ROLES
            },
            "total": round(cost_of(usage, config), 6),
        },
        run=run,
    )
    benchmarks: dict[str, list[TaskResult]] = {}
    for result in results:
        if result.benchmark is not None:
            benchmarks.setdefault(result.benchmark, []).append(result)
    if benchmarks:  # success per benchmark task (the page's own verdict), errors apart
        summary.benchmarks = {
            name: BenchmarkFigures(
                tasks=len(rows),
                succeeded=sum(r.success for r in rows),
                errors=sum(r.stop_reason == "error" for r in rows),
                success_rate=round(sum(r.success for r in rows) / len(rows), 3),
            )
            for name, rows in sorted(benchmarks.items())
        }
    admission = stats.admission
    if admission is not None:
        summary.admission = AdmissionFigures(
            ceiling=admission.ceiling,
            limit=admission.limit,
            limit_lowest=admission.lowest,
            limit_highest=admission.highest,
            peak_running=admission.peak_running,
            decreases=admission.decreases,
            held_back_s=admission.held_back_s,
            reason=admission.reason,
        )
        summary.run.browser_commands = dict(stats.commands)
    if server is not None:
        figures = ServerFigures.model_validate(server)
        if figures.uncached_prompt_tokens is not None and stats.steps:
            figures.uncached_prompt_tokens_per_step = round(figures.uncached_prompt_tokens / stats.steps)
        summary.server = figures
    return summary


def hosts_summary(stats: BatchStats) -> dict[str, HostFigures]:
    """Per browser host of a fleet: the sessions opened on it, the times it was lost under sessions
    (``crashes``) and the sessions lost with it, whether it is quarantined, its steps' p50 latency."""
    rows: dict[str, HostFigures] = {}
    for name in sorted({*stats.host_counts, *stats.host_step_s}):
        counts = stats.host_counts.get(name)
        steps = stats.host_step_s.get(name, [])
        rows[name] = HostFigures(
            sessions=counts.sessions if counts is not None else None,
            crashes=counts.crashes if counts is not None else None,
            lost_sessions=counts.lost_sessions if counts is not None else None,
            quarantined=counts.quarantined if counts is not None else None,
            steps=len(steps),
            step_latency_p50_s=_r(percentile(steps, 0.5)),
        )
    return rows


def print_summary(summary: BatchSummary, console: Console | None = None) -> None:
    console = console or Console(stderr=True, highlight=False)
    table = Table(title="webagent batch", show_header=False, title_justify="left")
    table.add_column("", style="dim")
    table.add_column("")

    def add_row(*cells: str) -> None:
        # Text, not markup, and as terminal_text: a cell may quote a browser's error or a task file.
        table.add_row(*(Text(terminal_text(cell)) for cell in cells))

    rate = summary.success_rate
    add_row("tasks", f"{summary.finished}/{summary.tasks}" + (" (interrupted)" if summary.interrupted else ""))
    add_row(f"validated success (pass@{summary.pass_at})", "-" if rate is None else f"{rate:.1%}")
    ref = summary.reference
    if ref.scored:
        add_row("matches reference answer", f"{ref.matched}/{ref.scored} ({ref.match_rate or 0.0:.1%})")
    add_row("steps / attempts per task", f"{_show(summary.steps_per_task)} / {_show(summary.attempts_per_task)}")
    add_row(
        "errors (infrastructure) / retried after crash / stalled",
        f"{summary.errors} ({summary.infrastructure_errors}) / {summary.retried_after_crash} / {summary.stalled}",
    )
    run = summary.run
    if summary.setup_crash_reruns or run.setup_crash_causes:
        top = "; ".join(f"{n} x {cause}" for cause, n in list(run.setup_crash_causes.items())[:3])
        add_row("re-run after a crash in set-up", f"{summary.setup_crash_reruns}" + (f" ({top})" if top else ""))
    if summary.needs_human:
        add_row("needed a person (ask_user, none to answer)", str(summary.needs_human))
    for name, row in summary.benchmarks.items():
        errors = f", {row.errors} errors" if row.errors else ""
        add_row(name, f"{row.succeeded}/{row.tasks} succeeded ({row.success_rate:.1%}){errors}")
    if summary.infra_reruns or run.infra_rerun_causes:
        top = "; ".join(f"{n} x {cause}" for cause, n in list(run.infra_rerun_causes.items())[:3])
        add_row("re-run after an infrastructure failure", f"{summary.infra_reruns}" + (f" ({top})" if top else ""))
    for role, tok in summary.tokens.items():
        cached = f" ({tok.cached / tok.prompt:.0%} cached)" if tok.cached and tok.prompt else ""
        add_row(f"{role} tokens (prompt/completion)", f"{tok.prompt:,}{cached} / {tok.completion:,}")
    add_row("cost", f"${summary.cost_usd['total']:.4f}")
    wall = run.wall_time_s
    add_row(
        "wall time",
        ("-" if wall is None else f"{wall:.1f}s") + f" ({run.tasks_finished} run now, {run.tasks_resumed} resumed)",
    )
    adm = summary.admission
    if adm:
        commands = run.browser_commands
        add_row(
            "sessions at once (admission)",
            f"peak {adm.peak_running} of {adm.ceiling}, limit {adm.limit_lowest}-{adm.limit_highest}, "
            f"{adm.decreases} decreases, held back {adm.held_back_s:g} s",
        )
        if commands.get("extended") or commands.get("expired"):
            add_row(
                "browser deadlines: given more time / given up",
                f"{commands.get('extended', 0)} / {commands.get('expired', 0)} of {commands.get('answered', 0):,} answered",
            )
    add_row("steps/s, model tokens/s", f"{_show(run.steps_per_s)} / {_show(run.model_tokens_per_s)}")
    lat = run.step_latency_s
    if lat.p50 is None:  # no step ran in this invocation (e.g. a resumed batch with nothing left)
        add_row("step latency p50/p90", "-")
    else:
        add_row(
            "step latency p50/p90",
            f"{_show(lat.p50, 's')} / {_show(lat.p90, 's')} "
            f"(model {_show(lat.model_p50)}/{_show(lat.model_p90, 's')}, "
            f"browser {_show(lat.browser_p50)}/{_show(lat.browser_p90, 's')})",
        )
    if run.ray_browsers:
        add_row("browsers on Ray", run.ray_browsers)
    for name, host in run.browser_hosts.items():
        add_row(
            f"browser host {name}",
            f"{_show(host.sessions)} sessions, {_show(host.crashes)} crashes"
            + (" (quarantined)" if host.quarantined else "")
            + f", step p50 {_show(host.step_latency_p50_s, 's')}",
        )
    server = summary.server
    if server:
        if server.error is not None:
            add_row("server metrics", server.error)
        else:
            add_row("server generation tokens/s", _show(server.generation_tokens_per_s))
            hit = server.prefix_cache_hit_rate
            add_row("server prefix cache: cached share", "-" if hit is None else f"{hit:.1%}")
            if server.uncached_prompt_tokens_per_step is not None:
                add_row("server prompt tokens not cached, per step", f"{server.uncached_prompt_tokens_per_step:,}")
    console.print(table)
