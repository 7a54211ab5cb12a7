"""OpenEnv: ``WebEnv`` behind openenv-core's server (``create_app``), many sessions on one browser pool.

``build_app(config)`` returns openenv-core's FastAPI app (``/health``, ``/schema``, ``/reset``,
``/step``, ``/state`` and the ``/ws`` WebSocket its clients use): each WebSocket session is one
``WebagentEnvironment``, a ``WebEnv`` on the process's one shared ``Agent`` (one browser pool, the
model endpoints' connection pools). ``webagent env serve`` runs it (``webagent.env.cli``).

Reset takes ``task`` (a benchmark task's name such as ``miniwob/click-button``, or
``{"url", "goal", "reference"?}``) and ``seed``; step takes a ``WebAction``: the policy's ``reply``
(its text or JSON) or one ``action`` dict, an optional ``point`` in screenshot pixels and, for a
drag, ``to_point``. An
episode ending truncated for its own reasons (out of steps or time) is ``done`` with reward 0 and
``truncated_by`` set. **An infrastructure failure** (a dead browser, a model server down, a spent
budget, a session closed for idling) **is raised**: the step answers openenv-core's error message
(``EXECUTION_ERROR``), whose clients raise it, so the trainer drops the rollout instead of
training on a 0.0; ``/state`` then shows ``failure``.

A client that goes away mid-episode ends its session (openenv-core closes the environment and so
its browser context); one that stays connected and silent is cut off by the lease's idle limit
(``idle_timeout_s``). ``/webagent/status`` says how many contexts are open.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from pydantic import Field

from ..agent import Agent
from ..config import AgentConfig
from ..errors import ConfigError, WebAgentError
from .core import RewardMode, WebEnv, shared_agent
from .lease import lease_keeper

try:
    from fastapi import FastAPI
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import Action, ConcurrencyConfig, Environment, Observation, State, create_app
    from openenv.core.env_server.types import EnvironmentMetadata
except ImportError as exc:  # pragma: no cover - the rl extra
    raise ConfigError("webagent env serve needs openenv-core: pip install 'webagent[rl]'") from exc

__all__ = [
    "EnvironmentFailure",
    "WebAction",
    "WebObservation",
    "WebState",
    "WebagentClient",
    "WebagentEnvironment",
    "build_app",
]

log = structlog.get_logger("webagent.env")


class EnvironmentFailure(WebAgentError):
    """The environment could not run the episode to a verdict (its cause in the message): no reward."""


class WebAction(Action):  # type: ignore[misc]
    """One step: the policy's ``reply`` (text or JSON) or one ``action``; ``point`` in screenshot pixels."""

    reply: str | dict[str, Any] | None = Field(default=None, description="The policy's reply: its text or JSON")
    action: dict[str, Any] | None = Field(default=None, description='One action, e.g. {"action": "scroll", ...}')
    point: tuple[float, float] | None = Field(default=None, description="Where to act, in screenshot pixels")
    to_point: tuple[float, float] | None = Field(
        default=None, description="Where a drag is released, in screenshot pixels"
    )


class WebObservation(Observation):  # type: ignore[misc]
    """What the policy sees (``done`` and ``reward`` as openenv-core has them)."""

    step: int = 0
    url: str = ""
    title: str = ""
    goal: str = ""
    screenshot: str = Field(default="", description="The screenshot as a data URL")
    image_size: tuple[int, int] = (0, 0)
    events: list[str] = Field(default_factory=list)
    final: bool = False
    messages: list[dict[str, Any]] = Field(default_factory=list, description="The policy request's messages")
    outcome: str = ""
    error: str | None = None
    terminated: bool = False
    truncated: bool = False
    truncated_by: str | None = Field(default=None, description="max_steps or max_time when truncated")
    task: dict[str, Any] | None = Field(default=None, description="A benchmark page's own figures")
    downloads: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The files the episode's pages downloaded and the server kept so far: name, path (on the "
        "server), bytes, url",
    )


class WebState(State):  # type: ignore[misc]
    """The session's episode."""

    task_id: str | None = None
    seed: int | None = None
    done: bool = True
    reward: float | None = None
    truncated_by: str | None = None
    failure: str | None = None


class WebagentEnvironment(Environment):  # type: ignore[misc]
    """One OpenEnv session: a ``WebEnv`` on the server's shared agent."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, agent: Agent, *, reward: RewardMode = "task", idle_timeout_s: float | None = None) -> None:
        super().__init__()
        self.env = WebEnv(agent=agent, reward=reward, idle_timeout_s=idle_timeout_s)
        self._state = WebState()
        self._loop: asyncio.AbstractEventLoop | None = None

    # openenv-core calls the async forms when they are overridden; the sync ones are not used.
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> WebObservation:
        raise NotImplementedError("use reset_async")

    def step(self, action: WebAction, timeout_s: float | None = None, **kwargs: Any) -> WebObservation:
        raise NotImplementedError("use step_async")

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, task: Any = None, **kwargs: Any
    ) -> WebObservation:
        self._loop = asyncio.get_running_loop()
        if task is None:
            raise ValueError("reset needs a task: a benchmark task's name (miniwob/click-button) or {url, goal}")
        obs, info = await self.env.reset(task, seed=seed)
        self._state = WebState(
            episode_id=episode_id, step_count=0, task_id=info["task_id"], seed=info["seed"], done=False
        )
        return _observation(obs)

    async def step_async(self, action: WebAction, timeout_s: float | None = None, **kwargs: Any) -> WebObservation:
        given = action.reply if action.reply is not None else action.action
        if given is None:
            raise ValueError("a step needs 'reply' (the policy's reply) or 'action'")
        obs, reward, terminated, truncated, info = await self.env.step(
            given, point=action.point, to_point=action.to_point
        )
        state = self._state
        state.step_count += 1
        if terminated or truncated:
            state.done, state.reward, state.truncated_by = True, reward, info.get("truncated_by")
        if info.get("failure"):
            state.failure, state.reward = info["failure"], None
            raise EnvironmentFailure(f"the environment failed ({info['truncated_by']}): {info['failure']}")
        out = _observation(obs)
        out.reward, out.done = reward, terminated or truncated
        out.terminated, out.truncated, out.truncated_by = terminated, truncated, info.get("truncated_by")
        out.outcome, out.error, out.task = info.get("outcome") or "", info.get("error"), info.get("task")
        out.downloads = [d.model_dump(mode="json") for d in info.get("downloads") or []]
        return out

    @property
    def state(self) -> WebState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="webagent",
            description="Web tasks and MiniWoB++ in Chromium, rewarded by a validator, reference answers or the page",
            version="1",
        )

    def close(self) -> None:
        """openenv-core closes a session from a worker thread: the context is closed on the server's loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile
            asyncio.run_coroutine_threadsafe(self.env.aclose(), loop)


def _observation(obs: Any) -> WebObservation:
    frame = obs.screenshot.frame
    return WebObservation(
        step=obs.step,
        url=obs.url,
        title=obs.title,
        goal=obs.goal,
        screenshot=obs.screenshot.data_url,
        image_size=(frame.image_width, frame.image_height),
        events=obs.events,
        final=obs.final,
        messages=[dict(m) for m in obs.messages],
    )


def build_app(
    config: AgentConfig,
    *,
    max_sessions: int = 64,
    reward: RewardMode = "task",
    idle_timeout_s: float | None = 300.0,
    agent: Agent | None = None,
) -> FastAPI:
    """openenv-core's app serving ``WebagentEnvironment`` sessions on one shared agent."""
    shared = agent or shared_agent(config, reward=reward)
    # openenv-core's own reaper counts from a session's last answered call, a reset in progress
    # included: it only reclaims the slots of silent sessions, well after their lease closed the context.
    reclaim_s = None if idle_timeout_s is None else idle_timeout_s * 4 + 60
    app: FastAPI = create_app(
        lambda: WebagentEnvironment(shared, reward=reward, idle_timeout_s=idle_timeout_s),
        WebAction,
        WebObservation,
        env_name="webagent",
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=reclaim_s),
    )

    @app.get("/webagent/status")
    async def status() -> dict[str, Any]:
        keeper = lease_keeper()
        return {
            "open_contexts": shared.browsers.open_sessions,
            "leases": keeper.active,
            "reaped": keeper.reaped,
            "browsers": shared.browsers.browsers,
            "crashes": shared.browsers.crashes,
        }

    async def close_agent() -> None:
        await shared.aclose()

    app.router.on_shutdown.append(close_agent)

    app.state.webagent_agent = shared
    return app


class WebagentClient(EnvClient[WebAction, WebObservation, WebState]):  # type: ignore[misc]
    """openenv-core's WebSocket client, typed for webagent (``async with WebagentClient(base_url=URL)``)."""

    def _step_payload(self, action: WebAction) -> dict[str, Any]:
        payload: dict[str, Any] = action.model_dump(exclude_none=True, exclude={"metadata"})
        return payload

    def _parse_result(self, payload: dict[str, Any]) -> Any:
        from openenv.core.client_types import StepResult

        obs = WebObservation.model_validate(
            {**payload.get("observation", {}), "reward": payload.get("reward"), "done": payload.get("done", False)}
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=bool(payload.get("done")))

    def _parse_state(self, payload: dict[str, Any]) -> WebState:
        state: WebState = WebState.model_validate(payload)
        return state
