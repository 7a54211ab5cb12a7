"""Tasks, under every entry point that runs them: what a task is and how it becomes a run.

``spec.py`` is ``TaskSpec`` (a task's start, goal, reward, ``TaskOptions`` with its ``RunLimits`` and
trace mode, its ``browser`` session settings) and ``TaskSpec.run_spec``, the one conversion of a task
to the ``RunSpec`` a runtime opens; ``taskfiles.py`` reads task files (our JSONL, WebVoyager's,
benchmark lines) and reference answers and names run directories; ``benchmarks.py`` is the registry
of benchmark task sets (tasks whose page gives the reward; the extension point for BrowserGym-style
sets, ``register_taskset`` or the ``webagent.tasksets`` entry points) and ``miniwob.py`` the MiniWoB++
set, served locally. Nothing here imports a feature (batch, env, suite, training): they build on it.
"""

from .benchmarks import BenchmarkTask, TaskSet, benchmark_task, is_benchmark_name, register_taskset, tasksets
from .miniwob import MiniWoBTask, MiniWoBTasks
from .spec import RUN_LIMITS, UNTRUSTED_BROWSER_KEYS, RunLimits, TaskOptions, TaskSpec, TraceMode, distrust, guarded
from .taskfiles import check_run_dirs, load_references, load_tasks, reference_matches, run_dir_name

register_taskset(MiniWoBTasks, "miniwob")

__all__ = [
    "RUN_LIMITS",
    "UNTRUSTED_BROWSER_KEYS",
    "BenchmarkTask",
    "MiniWoBTask",
    "MiniWoBTasks",
    "RunLimits",
    "TaskOptions",
    "TaskSet",
    "TaskSpec",
    "TraceMode",
    "benchmark_task",
    "check_run_dirs",
    "distrust",
    "guarded",
    "is_benchmark_name",
    "load_references",
    "load_tasks",
    "reference_matches",
    "register_taskset",
    "run_dir_name",
    "tasksets",
]
