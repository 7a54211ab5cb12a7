"""Where an episode's reward comes from: the validator model, the task's reference answers, both, or
the task's own page (a benchmark task: ``webagent.tasks.benchmarks``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import structlog

from ..actions import Answer
from ..images import Screenshot
from ..loop import Judge, TaskCheck
from ..records import ModelCall, RunResult, Step, Verdict
from ..tasks import BenchmarkTask, TaskSpec, reference_matches
from .running import Observation, StepResult

__all__ = ["FAILURES", "RewardMode", "judge_for", "outcome", "reference_match", "required_roles"]

log = structlog.get_logger("webagent.env")

#: Stop reasons that mean the environment could not run the episode to a verdict.
FAILURES = ("error", "budget")

RewardMode = Literal["validator", "reference", "both", "task"]
"""validator: the validator model's verdict; reference: the answer contains a reference answer;
both: the validator judges (its feedback drives the episode) and the reward needs a reference match too;
task: only benchmark tasks, whose page gives the reward (a benchmark task is always rewarded so)."""


def required_roles(reward: RewardMode) -> tuple[str, ...]:
    """The model roles an environment needs (the localizer only when no points are passed)."""
    return ("validator",) if reward in ("validator", "both") else ()


def judge_for(spec: TaskSpec | BenchmarkTask, reward: RewardMode) -> Judge | None:
    """The judge of an episode's answers (None: the validator model)."""
    if isinstance(spec, BenchmarkTask):
        return _unjudged
    if reward == "reference":
        return _reference_judge(list(spec.reference))
    return None


async def _unjudged(answer: str, url: str, images: list[Screenshot]) -> tuple[Verdict, ModelCall | None]:
    """A benchmark task's page gives its reward: an answer is not judged."""
    return Verdict(success=False, feedback="This task ends on its page by itself; answers are not judged."), None


def _reference_judge(references: Sequence[str]) -> Judge:
    async def judge(answer: str, url: str, images: list[Screenshot]) -> tuple[Verdict, ModelCall | None]:
        if reference_matches(answer, list(references)):
            return Verdict(success=True, feedback="The answer matches the reference answer."), None
        return Verdict(success=False, feedback="The answer is not the expected one."), None

    return judge


def reference_match(task: TaskSpec | BenchmarkTask | None, step: Step) -> bool | None:
    """Whether a judged answer holds one of the task's reference answers (None: no answer, no references)."""
    if not isinstance(task, TaskSpec) or not task.reference or not isinstance(step.action, Answer):
        return None
    if step.verdict is None:
        return None
    return reference_matches(step.action.content, list(task.reference))


def outcome(
    obs: Observation, result: RunResult, info: dict[str, Any], task: TaskCheck | None, reward: RewardMode
) -> StepResult:
    """The last step's five-tuple: terminated with its reward, or truncated with why (``info``)."""
    terminated = result.success or result.stop_reason == "answered" or (task is not None and task.done)
    if not terminated:
        info["truncated_by"] = result.stop_reason
        info["failure"] = result.message if result.stop_reason in FAILURES else None
        if info["failure"]:
            log.warning("episode_failed", reason=result.stop_reason, failure=result.message)
        return obs, 0.0, False, True, info
    if task is not None:
        return obs, task.reward, True, False, info
    # An accepted answer wins, at the final step too (its stop reason is then max_steps or max_time).
    won = result.success and (info["reference_match"] or reward != "both")
    return obs, 1.0 if won else 0.0, True, False, info
