"""Environments for RL trainers: one async core and an adapter per framework.

``core.py`` is ``WebEnv`` (reset / step with gymnasium's five-tuple; rewards from the validator,
reference answers or the task's own page; infrastructure failures end an episode ``truncated`` with
their cause, never as a reward); ``lease.py`` ties each episode to its browser context (closed when
the episode ends, when its holder goes away, or after an idle limit); ``rewards.py`` says where
rewards come from; ``inputs.py`` turns what a caller passes (tasks, replies, points) into what the
loop runs, and who a task comes from into what its episode may reach; ``clock.py`` is a seeded
episode's page time (paused, run a fixed step at a time) and ``Math.random``; ``tasks.py`` is the
registry of benchmark task sets (the extension point for BrowserGym-style sets) and ``miniwob.py``
the MiniWoB++ set, served locally. The adapters: ``gym.py`` (gymnasium, registered under
``webagent/``), ``vf.py`` (verifiers' ``load_environment``), ``openenv.py``, ``deck.py`` (a server's
default tasks), ``bounds.py`` (sessions per client and in all) and ``cli.py`` (``webagent env
serve``, on openenv-core's server, behind ``webagent.serving``'s gate). The adapters import their
framework only when used (``pip install 'webagent[rl]'``).
"""

from .core import Observation, StepResult, TaskSource, WebEnv, shared_agent
from .lease import LeaseKeeper, SessionLease, lease_keeper
from .miniwob import MiniWoBTask, MiniWoBTasks
from .rewards import RewardMode, required_roles
from .tasks import BenchmarkTask, TaskSet, benchmark_task, register_taskset, tasksets

register_taskset(MiniWoBTasks, "miniwob")

__all__ = [
    "BenchmarkTask",
    "LeaseKeeper",
    "MiniWoBTask",
    "MiniWoBTasks",
    "Observation",
    "RewardMode",
    "SessionLease",
    "StepResult",
    "TaskSet",
    "TaskSource",
    "WebEnv",
    "benchmark_task",
    "lease_keeper",
    "register_taskset",
    "required_roles",
    "shared_agent",
    "tasksets",
]
