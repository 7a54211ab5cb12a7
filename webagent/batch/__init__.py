"""Batches: hundreds of tasks through one agent, N sessions at once, resumable (``webagent batch``).

``runner`` (the queue), ``attempts`` (one task's attempts and re-runs), ``stats`` (live counters), ``watchdog`` (stalled runs), ``results`` (results.jsonl),
``tasks`` (task files), ``summary`` and ``servermetrics`` (what a batch reports), ``ray`` (the same
over a Ray cluster), ``cli`` (the command).
"""

from .results import AttemptRecord, Rerun, ResultsFile, TaskResult, cost_of, read_results
from .runner import (
    CRASH_RERUNS,
    DEFAULT_CLEANUP_TIMEOUT_S,
    DEFAULT_STALL_TIMEOUT_S,
    INFRA_RERUNS,
    STALL_RERUNS,
    BatchRunner,
    BatchStats,
)
from .tasks import TaskSpec, load_references, load_tasks, reference_matches

__all__ = [
    "CRASH_RERUNS",
    "DEFAULT_CLEANUP_TIMEOUT_S",
    "DEFAULT_STALL_TIMEOUT_S",
    "INFRA_RERUNS",
    "STALL_RERUNS",
    "AttemptRecord",
    "BatchRunner",
    "BatchStats",
    "Rerun",
    "ResultsFile",
    "TaskResult",
    "TaskSpec",
    "cost_of",
    "load_references",
    "load_tasks",
    "read_results",
    "reference_matches",
]
