"""verifiers: ``vf.load_environment("webagent", tasks=[...], ...)``, a multi-turn environment over ``WebEnv``.

verifiers loads an environment by importing the module its id names and calling its
``load_environment``: ``webagent.load_environment`` (the package's) builds ``WebagentVfEnv``, a
``vf.MultiTurnEnv`` (the interface prime-rl and ``vf-eval`` drive). A rollout is one episode:
its first prompt is the observation's policy messages (system, then the task with its screenshot,
multimodal content parts), each model reply is ``WebEnv.step``'s action, and the environment
answers with the next turn (the new screenshot, what the action did). The rubric is the
environment's reward (the validator's, the reference answers', or a benchmark page's).

Infrastructure failures follow verifiers' convention for a rollout the environment could not run:
``vf.InfraError`` is raised (from the start, or from a step that ended truncated with
``info["failure"]``), verifiers keeps it in ``state["error"]`` and ends the rollout on its
``has_error`` stop condition, and the rubric gives no reward for it (``env_reward`` is 0 and the
``webagent_failed`` metric is 1): trainers drop errored rollouts (prime-rl masks them).

Installing: verifiers 0.3 (``pip install 'webagent[rl]'``); it pins mcp<2, so not beside the mcp extra.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from ..agent import Agent
from ..config import AgentConfig, load_config
from ..errors import ConfigError, WebAgentError
from .core import RewardMode, WebEnv, shared_agent

try:
    import verifiers as vf
    from datasets import Dataset
except ImportError as exc:  # pragma: no cover - the rl extra
    raise ConfigError("the verifiers environment needs verifiers: pip install 'webagent[rl]'") from exc

__all__ = ["WebagentVfEnv", "load_environment"]

log = structlog.get_logger("webagent.env")

#: State keys the environment keeps (plain values: verifiers may save them with the results).
REWARD, FAILURE, RESULT = "webagent_reward", "webagent_failure", "webagent_result"


def _task_rows(tasks: Sequence[str | Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for n, task in enumerate(tasks):
        spec = {"task": task} if isinstance(task, str) else dict(task)
        name = str(spec.get("task") or spec.get("id") or f"task-{n}")
        goal = spec.get("goal") or f"the benchmark task {name}"
        rows.append(
            {
                "prompt": [{"role": "user", "content": str(goal)}],  # replaced by the first observation
                "answer": "",
                "info": {"webagent_task": json.dumps(spec)},
            }
        )
    if not rows:
        raise ConfigError("the webagent environment needs tasks (tasks=['miniwob/click-button', ...])")
    return rows


class WebagentVfEnv(vf.MultiTurnEnv):
    """A verifiers multi-turn environment whose turns are WebEnv's observations (see the module docstring)."""

    def __init__(
        self,
        tasks: Sequence[str | Mapping[str, Any]],
        *,
        config: AgentConfig,
        reward: RewardMode,
        max_turns: int,
        idle_timeout_s: float | None = 600.0,
        **kwargs: Any,
    ) -> None:
        rows = _task_rows(tasks)
        rubric = vf.Rubric(funcs=[self.env_reward], weights=[1.0])
        rubric.add_metric(self.webagent_failed)
        super().__init__(
            dataset=Dataset.from_list(rows),
            eval_dataset=Dataset.from_list(rows),
            rubric=rubric,
            max_turns=max_turns,
            message_type="chat",
            **kwargs,
        )
        self.config, self.reward_mode, self.idle_timeout_s = config, reward, idle_timeout_s
        self._agent: Agent | None = None
        self._envs: dict[str, WebEnv] = {}  # by trajectory id (the state is for plain values)

    def agent(self) -> Agent:
        if self._agent is None:  # on the loop the rollouts run on
            self._agent = shared_agent(self.config, reward=self.reward_mode)
        return self._agent

    async def setup_state(self, state: Any) -> Any:
        info = state.get("info") or {}
        spec = json.loads(info["webagent_task"]) if "webagent_task" in info else {}
        task = spec  # a task as WebEnv.reset takes one: its options and browser block kept
        env = WebEnv(agent=self.agent(), reward=self.reward_mode, idle_timeout_s=self.idle_timeout_s)
        self._envs[state["trajectory_id"]] = env
        state[REWARD], state[FAILURE], state[RESULT] = 0.0, None, None
        try:
            obs, _ = await env.reset(task, seed=spec.get("seed"))
        except WebAgentError as exc:
            state[FAILURE] = str(exc)
            raise vf.InfraError(f"webagent could not start the task: {exc}") from exc
        state["prompt"] = [dict(m) for m in obs.messages]
        return state

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        env = self._envs[state["trajectory_id"]]
        reply = _reply_text(messages[-1]) if messages else ""
        obs, reward, terminated, truncated, info = await env.step(reply)
        if info.get("failure"):
            state[FAILURE] = info["failure"]
            raise vf.InfraError(f"the environment failed ({info['truncated_by']}): {info['failure']}")
        if terminated or truncated:
            result = info["result"]
            state[REWARD], state[RESULT] = reward, result.stop_reason
            ended = [{"role": "user", "content": f"The episode ended: {result.message} (reward {reward:g})."}]
            state["final_env_response"] = ended
            return ended
        return [dict(obs.messages[-1])]

    @vf.cleanup
    async def close_webagent_env(self, state: Any) -> None:
        env = self._envs.pop(state.get("trajectory_id", ""), None)
        if env is not None:
            await env.aclose()

    @vf.teardown
    async def close_agent(self) -> None:
        if self._agent is not None:
            await self._agent.aclose()
            self._agent = None

    async def env_reward(self, state: Any, **kwargs: Any) -> float:
        """The environment's reward; none for a rollout the environment failed."""
        return 0.0 if state.get(FAILURE) else float(state.get(REWARD) or 0.0)

    async def webagent_failed(self, state: Any, **kwargs: Any) -> float:
        return 1.0 if state.get(FAILURE) else 0.0


def _reply_text(message: Any) -> str:
    content = message.get("content") if isinstance(message, Mapping) else getattr(message, "content", "")
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, Mapping) else getattr(p, "text", "") or "" for p in content]
        return "".join(parts)
    return str(content or "")


def load_environment(
    tasks: Sequence[str | Mapping[str, Any]] = ("miniwob/click-test",),
    *,
    config: str | Mapping[str, Any] | None = None,
    reward: RewardMode | None = None,
    max_turns: int = 30,
    idle_timeout_s: float | None = 600.0,
    **kwargs: Any,
) -> WebagentVfEnv:
    """The webagent environment for verifiers.

    ``tasks``: benchmark task names (``miniwob/click-button``), ``{"task": name, "seed": n}``, or web
    tasks ``{"url", "goal", "reference"?}``; ``config``: a TOML file's path or a dict of dotted
    overrides (``{"localizer.base_url": ...}``: the localizer locates the policy's element actions, the
    validator judges web tasks' answers); ``reward``: default ``task`` when every task is a benchmark
    task, else ``validator``.
    """
    if isinstance(config, str):
        agent_config = load_config(Path(config))
    else:
        agent_config = load_config(None, overrides=dict(config or {}))
    benchmark = all(isinstance(t, str) or "task" in t for t in tasks)
    mode: RewardMode = reward or ("task" if benchmark else "validator")
    return WebagentVfEnv(
        list(tasks), config=agent_config, reward=mode, max_turns=max_turns, idle_timeout_s=idle_timeout_s, **kwargs
    )
