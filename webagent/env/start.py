"""How ``WebEnv.reset`` turns what it is given into the run of an episode.

The task is resolved (``inputs.as_task``: a ``TaskSpec``, a mapping, a benchmark task's name or a
``BenchmarkTask``; a mapping is the ``TaskSpec`` it spells, options and ``browser`` block included,
``inputs.task_of``), checked against the environment's reward, and made a ``RunSpec`` the way every
entry point makes one, ``TaskSpec.run_spec``: the task's ``expect``, its limits and budgets, its
``browser`` session settings (a signed-in ``storage_state``, a proxy, a locale, ...) are the
episode's, as they are a batch run's. What an episode cannot honour (a Playwright trace) is refused
with an InputError, never dropped. Its start URL and navigation policy come from who the task comes
from (``inputs.start_policy``); a ``TaskSpec`` of a file not trusted (``trusted=False``) is a file's
whoever hands it over, as in a batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..budget import Budget
from ..errors import InputError
from ..inputs import check_text
from ..runtime import RunSpec
from ..tasks import BenchmarkTask, TaskSpec
from .inputs import TaskInput, TaskSource, as_task, start_policy, task_of
from .rewards import RewardMode, judge_for

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["CANNOT", "EpisodeStart", "episode_start"]

#: The options of a task an episode cannot honour, and why.
CANNOT = {"trace": "an environment keeps no Playwright trace; run the task with webagent batch for one"}


@dataclass(frozen=True, slots=True)
class EpisodeStart:
    """What a reset starts: the task as the episode judges it, its run, its seed."""

    task: TaskSpec | BenchmarkTask
    run: RunSpec
    seed: int | None


async def episode_start(
    runtime: Runtime,
    task: TaskInput,
    seed: int | None,
    *,
    reward: RewardMode,
    source: TaskSource,
    budgets: Sequence[Budget] = (),
) -> EpisodeStart:
    """The start of an episode of ``task`` (InputError or NavigationError for one refused):
    ``budgets`` are shared with other environments, after the task's own."""
    given = task_of(task, seed, source) if isinstance(task, Mapping) else task  # its options and browser kept
    resolved = as_task(given, seed)
    if isinstance(resolved, BenchmarkTask):
        seed = resolved.seed
    if not resolved.goal.strip():
        raise InputError("the task has an empty goal")
    check_text(resolved.goal, "the task's goal")
    if not isinstance(resolved, BenchmarkTask) and reward == "task":
        raise InputError("reward 'task' needs a benchmark task (e.g. 'miniwob/click-button')")
    if isinstance(resolved, TaskSpec) and reward in ("reference", "both") and not resolved.reference:
        raise InputError(f"reward {reward!r} needs reference answers in the task ('reference')")
    page = resolved if isinstance(resolved, BenchmarkTask) else None
    run = _spec_of(given, resolved).run_spec(
        runtime.config.agent, judge=judge_for(resolved, reward), page=page, cannot=CANNOT
    )
    if isinstance(given, TaskSpec) and not given.trusted and source == "operator":
        source = "file"  # a line of a file its operator did not vouch for: as a batch runs it (data_start)
    url, policy = await start_policy(runtime, resolved, source)
    return EpisodeStart(resolved, dataclasses.replace(run, url=url, policy=policy, shared_budgets=tuple(budgets)), seed)


def _spec_of(given: TaskInput, resolved: TaskSpec | BenchmarkTask) -> TaskSpec:
    """The ``TaskSpec`` whose options and session settings the episode runs under: the one given
    (a benchmark line's too), else the task as a plain one."""
    if isinstance(given, TaskSpec):
        return given
    if isinstance(resolved, TaskSpec):
        return resolved
    return TaskSpec(id=resolved.id, url=resolved.url, goal=resolved.goal, benchmark=resolved.id, seed=resolved.seed)
