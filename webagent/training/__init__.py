"""Training data: the SFT export of batch runs (``webagent export``). The RL environments are in
``webagent.env`` (``WebEnv`` and its adapters); ``WebEnv``, ``Observation`` and ``shared_agent`` are
re-exported here for code written before they moved.
"""

from ..env import Observation, RewardMode, WebEnv, shared_agent
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
