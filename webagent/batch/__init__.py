"""Batches: hundreds of tasks through one agent, N sessions at once, resumable (``webagent batch``).

Tasks themselves (``TaskSpec``, task files) are ``webagent.tasks``'. ``attempts`` (the one
task runner: ``TaskRunner.run(task)`` / ``run_task``, a task's attempts and re-runs to its results
line), ``runner`` (the batch: a queue of tasks here, or on Ray actors), ``stats`` (live counters),
``watchdog`` (stalled runs), ``results`` (results.jsonl), ``summary`` and ``servermetrics`` (what a
batch reports), ``ray`` (the actors), ``cli`` (the command).
"""

from .attempts import TaskLimits, TaskRunner, run_task
from .ray import RayCluster
from .results import AttemptRecord, Rerun, ResultsFile, TaskResult, cost_of, read_results
from .runner import (
    CRASH_RERUNS,
    DEFAULT_CLEANUP_TIMEOUT_S,
    DEFAULT_STALL_TIMEOUT_S,
    INFRA_RERUNS,
    SETUP_RERUNS,
    STALL_RERUNS,
    BatchRunner,
    BatchStats,
)

__all__ = [
    "CRASH_RERUNS",
    "DEFAULT_CLEANUP_TIMEOUT_S",
    "DEFAULT_STALL_TIMEOUT_S",
    "INFRA_RERUNS",
    "SETUP_RERUNS",
    "STALL_RERUNS",
    "AttemptRecord",
    "BatchRunner",
    "BatchStats",
    "RayCluster",
    "Rerun",
    "ResultsFile",
    "TaskLimits",
    "TaskResult",
    "TaskRunner",
    "cost_of",
    "read_results",
    "run_task",
]
