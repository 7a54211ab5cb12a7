"""gymnasium's API over ``WebEnv``: ``WebGymEnv`` (sync, a ``gymnasium.Env``) and ``AsyncWebGymEnv``.

    import gymnasium as gym
    import webagent.env.gym  # registers the webagent/ environments (or gym.make("webagent.env.gym:webagent/MiniWoB-v0"))

    env = gym.make("webagent/MiniWoB-v0")                      # miniwob/click-test; no model endpoint
    env = gym.make("webagent/miniwob.click-button-v0")         # one id per MiniWoB++ task
    obs, info = env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step(
        {"kind": 0, "point": np.array([120.0, 80.0], dtype=np.float32), "text": ""})

Spaces. Observations are ``Dict(screenshot=Box(0, 255, (H, W, 3), uint8), url=Text, goal=Text)``;
H x W is the screenshot size the config gives (the localizer profile's resize of the viewport;
MiniWoB environments default to BrowserGym's 500 x 320 viewport). Actions are
``Dict(kind=Discrete(5), point=Box((0, 0), (W - 1, H - 1)), text=Text)``, ``kind`` indexing
``KINDS``: ``click`` at ``point``, ``type`` ``text`` into the field at ``point``, ``press`` the key
``text``, ``scroll`` (``text`` up/down/left/right, default down), ``answer`` with ``text``.
``step`` also takes the policy's reply (its text or JSON dict) as ``WebEnv.step`` does, and
``{"reply": ..., "point": (x, y), "to_point": (x, y)}``: every action of webagent's, the hands the
five kinds leave out among them (``hover_element``, ``double_click_element``, ``right_click_element``,
``drag_element`` with its release at ``to_point``, ``switch_tab``, ``close_tab``, held
``modifiers``), in the same pixels; the discrete ``kind`` keeps the five a learned policy picks from. ``info`` holds the plain figures (``outcome``, ``error``,
``task``, ``truncated_by``, ``failure``, ``stop_reason``, ``success``); the full ``Observation``
(the policy messages included) and ``WebEnv``'s info are ``env.unwrapped.inner.last`` and
``last_info``. Rewards and the meaning of ``terminated`` / ``truncated`` (an
infrastructure failure: truncated, ``info["failure"]``) are ``WebEnv``'s.

The sync form runs the async one on its own event loop in a thread; each instance has its own
browser unless given a shared ``agent`` (then it must be used from that agent's loop: use the
async form). For many environments at once, prefer the async form on one shared agent.
"""

from __future__ import annotations

import asyncio
import io
import string
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, ClassVar, TypeVar

from ..agent import Agent
from ..config import AgentConfig
from ..errors import ConfigError
from ..images import frame_for
from ..tasks import MiniWoBTasks, TaskSpec
from .core import Observation, RewardMode, WebEnv, shared_agent
from .inputs import Action

try:
    import gymnasium
    import numpy as np
    from gymnasium import spaces
    from PIL import Image
except ImportError as exc:  # pragma: no cover - the rl extra
    raise ConfigError("the gymnasium environments need gymnasium: pip install 'webagent[rl]'") from exc

__all__ = ["KINDS", "AsyncWebGymEnv", "GymRuntime", "WebGymEnv", "register_envs"]

T = TypeVar("T")

KINDS = ("click", "type", "press", "scroll", "answer")
#: Characters a Text space holds: printable ASCII and Latin-1 (others are shown as "?").
CHARSET = frozenset(string.printable + "".join(chr(c) for c in range(0xA0, 0x100)))
TEXT_MAX = 4096
MINIWOB_VIEWPORT = (500, 320)


def _text(value: str) -> str:
    return "".join(c if c in CHARSET else "?" for c in value)[:TEXT_MAX]


def _info(full: dict[str, Any]) -> dict[str, Any]:
    """The plain, comparable part of ``WebEnv``'s info (its records stay in ``last_info``)."""
    result = full.get("result")
    info: dict[str, Any] = {k: full.get(k) for k in ("outcome", "error", "reference_match", "task") if k in full}
    if "truncated_by" in full:
        info["truncated_by"], info["failure"] = full["truncated_by"], full.get("failure")
    if result is not None:
        info["stop_reason"], info["success"] = result.stop_reason, result.success
    return info


def _pixel(point: Any) -> tuple[float, float] | None:
    """A caller's point (a pair, a numpy array) as two floats."""
    if point is None:
        return None
    x, y = (float(v) for v in np.asarray(point, dtype=np.float64).reshape(2))
    return x, y


def miniwob_config() -> AgentConfig:
    """A config for MiniWoB++ environments: no model endpoint, BrowserGym's viewport."""
    config = AgentConfig()
    config.browser.viewport.width, config.browser.viewport.height = MINIWOB_VIEWPORT
    return config


class AsyncWebGymEnv:
    """The async form: the same spaces and returns as ``WebGymEnv``, awaited on the caller's loop."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        task: str | Mapping[str, Any] | TaskSpec = "miniwob/click-test",
        *,
        config: AgentConfig | None = None,
        agent: Agent | None = None,
        reward: RewardMode | None = None,
        idle_timeout_s: float | None = None,
    ) -> None:
        """``task``: a benchmark task's name, a web task (``{"url", "goal", "reference"?}``) or a
        ``TaskSpec`` (run with its options and ``browser`` block, as everywhere: ``TaskSpec.run_spec``),
        changed per episode with ``reset(options={"task": ...})``; ``reward``: default ``task`` for
        benchmark tasks, else ``validator``."""
        self.task = task
        if isinstance(task, TaskSpec):
            benchmark = task.benchmark is not None
        else:
            benchmark = isinstance(task, str) or "task" in task
        if config is None and agent is None:
            config = miniwob_config() if benchmark else AgentConfig()
        self.reward: RewardMode = reward or ("task" if benchmark else "validator")
        self.env = WebEnv(config, agent=agent, reward=self.reward, idle_timeout_s=idle_timeout_s)
        cfg = self.env.agent.config
        frame = frame_for(cfg.browser.viewport.width, cfg.browser.viewport.height, cfg.localizer.resize_rule())
        self.shape = (frame.image_height, frame.image_width, 3)
        text = spaces.Text(TEXT_MAX, min_length=0, charset=CHARSET)
        self.observation_space = spaces.Dict(
            {"screenshot": spaces.Box(0, 255, self.shape, np.uint8), "url": text, "goal": text}
        )
        high = np.array([frame.image_width - 1, frame.image_height - 1], dtype=np.float32)
        self.action_space = spaces.Dict(
            {
                "kind": spaces.Discrete(len(KINDS)),
                "point": spaces.Box(np.zeros(2, dtype=np.float32), high, dtype=np.float32),
                "text": spaces.Text(256, min_length=0, charset=string.ascii_letters + string.digits + " "),
            }
        )
        #: The last ``Observation`` (the policy messages included) and the last step's full ``WebEnv`` info.
        self.last: Observation | None = None
        self.last_info: dict[str, Any] = {}

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        task = (options or {}).get("task", self.task)
        page_seed = seed if seed is not None else int(np.random.default_rng().integers(0, 1_000_000))
        obs, info = await self.env.reset(task, seed=page_seed, output_dir=(options or {}).get("output_dir"))
        self.last = obs
        return self._obs(obs), info

    async def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        reply, point, to_point = self._action(action)
        obs, reward, terminated, truncated, full = await self.env.step(reply, point=point, to_point=to_point)
        self.last, self.last_info = obs, full
        return self._obs(obs), float(reward), terminated, truncated, _info(full)

    async def close(self) -> None:
        await self.env.aclose()

    def render(self) -> Any:
        return None if self.last is None else self._pixels(self.last)

    def _action(self, action: Any) -> tuple[Action, tuple[float, float] | None, tuple[float, float] | None]:
        if isinstance(action, Mapping) and "kind" in action:
            kind = KINDS[int(action["kind"])] if not isinstance(action["kind"], str) else str(action["kind"])
            x, y = (float(v) for v in np.asarray(action.get("point", (0, 0)), dtype=np.float64).reshape(2))
            text = str(action.get("text", ""))
            match kind:
                case "click":
                    return {"action": "click_element", "element": "the point given"}, (x, y), None
                case "type":
                    return {"action": "write_element", "element": "the point given", "content": text}, (x, y), None
                case "press":
                    return {"action": "press_key", "key": text or "Enter"}, None, None
                case "scroll":
                    direction = text if text in ("up", "down", "left", "right") else "down"
                    return {"action": "scroll", "direction": direction}, None, None
                case "answer":
                    return {"action": "answer", "content": text}, None, None
            raise ValueError(f"unknown action kind {kind!r} (one of {', '.join(KINDS)})")
        if isinstance(action, Mapping) and "reply" in action:
            return action["reply"], _pixel(action.get("point")), _pixel(action.get("to_point"))
        return action, None, None

    def _pixels(self, obs: Observation) -> Any:
        image = Image.open(io.BytesIO(obs.screenshot.data())).convert("RGB")
        if image.size != (self.shape[1], self.shape[0]):
            image = image.resize((self.shape[1], self.shape[0]))
        return np.asarray(image, dtype=np.uint8)

    def _obs(self, obs: Observation) -> dict[str, Any]:
        return {"screenshot": self._pixels(obs), "url": _text(obs.url), "goal": _text(obs.goal)}


class _LoopThread:
    """An event loop running on a daemon thread of its own; ``run`` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="webagent-gym", daemon=True)
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
        self.loop.close()


class GymRuntime:
    """One browser pool for many sync environments: an ``Agent`` on an event loop of its own thread.

        with GymRuntime() as shared:                          # MiniWoB++'s config, reward "task"
            envs = [gym.make(env_id, runtime=shared) for env_id in ids]
            ...                                               # one Chromium, a context per episode
            for env in envs:
                env.close()

    Without it each ``WebGymEnv`` launches its own browser. Its environments may be stepped from any
    threads (``SyncVectorEnv``'s, a thread pool's); closing one leaves the runtime running, and
    ``close`` ends the agent. A copy is the runtime itself: gymnasium deep-copies an environment
    spec's arguments (``env.spec.make()``), and the copy must share the browser, not clone it."""

    def __init__(self, config: AgentConfig | None = None, *, reward: RewardMode = "task") -> None:
        self.reward: RewardMode = reward
        self.agent = shared_agent(config or miniwob_config(), reward=reward)
        self._thread = _LoopThread()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the runtime's loop and wait for its result."""
        return self._thread.run(work)

    def close(self) -> None:
        if not self._thread.loop.is_closed():
            self.run(self.agent.aclose())
            self._thread.stop()

    def __enter__(self) -> GymRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __copy__(self) -> GymRuntime:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> GymRuntime:
        return self


class WebGymEnv(gymnasium.Env[dict[str, Any], Any]):
    """The sync form, a ``gymnasium.Env`` (see the module docstring)."""

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012  (gymnasium.Env declares it so)

    def __init__(
        self,
        task: str | Mapping[str, Any] | TaskSpec = "miniwob/click-test",
        *,
        config: AgentConfig | None = None,
        reward: RewardMode | None = None,
        idle_timeout_s: float | None = None,
        render_mode: str | None = None,
        runtime: GymRuntime | None = None,
    ) -> None:
        """``runtime``: a ``GymRuntime`` whose browser pool this environment shares (its config then,
        not ``config``); without, the environment has a browser of its own."""
        if runtime is not None and config is not None:
            raise ConfigError("WebGymEnv takes a config or a shared runtime (whose config it uses), not both")
        self.render_mode = render_mode
        self._runtime = runtime
        self._own = _LoopThread() if runtime is None else None
        agent = runtime.agent if runtime is not None else None
        self.inner = AsyncWebGymEnv(task, config=config, agent=agent, reward=reward, idle_timeout_s=idle_timeout_s)
        self.observation_space = self.inner.observation_space
        self.action_space = self.inner.action_space
        self._closed = False

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        runner = self._runtime if self._runtime is not None else self._own
        assert runner is not None
        return runner.run(work)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        # No seed: the page's seed is drawn from np_random (seeded by the last reset(seed=...)).
        page_seed = seed if seed is not None else int(self.np_random.integers(0, 1_000_000))
        return self._run(self.inner.reset(seed=page_seed, options=options))

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return self._run(self.inner.step(action))

    def render(self) -> Any:
        return self.inner.render()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._run(self.inner.close())  # the episode's context; a shared runtime's agent stays
        if self._own is not None:
            self._own.stop()


def register_envs() -> None:
    """Register ``webagent/MiniWoB-v0`` and ``webagent/miniwob.<task>-v0`` for each MiniWoB++ task."""
    entry = f"{__name__}:WebGymEnv"
    if "webagent/MiniWoB-v0" not in gymnasium.registry:
        gymnasium.register("webagent/MiniWoB-v0", entry_point=entry, kwargs={"task": "miniwob/click-test"})
    for name in MiniWoBTasks().names():
        env_id = f"webagent/miniwob.{name}-v0"
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=entry, kwargs={"task": f"miniwob/{name}"})


register_envs()
