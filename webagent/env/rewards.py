"""Where an episode's reward comes from: the validator model, the task's reference answers, both, or
the task's own page (a benchmark task: ``webagent.tasks.benchmarks``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..images import Screenshot
from ..loop import Judge
from ..records import ModelCall, Verdict
from ..tasks import BenchmarkTask, TaskSpec, reference_matches

__all__ = ["RewardMode", "judge_for", "required_roles"]

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
