"""Training data and online RL: ``WebEnv`` (a gym-style environment over the agent loop) and the
SFT export of batch runs (``webagent export``).
"""

from .env import Observation, RewardMode, WebEnv, shared_agent
from .export import ExportOptions, ExportStats, RunRef, export_sft, find_runs

__all__ = [
    "ExportOptions",
    "ExportStats",
    "Observation",
    "RewardMode",
    "RunRef",
    "WebEnv",
    "export_sft",
    "find_runs",
    "shared_agent",
]
