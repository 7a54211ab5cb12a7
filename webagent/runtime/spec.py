"""``RunSpec``: what one run is, handed down to the ``Runtime`` that opens it.

A run spec says what to do (URL, goal, expectation, judge, task), where (a caller's page or
context, or a pooled one), under which limits (loop settings, budgets, navigation policy), with
what in hand (a replay cache, its own browser settings) and what it leaves (its run directory, a
Playwright trace, a HAR, a saved state: ``webagent.record`` picks the run's sinks from these).
The limits are applied once, by ``Runtime.resolve``. Every entry point builds one and passes it down:
``Agent.stream`` and ``Agent.run``, ``Pilot.act``, ``WebEnv.reset``, the batch and suite runners,
the MCP server's tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from playwright.async_api import BrowserContext, Page

from ..budget import Budget
from ..config import AgentSettings, ContextSettings
from ..files.downloads import DownloadFolder
from ..guard.navigation import NavigationPolicy
from ..loop import HumanHandler, Judge, TaskHook
from ..replay import ReplayCache, StepReplay

__all__ = ["RunSpec", "TraceMode"]

#: When a run keeps a Playwright trace (``trace.zip`` in its run directory).
TraceMode = Literal["off", "on-failure", "always"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    """One run: its task, its page, its limits. Fields left at None take the runtime's defaults."""

    url: str
    goal: str
    #: A statement the validator must also confirm about the final state.
    expect: str | None = None
    #: The loop's limits for this run (default: the config's ``[agent]``).
    settings: AgentSettings | None = None
    #: Judges answers instead of the validator (``webagent.env``: reference answers).
    judge: Judge | None = None
    #: A task that rewards itself (a benchmark page): its page ends the run and gives its success.
    task: TaskHook | None = None
    #: The recorded steps to replay while the page matches.
    replay: StepReplay | None = None
    #: The run's budgets (default: the settings' per-run limits, then ``shared_budgets``).
    budgets: Sequence[Budget] | None = None
    #: Budgets shared with other runs (a batch's, a server's), charged after the run's own.
    shared_budgets: Sequence[Budget] = ()
    #: False: start from ``page`` as it is (``url`` being its URL), opening nothing.
    navigate: bool = True
    #: The navigation policy to enforce (default: that of a run starting at ``url``).
    policy: NavigationPolicy | None = None
    #: A caller's page or context to drive (never closed); default: a pooled context.
    page: Page | None = None
    context: BrowserContext | None = None
    #: The run's own context settings over the config's ``[browser]`` (a batch task's, a suite
    #: check's): a signed-in state, a proxy, a locale, a device, ... (a pooled context only).
    browser: ContextSettings | None = None
    #: Who answers the policy's ``ask_user`` (default: the runtime's; none: the run stops ``needs_human``).
    ask_user: HumanHandler | None = None
    #: Save the context's signed-in state there (0600) when the run succeeds (``webagent auth save``).
    save_state: Path | None = None
    #: Where the secrets without hosts of their own may be typed (host rules). None: the config's
    #: ``allowed_domains``, else nowhere; an entry point that speaks for the operator (``Agent.stream``,
    #: ``Pilot.act`` without a policy of their caller's) passes ``Runtime.secret_hosts(url)``.
    secret_hosts: tuple[str, ...] | None = None
    #: Where the run keeps the files its pages download (``RunStream``: its output folder's
    #: ``downloads/``); None: a private temporary folder (``Runtime.download_folder``).
    downloads: DownloadFolder | None = None
    #: Where the run directory is written (trajectory, screenshots, result, report); None: nowhere.
    output_dir: Path | None = None
    #: A replay cache: the recording ``cache_key`` replays while the page matches, and a successful
    #: run that re-planned updates it.
    cache: ReplayCache | None = None
    cache_key: str = ""
    #: Keep a Playwright trace in ``output_dir`` (a context of the run's own, no secrets typed).
    trace: TraceMode = "off"
    #: Write the run's network as ``network.har`` in ``output_dir`` (None: the config's ``[run] har``).
    har: bool | None = None
    #: Where the run's own context records its HAR (set by the recorder's HAR sink, ``webagent.record``).
    har_path: Path | None = None
