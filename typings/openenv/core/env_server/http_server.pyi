# openenv-core 0.3's app factory (openenv/core/env_server/http_server.py).
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from .interfaces import Environment
from .types import Action, ConcurrencyConfig, Observation

def create_app(
    env: Callable[[], Environment[Any, Any, Any]],
    action_cls: type[Action],
    observation_cls: type[Observation],
    env_name: str | None = None,
    max_concurrent_envs: int | None = None,
    concurrency_config: ConcurrencyConfig | None = None,
    gradio_builder: Callable[..., object] | None = None,
    custom_tab_name: str = "Custom",
    custom_tab_primary: bool = False,
    show_default_tab: bool = True,
    title_override: str | None = None,
) -> FastAPI: ...
