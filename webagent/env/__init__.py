"""Environments for RL trainers: one async core and an adapter per framework.

``core.py`` is ``WebEnv`` (reset / step with gymnasium's five-tuple; rewards from the validator,
reference answers or the task's own page; infrastructure failures end an episode ``truncated`` with
their cause, never as a reward); ``lease.py`` ties each episode to its browser context (closed when
the episode ends, when its holder goes away, or after an idle limit); ``rewards.py`` says where
rewards come from; ``inputs.py`` turns what a caller passes (tasks, replies, points) into what the
loop runs, and who a task comes from into what its episode may reach; ``clock.py`` is a seeded
episode's page time (paused, run a fixed step at a time) and ``Math.random``. Tasks, the benchmark
task sets (MiniWoB++ among them) included, are ``webagent.tasks``'. The adapters: ``gym.py`` (gymnasium, registered under
``webagent/``), ``vf.py`` (verifiers' ``load_environment``), ``openenv.py``, ``deck.py`` (a server's
default tasks), ``bounds.py`` (sessions per client and in all) and ``cli.py`` (``webagent env
serve``, on openenv-core's server, behind ``webagent.serving``'s gate). The adapters import their
framework only when used (``pip install 'webagent[rl]'``).
"""

from .core import Observation, StepResult, TaskSource, WebEnv, shared_agent
from .lease import LeaseKeeper, SessionLease, lease_keeper
from .rewards import RewardMode, required_roles

__all__ = [
    "LeaseKeeper",
    "Observation",
    "RewardMode",
    "SessionLease",
    "StepResult",
    "TaskSource",
    "WebEnv",
    "lease_keeper",
    "required_roles",
    "shared_agent",
]
