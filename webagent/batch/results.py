"""What a batch writes: ``DIR/results.jsonl``, one line per finished task (``TaskResult``, with a
record per attempt and per re-run), appended atomically and read back on resume.

On resume (``resume_plan``) a task whose line says it ended with the infrastructure's error (a
browser that died or did not answer in time, a model server that kept failing; its re-runs spent)
is run again, its line taken out of the file first (``ResultsFile.forget``: the file is rewritten
atomically), so the file keeps one line per task; a task that really failed keeps its line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, Field

from ..config import ROLES, AgentConfig
from ..errors import InputError
from ..files.disk import make_dir, open_append, write_atomic_parts
from ..records import DownloadedFile, Usage
from ..tasks import TaskSpec

__all__ = [
    "AttemptRecord",
    "Rerun",
    "RerunReason",
    "ResultsFile",
    "ResumePlan",
    "TaskResult",
    "cost_of",
    "read_results",
    "resume_plan",
]

log = structlog.get_logger("webagent.batch")

#: Why a run was replaced: its browser (or its page's renderer) died under it, the browser failed before
#: its first step (a crash or a deadline while its session was set up), the watchdog stopped it, or it
#: ended with an error of the infrastructure under it (``WebAgentError.infrastructure``).
RerunReason = Literal["browser_crash", "setup_crash", "stalled", "infrastructure"]


class Rerun(BaseModel):
    """A run of an attempt that was replaced by a re-run."""

    reason: RerunReason
    message: str
    steps: int
    duration_s: float
    output_dir: str | None = Field(
        default=None, description="Where its files were kept (a stalled run's; a crashed run's are removed)"
    )


class AttemptRecord(BaseModel):
    attempt: int
    success: bool
    answer: str | None
    stop_reason: str
    message: str
    steps: int
    duration_s: float
    output_dir: str
    retried: bool = Field(
        default=False, description="Re-run after its browser died, it stalled or the infrastructure failed"
    )
    stalled: bool = Field(default=False, description="The run that counts was stopped by the watchdog")
    infrastructure: bool = Field(
        default=False,
        description="The run that counts ended with the infrastructure's error (a browser that died or did not "
        "answer in time, a model server that kept failing), its re-runs spent",
    )
    reruns: list[Rerun] = Field(default=[], description="The runs it replaced, in order")
    feedback: list[str] = []
    replayed_steps: int = 0
    calls_saved: int = 0
    trace: str | None = None
    downloads: list[DownloadedFile] = Field(default=[], description="The files its pages downloaded and it kept")


class TaskResult(BaseModel):
    """One line of results.jsonl."""

    id: str
    url: str
    goal: str
    success: bool = Field(description="A validated success in any attempt")
    answer: str | None
    stop_reason: str
    message: str
    attempts: int = Field(description="Attempts run (pass@k)")
    attempt_records: list[AttemptRecord]
    steps: int
    usage: Usage
    cost_usd: float
    duration_s: float
    retried: bool = Field(description="Re-run after its browser crashed, it stalled or the infrastructure failed")
    infrastructure: bool = Field(
        default=False,
        description="Ended with stop reason 'error' because the infrastructure failed (re-runs spent), not the "
        "task: re-running the batch command runs it again (unless --no-retry-infra)",
    )
    infra_reruns: int = Field(default=0, description="Runs re-run because the infrastructure failed under them")
    reference: list[str] = []
    reference_match: bool | None = None
    replayed_steps: int = Field(default=0, description="Steps replayed from a replay cache")
    calls_saved: int = Field(default=0, description="Model calls the replay cache saved")
    benchmark: str | None = Field(
        default=None, description="A benchmark task's name (miniwob/click-button): success is its page's verdict"
    )
    downloads: list[DownloadedFile] = Field(
        default=[], description="The files the attempt that counts (its answer's) kept of its pages' downloads"
    )

    @classmethod
    def failed(cls, task: TaskSpec, message: str, *, infrastructure: bool = False) -> TaskResult:
        """The line of a task that could not run at all (stop reason ``error``; ``infrastructure``:
        because of the machinery under it, so that a resume runs it again)."""
        return cls(
            id=task.id,
            url=task.url,
            goal=task.goal,
            success=False,
            answer=None,
            stop_reason="error",
            message=message,
            attempts=0,
            attempt_records=[],
            steps=0,
            usage=Usage(),
            cost_usd=0.0,
            duration_s=0.0,
            retried=False,
            infrastructure=infrastructure,
            benchmark=task.benchmark,
        )


class ResultsFile:
    """Append-only results.jsonl with atomic lines; ``private``: its owner's only, with the folder
    made for it (a batch whose runs hold a secret: ``webagent.files.disk``)."""

    def __init__(self, path: Path, *, private: bool = False) -> None:
        self.path = path
        self.private = private
        make_dir(path.parent, private=private)
        self._repair()
        self._fd = open_append(path, private=private)

    def _repair(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):  # torn tail from a crash: drop it
            cut = data.rfind(b"\n") + 1
            with self.path.open("r+b") as fh:
                fh.truncate(cut)
            log.warning("results_torn_line_dropped", path=str(self.path), bytes=len(data) - cut)

    def finished(self) -> dict[str, TaskResult]:
        done: dict[str, TaskResult] = {}
        if self.path.exists():
            for number, line in enumerate(self.path.read_text(encoding="utf-8").split("\n"), start=1):
                if line.strip():
                    try:
                        result = TaskResult.model_validate_json(line)
                    except ValueError:
                        raise InputError(
                            f"{self.path}:{number} is not a webagent result line; use another --output directory"
                        ) from None
                    done[result.id] = result
        return done

    def forget(self, ids: Iterable[str]) -> None:
        """Take the lines of ``ids`` out of the file (rewritten atomically: a killed run leaves either
        file whole), so that those tasks run again and keep one line each."""
        drop = set(ids)
        if not drop or not self.path.exists():
            return
        kept = []
        for line in self.path.read_bytes().split(b"\n"):
            if line.strip() and TaskResult.model_validate_json(line).id not in drop:
                kept.append(line + b"\n")
        os.close(self._fd)
        write_atomic_parts(self.path, kept, private=self.private)
        self._fd = open_append(self.path, private=self.private)

    def append(self, result: TaskResult) -> None:
        line = (result.model_dump_json() + "\n").encode()
        written = os.write(self._fd, line)
        if written != len(line):  # pragma: no cover - disk full
            raise OSError(f"short write to {self.path}")

    def close(self) -> None:
        os.close(self._fd)


@dataclass(frozen=True)
class ResumePlan:
    """What a batch found in its results file: the tasks to run now, and of the lines kept, how many
    say the task really failed; the lines ended by the infrastructure, run again or kept."""

    pending: list[TaskSpec]
    kept: int
    kept_failed: int
    infra_rerun: list[str]
    infra_kept: int


def resume_plan(finished: dict[str, TaskResult], tasks: list[TaskSpec], *, retry_infra: bool = True) -> ResumePlan:
    """Which of ``tasks`` run now, given the lines already in the file (``finished``): those with no
    line, and (``retry_infra``) those whose line ended with the infrastructure's error."""
    infra = {t.id for t in tasks if t.id in finished and _ended_by_infrastructure(finished[t.id])}
    rerun = infra if retry_infra else set()
    pending = [t for t in tasks if t.id not in finished or t.id in rerun]
    kept = [finished[t.id] for t in tasks if t.id in finished and t.id not in rerun]
    return ResumePlan(
        pending=pending,
        kept=len(kept),
        kept_failed=sum(r.stop_reason == "error" and not r.infrastructure for r in kept),
        infra_rerun=sorted(rerun),
        infra_kept=len(infra) - len(rerun),
    )


def _ended_by_infrastructure(result: TaskResult) -> bool:
    return result.infrastructure and result.stop_reason == "error" and not result.success


def read_results(output: str | Path) -> list[TaskResult]:
    path = Path(output) / "results.jsonl"
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): answers may hold U+2028
    return [TaskResult.model_validate(json.loads(line)) for line in lines if line.strip()]


def cost_of(usage: Usage, config: AgentConfig) -> float:
    """Dollar cost of a usage record at the per-role prices in the config."""
    total = 0.0
    for role in ROLES:
        u = usage.role(role)
        total += config.role(role).cost(u.prompt_tokens, u.completion_tokens)
    return total
