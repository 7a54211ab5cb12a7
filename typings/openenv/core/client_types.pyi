# openenv-core 0.3's step result (openenv/core/client_types.py).
from dataclasses import dataclass
from typing import Generic, TypeVar

ObsT = TypeVar("ObsT")
StateT = TypeVar("StateT")

@dataclass
class StepResult(Generic[ObsT]):
    observation: ObsT
    reward: float | None = None
    done: bool = False
