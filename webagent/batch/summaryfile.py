"""What ``summary.json`` holds: :class:`BatchSummary`, written by ``webagent batch`` and read back
through the same model (the tests, a script comparing batches).

A section the batch had nothing for (``benchmarks`` without benchmark tasks, ``admission`` without
admission control, ``server`` without ``--metrics-url``, a server figure it could not read) is left
out of the file, not written as null: :meth:`BatchSummary.as_json` writes only what was set, and a
file read back writes out again the same.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AdmissionFigures",
    "BatchSummary",
    "BenchmarkFigures",
    "ReferenceFigures",
    "RunFigures",
    "ServerFigures",
    "StepLatency",
    "TokenFigures",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReferenceFigures(_Section):
    """Answers compared with a task's reference answers."""

    scored: int = Field(description="Tasks that have reference answers")
    matched: int = Field(description="Of them, those whose answer matches one")
    match_rate: float | None = Field(description="matched / scored; null when none was scored")


class TokenFigures(_Section):
    """One role's tokens over the finished tasks."""

    prompt: int
    cached: int = Field(default=0, description="Of the prompt tokens, those the server's prefix cache served")
    completion: int


class StepLatency(_Section):
    """Seconds per step of this invocation (null when no step ran): in all, in the model, in the browser."""

    p50: float | None
    p90: float | None
    model_p50: float | None
    model_p90: float | None
    browser_p50: float | None
    browser_p90: float | None


class RunFigures(_Section):
    """This invocation of the command (a resumed batch counts only what it ran now)."""

    wall_time_s: float | None
    tasks_finished: int
    tasks_resumed: int
    resumed_failed: int = 0
    resumed_infra_errors_rerun: int = 0
    infra_rerun_causes: dict[str, int] = Field(
        default={}, description="Re-runs after an infrastructure failure, by cause"
    )
    setup_crash_causes: dict[str, int] = Field(default={}, description="Re-runs after a crash in set-up, by cause")
    steps: int
    steps_per_s: float | None
    model_tokens_per_s: float | None
    step_latency_s: StepLatency
    browser_commands: dict[str, int] = Field(
        default={}, description="With admission control: bounded browser commands answered, extended, expired"
    )
    browser_hosts: dict[str, HostFigures] = Field(default={}, description="Per browser host, with a fleet of hosts")
    ray_browsers: str | None = Field(
        default=None, description="Under --ray: one browser per node, or one per actor and why"
    )


class HostFigures(_Section):
    """A browser host of a fleet: its sessions, the times it was lost under sessions, its steps."""

    sessions: int | None = Field(description="Sessions opened on it; null when only its steps are known")
    crashes: int | None = Field(description="Times it was lost under sessions")
    lost_sessions: int | None = Field(description="Sessions lost with it (each re-run elsewhere)")
    quarantined: bool | None = Field(description="Whether it was quarantined at the end")
    steps: int
    step_latency_p50_s: float | None


class BenchmarkFigures(_Section):
    """The tasks of one benchmark: success is the page's own verdict."""

    tasks: int
    succeeded: int
    errors: int
    success_rate: float


class AdmissionFigures(_Section):
    """How many sessions ran at once under admission control."""

    ceiling: int
    limit: int
    limit_lowest: int
    limit_highest: int
    peak_running: int
    decreases: int
    held_back_s: float
    reason: str


class ServerFigures(_Section):
    """The model server's own metrics over the run (``--metrics-url``); ``error`` when unread."""

    url: str
    error: str | None = None
    generation_tokens: float | None = None
    generation_tokens_per_s: float | None = None
    prompt_tokens: float | None = None
    prompt_tokens_per_s: float | None = None
    prefix_cache_hit_rate: float | None = None
    uncached_prompt_tokens: float | None = None
    uncached_prompt_tokens_per_step: int | None = None


class BatchSummary(_Section):
    """A batch directory's summary: all its finished tasks, and this invocation's run."""

    tasks: int = Field(description="Tasks in the task file")
    finished: int = Field(description="Tasks with a line in results.jsonl")
    interrupted: bool
    succeeded: int
    success_rate: float | None = Field(description="succeeded / finished; null when none finished")
    pass_at: int = Field(description="Attempts per task (pass@k)")
    reference: ReferenceFigures
    steps_per_task: float | None
    attempts_per_task: float | None
    errors: int = Field(description="Tasks that ended with stop reason error")
    needs_human: int = Field(default=0, description="Tasks that asked for a person with none to answer")
    infrastructure_errors: int = Field(default=0, description="Of the errors, the infrastructure's")
    retried_after_crash: int
    setup_crash_reruns: int = Field(default=0, description="Runs re-run after the browser failed in set-up")
    stalled: int = Field(default=0, description="Tasks a run of which the watchdog stopped")
    infra_reruns: int = Field(default=0, description="Runs re-run after an infrastructure failure")
    tokens: dict[str, TokenFigures] = Field(description="Per role")
    cost_usd: dict[str, float] = Field(description="Per role, and total")
    run: RunFigures
    benchmarks: dict[str, BenchmarkFigures] = Field(default={}, description="Per benchmark, when tasks had one")
    admission: AdmissionFigures | None = None
    server: ServerFigures | None = None

    def as_json(self) -> dict[str, object]:
        """The file's object: what was set, nothing left out written as null."""
        return self.model_dump(mode="json", exclude_unset=True)

    def text(self) -> str:
        """summary.json's text."""
        return json.dumps(self.as_json(), indent=2) + "\n"
