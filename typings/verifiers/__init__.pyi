# The verifiers 0.3 API webagent's environment uses (webagent/env/vf.py): the multi-turn environment
# it subclasses, its rubric, the infrastructure error and the lifecycle decorators.
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., object])

class State(dict[str, Any]): ...  # a rollout's state: JSON-like values by name

Messages = list[dict[str, Any]]  # chat messages

class Error(Exception): ...
class InfraError(Error): ...

class Rubric:
    def __init__(
        self,
        funcs: list[Callable[..., object]] | None = None,
        weights: list[float] | None = None,
        parser: object | None = None,
    ) -> None: ...
    def add_metric(self, func: Callable[..., object], weight: float = 0.0) -> None: ...

class Environment:
    def __init__(
        self,
        dataset: object | None = None,  # a datasets.Dataset (or verifiers' DatasetBuilder)
        eval_dataset: object | None = None,
        system_prompt: str | None = None,
        few_shot: Messages | None = None,
        parser: object | None = None,
        rubric: Rubric | None = None,
        sampling_args: dict[str, Any] | None = None,
        message_type: str | object = ...,  # "chat" or "completion"
        tool_defs: list[object] | None = None,
        max_workers: int = 512,
        env_id: str | None = None,
        env_args: dict[str, Any] | None = None,
        map_kwargs: dict[str, Any] = ...,
        max_seq_len: int | None = None,
        score_rollouts: bool = True,
        pass_threshold: float = 0.5,
        **kwargs: object,
    ) -> None: ...

class MultiTurnEnv(Environment):
    max_turns: int
    def __init__(self, max_turns: int = -1, timeout_seconds: float | None = None, **kwargs: object) -> None: ...
    async def setup_state(self, state: State) -> State | None: ...
    async def env_response(self, messages: Messages, state: State, **kwargs: object) -> Messages: ...

def cleanup(func: _F, priority: int = 0, stage: str = "rollout") -> _F: ...
def teardown(func: _F, priority: int = 0) -> _F: ...
