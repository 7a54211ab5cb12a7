"""Live step display for the CLI (stderr): rich on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from typing import assert_never

from rich.console import Console
from rich.markup import escape

from ..actions import describe_action
from ..config import AgentConfig
from ..records import Phase, Point, RunResult, Step

__all__ = ["StepPrinter"]


class StepPrinter:
    def __init__(self, *, quiet: bool = False, max_steps: int = 30) -> None:
        self.quiet = quiet
        self.max_steps = max_steps
        self.console = Console(stderr=True, highlight=False, soft_wrap=True, force_terminal=None)
        self.rich = sys.stderr.isatty()

    def _print(self, markup: str, plain: str) -> None:
        if self.quiet:
            return
        if self.rich:
            self.console.print(markup)
        else:
            print(plain, file=sys.stderr, flush=True)

    def start(self, url: str, goal: str, config: AgentConfig) -> None:
        placed = (
            f"localizer {config.localizer.profile}"
            if config.grounding() == "localizer"
            else "policy grounds its clicks"
        )
        self._print(
            f"[bold]webagent[/bold] {escape(url)}\n[dim]goal:[/dim] {escape(goal)}  [dim]({placed})[/dim]",
            f"webagent {url}\ngoal: {goal} ({placed})",
        )

    def phase(self, phase: Phase, config: AgentConfig) -> None:
        """What the run is doing before its first step is done."""
        match phase.name:
            case "launch":
                text = "launching the browser"
            case "open":
                text = f"opening {phase.url}"
            case "step":
                policy = config.policy
                where = f" at {', '.join(policy.endpoints())}" if policy.endpoints() else ""
                text = f"step 1: taking a screenshot and asking the policy model ({policy.model or 'default model'}{where})"
            case _:
                assert_never(phase.name)
        self._print(f"[dim]{escape(text)}…[/dim]", f"{text}...")

    def step(self, step: Step) -> None:
        what = describe_action(step.action) if step.action else "(no action)"
        where = _where(step.point, step.target_point)
        ok = not step.error
        outcome = step.actions[0].outcome if step.actions else step.outcome or ""
        seconds = f"{step.timings.total_s:.2f}s" + (", replayed" if step.replayed else "")
        label = (
            f"[{step.index}/{self.max_steps}]" if step.kind == "action" else f"[{step.index}/{self.max_steps} final]"
        )
        color = "green" if ok else "red"
        self._print(
            f"[dim]{label}[/dim] {escape(what)}{where} [{color}]→ {escape(outcome)}[/{color}] [dim]{seconds}[/dim]",
            f"{label} {what}{where} -> {outcome} ({seconds})",
        )
        for acted in step.actions[1:]:  # several actions a turn: each on a line of its own
            line = f"then {describe_action(acted.action)}{_where(acted.point, acted.target_point)}"
            color = "red" if acted.error else "dim" if acted.outcome.startswith("not carried out") else "green"
            self._print(
                f"    {escape(line)} [{color}]→ {escape(acted.outcome)}[/{color}]", f"    {line} -> {acted.outcome}"
            )
        for event in step.events:
            self._print(f"    [yellow]{escape(event)}[/yellow]", f"    event: {event}")
        if step.verdict and not step.verdict.success:
            self._print(
                f"    [yellow]validator:[/yellow] {escape(step.verdict.feedback)}",
                f"    validator: {step.verdict.feedback}",
            )

    def result(self, result: RunResult) -> None:
        badge = "[bold green]PASS[/bold green]" if result.success else "[bold red]FAIL[/bold red]"
        plain_badge = "PASS" if result.success else "FAIL"
        answer = result.answer if result.answer is not None else "(none)"
        tail = (
            f"{result.steps} steps, {result.attempts} attempt(s), {result.duration_s:.1f}s, stop: {result.stop_reason}"
        )
        if result.replayed_steps:
            tail += f", {result.replayed_steps} steps replayed ({result.calls_saved} model calls saved)"
        report = f"\nreport: {result.output_dir}/report.html" if result.output_dir else ""
        msg = f" ({result.message})" if not result.success and result.message else ""
        self._print(
            f"{badge} answer: {escape(answer)}  [dim]({escape(tail)})[/dim]{escape(msg)}{escape(report)}",
            f"{plain_badge} answer: {answer} ({tail}){msg}{report}",
        )
        for kept in result.downloads:  # the files the pages downloaded, where they were kept
            line = f"{kept.name} ({kept.bytes} bytes): {kept.path}"
            self._print(f"[dim]downloaded:[/dim] {escape(line)}", f"downloaded: {line}")


def _where(point: Point | None, target: Point | None) -> str:
    """Where an action acted, in viewport pixels (a drag: from, to)."""
    where = f" at ({point.viewport[0]:.0f}, {point.viewport[1]:.0f})" if point else ""
    return where + (f" to ({target.viewport[0]:.0f}, {target.viewport[1]:.0f})" if target else "")
