"""OpenEnv: ``WebEnv`` behind openenv-core's server (``create_app``), many sessions on one browser pool.

``build_app(config)`` returns openenv-core's FastAPI app (``/health``, ``/schema``, ``/reset``,
``/step``, ``/state`` and the ``/ws`` WebSocket its clients use): each WebSocket session is one
``WebagentEnvironment``, a ``WebEnv`` on the process's one shared ``Agent`` (one browser pool, the
model endpoints' connection pools). ``webagent env serve`` runs it (``webagent.env.cli``).

Reset takes ``task`` (a benchmark task's name such as ``miniwob/click-button``, or
``{"url", "goal", "reference"?}``), ``seed`` and ``episode_id``; with no task, the server's default
task set (``webagent.env.deck``, ``--tasks``) gives the next one. A client's web task is a remote
client's (``WebEnv(tasks_from="client")``: http(s) only, private addresses only when the operator
allowed them). Step takes a ``WebAction``: the policy's ``reply`` (its text or JSON) or one
``action`` dict, an optional ``point`` in screenshot pixels and, for a drag, ``to_point``. An
episode ending truncated for its own reasons (out of steps or time) is ``done`` with reward 0 and
``truncated_by`` set. **An infrastructure failure** (a dead browser, a model server down, the
run's or the server's budget spent, a session closed for idling; at a reset, a browser that kept
failing under the set-up past ``WebEnv``'s re-runs) **is raised**: the step or reset answers
openenv-core's error message (``EXECUTION_ERROR``; over HTTP a 503), whose clients raise it, so
the trainer drops the rollout instead of training on a 0.0; ``/state`` then shows ``failure``.

A request the client got wrong (a missing task, an unknown field, a wrong type, a step before a
reset or after the end) is answered in openenv-core's shapes: over HTTP a 4xx whose body is
FastAPI's ``{"detail": "<one line>"}`` (a 422 with pydantic's list for a body that does not
validate), over the WebSocket its error message (``{"type": "error", "data": {"message", "code"}}``);
a failure of the environment over HTTP is a 503. None is a 500 or a traceback in the log.

A client that goes away mid-episode ends its session (openenv-core closes the environment and so
its browser context); one that stays connected and silent is cut off by the lease's idle limit
(``idle_timeout_s``). ``/webagent/status`` says how many contexts are open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import structlog
from pydantic import Field

from ..agent import Agent
from ..budget import Budget
from ..config import AgentConfig
from ..errors import BrowserError, ConfigError, InputError, LocalizationError, NavigationError, WebAgentError
from ..serving.tokens import ENV_TOKEN_ENV
from ..tasks.benchmarks import shown
from .core import RewardMode, WebEnv, shared_agent
from .deck import TaskDeck
from .inputs import TaskSource, check_seed
from .lease import lease_keeper

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import Action, ConcurrencyConfig, Environment, Observation, State, create_app
    from openenv.core.env_server.types import EnvironmentMetadata
    from websockets.asyncio.client import ClientConnection
    from websockets.asyncio.client import connect as ws_connect
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

#: The most characters a reset's task or a step's reply may hold (as JSON).
MAX_INPUT = 1 << 20
#: What a client got wrong (4xx) and what failed under it (503), as the HTTP routes answer them.
_CLIENT_ERRORS: tuple[type[WebAgentError], ...] = (InputError, NavigationError, ConfigError, LocalizationError)


class EnvironmentFailure(WebAgentError):
    """The environment could not run the episode to a verdict (its cause in the message): no reward."""


class WebAction(Action):
    """One step: the policy's ``reply`` (text or JSON) or one ``action``; ``point`` in screenshot pixels."""

    reply: str | dict[str, Any] | None = Field(default=None, description="The policy's reply: its text or JSON")
    action: dict[str, Any] | None = Field(default=None, description='One action, e.g. {"action": "scroll", ...}')
    point: tuple[float, float] | None = Field(default=None, description="Where to act, in screenshot pixels")
    to_point: tuple[float, float] | None = Field(
        default=None, description="Where a drag is released, in screenshot pixels"
    )


class WebObservation(Observation):
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


class WebState(State):
    """The session's episode."""

    task_id: str | None = None
    seed: int | None = None
    done: bool = True
    reward: float | None = None
    truncated_by: str | None = None
    failure: str | None = None


class WebagentEnvironment(Environment[WebAction, WebObservation, WebState]):
    """One OpenEnv session: a ``WebEnv`` on the server's shared agent."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        agent: Agent,
        *,
        reward: RewardMode = "task",
        idle_timeout_s: float | None = None,
        deck: TaskDeck | None = None,
        budgets: Sequence[Budget] = (),
    ) -> None:
        """``deck``: the server's default tasks (what a reset without a task runs); ``budgets``: the
        server's, shared by every session."""
        super().__init__()
        self.env = WebEnv(
            agent=agent, reward=reward, idle_timeout_s=idle_timeout_s, tasks_from="client", budgets=budgets
        )
        self.deck = deck
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
        """Start ``task`` (the next of the default tasks without one); InputError (one line) for what the
        client got wrong."""
        self._loop = asyncio.get_running_loop()
        if kwargs:
            raise InputError(f"reset takes task, seed and episode_id; unknown: {shown(', '.join(sorted(kwargs)))}")
        check_seed(seed)
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            raise InputError("episode_id is a string of at most 255 characters")
        source: TaskSource = "client"
        if task is None:
            if self.deck is None:
                raise InputError(
                    "reset needs a task: a benchmark task's name (miniwob/click-button) or {url, goal}; this "
                    "server has no default tasks (webagent env serve --tasks miniwob or --tasks FILE)"
                )
            task, seed, source = self.deck.draw(seed)
        elif len(json.dumps(task, default=str)) > MAX_INPUT:
            raise InputError(f"the task is longer than {MAX_INPUT} characters as JSON")
        try:
            obs, info = await self.env.reset(task, seed=seed, source=source)
        except BrowserError as exc:
            if not exc.infrastructure:
                raise
            # The browser failed under the set-up, again after the environment's re-runs: no episode,
            # the environment's failure (a 503, openenv-core's EXECUTION_ERROR), never the client's.
            failure = f"the browser failed while the episode was set up: {exc}"
            self._state = WebState(episode_id=episode_id, seed=seed, done=True, failure=failure)
            raise EnvironmentFailure(f"the environment failed (setup): {failure}") from None
        self._state = WebState(
            episode_id=episode_id, step_count=0, task_id=info["task_id"], seed=info["seed"], done=False
        )
        return _observation(obs)

    async def step_async(self, action: WebAction, timeout_s: float | None = None, **kwargs: Any) -> WebObservation:
        given = action.reply if action.reply is not None else action.action
        if given is None:
            raise InputError("a step needs 'reply' (the policy's reply) or 'action'")
        if len(given if isinstance(given, str) else json.dumps(given, default=str)) > MAX_INPUT:
            raise InputError(f"the step's reply is longer than {MAX_INPUT} characters")
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
    deck: TaskDeck | None = None,
    budgets: Sequence[Budget] = (),
) -> FastAPI:
    """openenv-core's app serving ``WebagentEnvironment`` sessions on one shared agent; ``deck``: the
    default tasks; ``budgets``: the server's, shared by every session. ``webagent env serve`` puts
    the gate (``webagent.serving.gate``) and the session bounds (``webagent.env.bounds``) in front."""
    shared = agent or shared_agent(config, reward=reward)
    # openenv-core's own reaper counts from a session's last answered call, a reset in progress
    # included: it only reclaims the slots of silent sessions, well after their lease closed the context.
    reclaim_s = None if idle_timeout_s is None else idle_timeout_s * 4 + 60
    app: FastAPI = create_app(
        lambda: WebagentEnvironment(shared, reward=reward, idle_timeout_s=idle_timeout_s, deck=deck, budgets=budgets),
        WebAction,
        WebObservation,
        env_name="webagent",
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=reclaim_s),
    )
    app.add_exception_handler(WebAgentError, _http_error)

    @app.get("/webagent/status")
    async def status() -> dict[str, Any]:
        keeper = lease_keeper()
        return {
            "open_contexts": shared.browsers.open_sessions,
            "leases": keeper.active,
            "reaped": keeper.reaped,
            "browsers": shared.browsers.browsers,
            "crashes": shared.browsers.crashes,
            "drawn": deck.drawn if deck is not None else 0,
            "budgets": [
                {"scope": b.scope, "calls": b.calls, "tokens": b.tokens, "usd": round(b.usd, 6)} for b in budgets
            ],
        }

    async def close_agent() -> None:
        await shared.aclose()

    app.router.on_shutdown.append(close_agent)

    app.state.webagent_agent = shared
    return app


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """webagent's errors on the HTTP routes: 400 for what the client got wrong, 503 for what failed
    under it; FastAPI's ``{"detail": ...}``, one line, no traceback."""
    status = 400 if isinstance(exc, _CLIENT_ERRORS) else 503
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    log.warning("env_request_failed", path=request.url.path, status=status, error=detail)
    return JSONResponse({"detail": detail}, status_code=status)


class WebagentClient(EnvClient[WebAction, WebObservation, WebState]):
    """openenv-core's WebSocket client, typed for webagent, that sends the server's bearer token
    (``async with WebagentClient(base_url=URL, token=TOKEN)``; default token: ``WEBAGENT_ENV_AUTH_TOKEN``)."""

    def __init__(self, base_url: str, *args: Any, token: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url, *args, **kwargs)
        self._ws: ClientConnection | None = None  # openenv-core's connection, typed here
        self.token = token if token is not None else (os.environ.get(ENV_TOKEN_ENV) or None)

    async def connect(self) -> WebagentClient:
        """openenv-core's connection, with ``Authorization: Bearer TOKEN`` on the handshake."""
        if self._ws is not None:
            return self
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        local = urlsplit(self._ws_url).hostname in ("localhost", "127.0.0.1", "::1")
        try:
            self._ws = await ws_connect(
                self._ws_url,
                open_timeout=self._connect_timeout,
                max_size=self._max_message_size,
                additional_headers=headers,
                proxy=None if local else True,  # as openenv-core's own: no proxy for this machine
            )
        except Exception as exc:  # openenv-core's contract: a ConnectionError
            raise ConnectionError(f"Failed to connect to {self._ws_url}: {exc}") from exc
        return self

    def _step_payload(self, action: WebAction) -> dict[str, Any]:
        payload: dict[str, Any] = action.model_dump(exclude_none=True, exclude={"metadata"})
        return payload

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[WebObservation]:
        obs = WebObservation.model_validate(
            {**payload.get("observation", {}), "reward": payload.get("reward"), "done": payload.get("done", False)}
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=bool(payload.get("done")))

    def _parse_state(self, payload: dict[str, Any]) -> WebState:
        state: WebState = WebState.model_validate(payload)
        return state
