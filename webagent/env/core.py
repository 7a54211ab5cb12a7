"""The environment core under every adapter: ``WebEnv``, the agent's loop with the policy left to the caller.

    env = WebEnv(config)                                   # or WebEnv(agent=shared_agent(config))
    obs, info = await env.reset(task)                      # a fresh browser context, the first observation
    obs, reward, terminated, truncated, info = await env.step(action)

``step`` runs the same code as ``Agent`` (``webagent.loop.Episode``): the localizer turns an element
description into a point (or the caller passes ``point=(x, y)`` in screenshot pixels), the action
is carried out, and the reward comes from the validator model, the task's reference answers, both,
or the task itself (a benchmark page such as MiniWoB++: ``webagent.tasks.benchmarks``).

An episode ends ``terminated`` when it reached a verdict: an answer accepted, the last answer
allowed judged, or the task's page saying it is over. It ends ``truncated`` otherwise: out of
steps or time (``info["truncated_by"]`` is ``max_steps`` / ``max_time``), or because the
environment could not run it to a verdict: a browser that died or stopped answering, a localizer
or validator server that stayed down (``error``), a spent budget (``budget``), a session closed
for idling or abandoned (``session``). Those carry ``info["failure"]``, the cause in words: an
infrastructure failure is never a reward, and the 0.0 returned with it means nothing.

Each episode holds its browser context through a ``SessionLease`` (``webagent.env.lease``): closed
when the episode ends, when the environment is dropped, or after ``idle_timeout_s`` without a call.

Who a task comes from decides what its episode may reach (``webagent.runtime.access``): the
operator's (the library's caller: ``tasks_from="operator"``) keeps a run's trust (a local start
opens the local network, a ``file:`` start files); a remote client's (``tasks_from="client"``, the
OpenEnv server's sessions) is an http(s) start URL, private addresses only when the operator
allowed them; a task file's (``"file"``) reaches its own ``host:port`` only. A benchmark task runs
on its task set's server as that one ``host:port``, whoever asked, never with ``file:``.

A seeded episode runs on the page's controlled clock (``webagent.env.clock``): the same seed gives
the same first observation, and the same actions the same episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from ..agent import Agent
from ..browser.session import BrowserSession
from ..budget import Budget
from ..config import AgentConfig
from ..errors import BrowserError, ConfigError, InputError, LocalizationError, NavigationError
from ..files.downloads import FOLDER_NAME, DownloadFolder
from ..loop import Placed
from ..model.parsing import ReplyParseError
from ..record import Recorder, run_recorder
from ..records import DownloadedFile, RunResult, ToolCall
from ..roles.contract import Decision
from ..runtime import RunSpec
from ..tasks import BenchmarkTask, TaskSpec
from .clock import PageClock
from .inputs import Action, TaskInput, TaskSource, places_of, read_policy
from .lease import SessionLease, lease_keeper
from .rewards import RewardMode, outcome, reference_match, required_roles
from .running import Observation, Running, SessionBox, StepResult
from .start import episode_start

__all__ = ["Observation", "RewardMode", "StepResult", "TaskSource", "WebEnv", "required_roles", "shared_agent"]

log = structlog.get_logger("webagent.env")


#: How many times a reset sets its episode up again after the browser failed under the set-up (a
#: renderer that crashed, a context closed, a command past its deadline), each on a fresh context.
SETUP_RERUNS = 2


def shared_agent(config: AgentConfig, *, reward: RewardMode = "validator") -> Agent:
    """An Agent whose browser pool and model endpoints many environments share."""
    return Agent(config, require=required_roles(reward))


class WebEnv:
    """One episode at a time, stepped by an external policy (see the module docstring)."""

    def __init__(
        self,
        config: AgentConfig | None = None,
        *,
        agent: Agent | None = None,
        reward: RewardMode = "validator",
        idle_timeout_s: float | None = None,
        tasks_from: TaskSource = "operator",
        budgets: Sequence[Budget] = (),
    ) -> None:
        """``agent``: a shared agent (many environments, one browser pool); ``idle_timeout_s``: close the
        episode's browser context when no call came for that long (None: only when the episode ends
        or the environment is dropped); ``tasks_from``: who its tasks come from (the module
        docstring); ``budgets``: budgets shared with other environments (a server's), charged with
        every episode's model calls beside the run's own ``[agent] budget_*``."""
        if agent is None:
            if config is None:
                raise ConfigError("WebEnv needs a config or a shared agent")
            agent = shared_agent(config, reward=reward)
            self._owns_agent = True
        else:
            agent.config.require_endpoints(required_roles(reward))
            self._owns_agent = False
        if idle_timeout_s is not None and idle_timeout_s <= 0:
            raise ConfigError("idle_timeout_s must be more than 0 (or None)")
        self.agent = agent
        self.reward_mode: RewardMode = reward
        self.idle_timeout_s = idle_timeout_s
        self.tasks_from: TaskSource = tasks_from
        self.budgets = list(budgets)
        self.task: TaskSpec | BenchmarkTask | None = None
        self.result: RunResult | None = None
        self._run: Running | None = None
        self._last_obs: Observation | None = None  # what a step on a session closed under it returns
        #: What the running episode leaves (``webagent.record``: its files, spans, HAR).
        self._recorder: Recorder | None = None
        self._secrets = self.agent.secrets
        #: Where the episode keeps its pages' downloads (a temporary folder is removed at the next reset or close).
        self._downloads: DownloadFolder | None = None

    @property
    def done(self) -> bool:
        return self._run is None

    @property
    def session(self) -> BrowserSession | None:
        """The running episode's browser session (None between episodes)."""
        return self._run.box.session if self._run is not None else None

    @property
    def observation(self) -> Observation | None:
        """The running episode's current observation (None between episodes)."""
        return self._run.obs if self._run is not None else None

    @property
    def lease(self) -> SessionLease | None:
        return self._run.lease if self._run is not None else None

    # -- reset -------------------------------------------------------------------------------------

    async def reset(
        self,
        task: TaskInput,
        *,
        seed: int | None = None,
        output_dir: str | Path | None = None,
        source: TaskSource | None = None,
    ) -> tuple[Observation, dict[str, Any]]:
        """Start ``task`` in a fresh browser context: ``{"url", "goal", "reference"?}``, a TaskSpec, a
        benchmark task's name (``"miniwob/click-button"``, with ``seed``) or a BenchmarkTask.

        Returns the first observation and ``info`` (``task_id``, ``seed``, ``goal``, ``setup_reruns``).
        A start the environment cannot make raises: the start page does not open (NavigationError),
        or a start URL its source may not open (InputError, NavigationError). The browser failing
        under the set-up (a renderer crash, a context closed, a command past its deadline) is the
        infrastructure's: the episode is set up again on a fresh context, up to ``SETUP_RERUNS``
        times (counted in ``setup_reruns``), then the BrowserCrashError or BrowserTimeoutError
        (``infrastructure``) is raised. With a seed (a benchmark task always has one) the page runs
        on the seeded clock. With ``output_dir`` the run directory is written as by ``Agent``
        (exportable), the pages' downloads in its ``downloads/``; without, they are kept in a
        private temporary folder until the next ``reset`` or ``aclose``. ``source``: who this task
        comes from (default: the environment's ``tasks_from``).
        """
        await self._end_episode("the environment was reset")
        start = await episode_start(
            self.agent.runtime,
            task,
            seed,
            reward=self.reward_mode,
            source=source or self.tasks_from,
            budgets=self.budgets,
        )
        spec, seed = start.task, start.seed
        self.task, self.result = spec, None
        sessions = self.agent.runtime.sessions
        private = sessions.private(start.run.browser)  # its outputs its owner's only (webagent.files.disk)
        #: What the episode redacts: the config's secrets and what the task's session settings hold.
        self._secrets = sessions.secrets(start.run.browser)
        self._forget_downloads()
        where = Path(output_dir) / FOLDER_NAME if output_dir is not None else None
        folder = DownloadFolder(where, private=private) if where is not None else None
        self._downloads = self.agent.runtime.download_folder(folder)
        run = dataclasses.replace(
            start.run, downloads=self._downloads, output_dir=Path(output_dir) if output_dir is not None else None
        )
        rerun = 0
        while True:
            self.result = None
            self._recorder = run_recorder(self.agent.runtime, run)  # its spans begin with each try
            lease = SessionLease(contextlib.AsyncExitStack(), idle_timeout_s=self.idle_timeout_s)
            try:
                async with lease.use():  # not reaped while it starts, however long that takes
                    obs, info = await self._start(spec, run, seed, lease, SessionBox())
            except BrowserError as exc:
                # The browser failed under the set-up (its context is closed): the infrastructure's, never
                # the task's; set up again on a fresh context, then raised (a BrowserCrashError or
                # BrowserTimeoutError, ``infrastructure``), never a reward.
                if not exc.infrastructure or rerun == SETUP_RERUNS:
                    raise
                rerun += 1
                log.warning("episode_setup_failed", task=spec.id, rerun=rerun, error=str(exc))
                continue
            info["setup_reruns"] = rerun
            return obs, info

    async def _start(
        self, spec: TaskSpec | BenchmarkTask, run: RunSpec, seed: int | None, lease: SessionLease, box: SessionBox
    ) -> tuple[Observation, dict[str, Any]]:
        stack = lease.stack
        clock: PageClock | None = None
        try:
            # The same setup as Agent runs: the navigation guard, secrets, the roles, the run's budget.
            assert self._recorder is not None
            opening = self.agent.runtime.open_episode(self._recorder.prepare(run), on_session=box.set)
            episode = await stack.enter_async_context(opening)
            if box.session is not None:
                await self._recorder.start(box.session)
            if seed is not None and box.session is not None:
                clock = PageClock(box.session, seed)
                await clock.install()  # before the start page's first script
            opened = await episode.open()
        except BaseException:
            await lease.close("the episode could not start")
            await self._close_recorder()
            raise
        loop = asyncio.get_running_loop()
        finalizer = weakref.finalize(self, lease.abandon, loop, "the environment was dropped")
        self._run = Running(episode, lease, box, finalizer, clock)
        lease_keeper().adopt(lease)
        if not opened:
            await self._end()
            raise NavigationError(f"the start page did not open: {episode.result and episode.result.message}")
        try:
            if clock is not None:
                await clock.step()  # the page's start-up timers, as after every action
            obs = await self._observe()
        except BrowserError as exc:
            episode.finish(
                "error", "the browser failed while observing the start page", infrastructure=exc.infrastructure
            )
            await self._end()
            raise
        info = {"task_id": spec.id, "seed": seed, "goal": obs.goal}
        return obs, info

    # -- step --------------------------------------------------------------------------------------

    async def step(
        self,
        action: Action,
        *,
        point: tuple[float, float] | None = None,
        to_point: tuple[float, float] | None = None,
    ) -> StepResult:
        """Carry out one action; returns (observation, reward, terminated, truncated, info).

        ``action``: a PolicyReply, the policy's reply text, or its JSON as a dict (a whole reply or
        just ``{"action": ...}``). An unusable action is a failed step (told to the policy), not an
        exception. ``point``: where to click, in pixels of the observation's screenshot, instead of
        asking the localizer (a scroll: the panel the wheel turns over); ``to_point``: where a drag
        is released. They place the reply's first action; with several actions a turn the others
        are placed by the reply's own points or the localizer. ``info``: ``step``, ``outcome``, ``error``, ``verdict``,
        ``reference_match``, ``task`` (a benchmark page's own figures), ``downloads`` (the files its
        pages downloaded and it kept, up to the observation returned: ``DownloadedFile``); when the episode ends
        ``result``, and when truncated ``truncated_by`` and (the environment's failures) ``failure``.
        """
        run = self._run
        if run is None:
            raise InputError("the environment has no running episode: call reset(task) first")
        if run.lease.closed:  # reaped while idle
            reason = run.lease.closed_reason or "the session was closed"
            run.episode.finish("error", reason, infrastructure=True)
            await self._end()
            return self._lost(reason)
        async with run.lease.use():
            return await self._step(run, action, point, to_point)

    async def _step(
        self,
        run: Running,
        action: Action,
        point: tuple[float, float] | None,
        to_point: tuple[float, float] | None,
    ) -> StepResult:
        episode, step, obs = run.episode, run.step, run.obs
        assert step is not None and obs is not None
        episode.resume()  # the time the policy took to decide is not the run's
        contract = episode.roles.policy.contract(episode.grounding == "policy", episode.max_actions)
        raw: str | None = action if isinstance(action, str) else None
        calls: tuple[ToolCall, ...] = ()
        usable: tuple[Decision, list[Placed]] | None = None
        try:  # before the step runs: a ConfigError (no localizer, no point) leaves the step to retry
            decision, raw, calls = read_policy(action, contract, obs.screenshot.frame)
            grounded = episode.grounding == "policy"
            places = places_of(decision, obs.screenshot.frame, point, to_point, grounded, self._has_localizer())
            usable = (decision, places)
        except (ReplyParseError, LocalizationError) as exc:
            error = str(exc)

        async def act() -> None:
            if usable is None:
                episode.unusable_reply(step, error, raw=raw, tool_calls=calls)
            else:
                decision, places = usable
                first = places[0]
                await episode.apply(
                    step,
                    decision.reply,
                    point=first.point,
                    target=first.target,
                    rest=places[1:],
                    raw=raw,
                    tool_calls=calls,
                    dropped=decision.dropped,
                )
            if run.clock is not None and episode.result is None:
                await run.clock.step()  # the page's time of a step, before its task is checked

        await episode.run_step(step, act())
        result = episode.end_step(step)
        if result is None and self._browser_gone(run):
            result = episode.finish("error", "the browser disconnected during the step", infrastructure=True)
        if self._recorder is not None:
            self._recorder.step(step)  # redacted there; the step in info stays the caller's own
        info: dict[str, Any] = {
            "step": step,
            "outcome": step.outcome,
            "error": step.error,
            "verdict": step.verdict,
            "reference_match": reference_match(self.task, step),
            "task": dict(episode.task_state.info) if episode.task_state is not None else None,
            "downloads": self._downloads_kept(run),
        }
        if result is None:
            try:
                observed = await self._observe()
                info["downloads"] = self._downloads_kept(run)  # those its observation told too
                return observed, 0.0, False, False, info
            except BrowserError as exc:
                result = episode.finish(
                    "error", f"the browser failed while observing the page: {exc}", infrastructure=exc.infrastructure
                )
        await self._end()
        info["result"] = self.result or result
        return outcome(obs, result, info, episode.task_state, self.reward_mode)

    def _lost(self, reason: str) -> StepResult:
        """A step on an episode whose session was closed under it (idle, dropped)."""
        last = self._last_obs
        if last is None:
            raise InputError(f"the environment has no running episode: {reason}")
        info = {"truncated_by": "session", "failure": reason, "result": self.result, "step": None}
        return last, 0.0, False, True, info

    def _downloads_kept(self, run: Running) -> list[DownloadedFile]:
        """The files the episode's pages downloaded and its session kept so far (redacted)."""
        session = run.box.session
        return [self._secrets.redact_model(d) for d in session.downloads] if session is not None else []

    def _forget_downloads(self) -> None:
        """Remove the last episode's temporary download folder (a given one is its run directory's)."""
        if self._downloads is not None:
            self._downloads.remove()
        self._downloads = None

    def _browser_gone(self, run: Running) -> bool:
        session = run.box.session
        return session is not None and session.browser_crashed

    def _has_localizer(self) -> bool:
        localizer = self.agent.config.localizer
        return bool(localizer.endpoints() and localizer.model)

    async def _observe(self) -> Observation:
        run = self._run
        assert run is not None
        episode = run.episode
        step = episode.next_step()
        state = await episode.observe(step)
        episode.pause()  # until the policy's action comes back (step)
        run.step = step
        run.obs = self._last_obs = Observation(
            step=step.index,
            url=step.url,
            title=step.title,
            goal=episode.goal,
            screenshot=episode.screenshots[-1],
            events=list(step.events),
            final=step.kind == "final",
            messages=episode.policy_messages(state),
        )
        return run.obs

    # -- ending ------------------------------------------------------------------------------------

    async def _end(self) -> None:
        """The episode has ended: record its result (kept redacted), close its context."""
        run = self._run
        await self._end_episode("the episode ended", run.episode.result if run is not None else None)

    async def _end_episode(self, reason: str, result: RunResult | None = None) -> None:
        run, self._run = self._run, None
        recorder = self._recorder
        if recorder is not None:
            recorded = await recorder.finish(result)  # its files and spans, before the context closes
            if result is not None:
                self.result = recorded
        elif result is not None:
            self.result = self._secrets.redact_model(result)
        if run is not None:
            run.finalizer.detach()
            await run.lease.close(reason)
        await self._close_recorder()

    async def _close_recorder(self) -> None:
        """End the recorder (if it has no result yet: without one), after the context closed (a HAR)."""
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            await recorder.finish(None)
            await recorder.closed()

    async def aclose(self) -> None:
        """End the running episode (if any); close the agent if this environment made it."""
        await self._end_episode("the environment was closed")
        self._forget_downloads()
        if self._owns_agent:
            await self.agent.aclose()

    async def __aenter__(self) -> WebEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
