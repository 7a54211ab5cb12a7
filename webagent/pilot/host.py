"""What a ``Pilot`` needs from the agent that drives it (``webagent.Agent`` provides all of it).

A Protocol rather than the ``Agent`` class: ``Agent.pilot`` builds pilots, so the pilot must not
import the agent module back.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

from playwright.async_api import Page

from ..budget import Budget
from ..config import AgentConfig, AgentSettings
from ..loop import PageDriver
from ..model.client import ModelClient
from ..records import RunResult
from ..replay import ReplayCache
from ..safety import NavigationPolicy
from ..secrets import Secrets
from ..stream import RunStream

__all__ = ["PilotHost"]


class PilotHost(Protocol):
    """The agent side of a pilot: config, secrets, runs, model clients, page drivers, budgets."""

    config: AgentConfig
    secrets: Secrets

    async def run(self, url: str, goal: str, **kwargs: Any) -> RunResult:
        """A run to its end (``Agent.run``: ``page=``, ``navigate=False``, ``cache=``, ...)."""
        ...

    def stream(
        self,
        url: str,
        goal: str,
        *,
        output_dir: str | Path | None = None,
        page: Page | None = None,
        settings: AgentSettings | None = None,
        cache: ReplayCache | None = None,
        cache_key: str | None = None,
        budgets: list[Budget] | None = None,
        navigate: bool = True,
        policy: NavigationPolicy | None = None,
    ) -> RunStream:
        """A run step by step (``Agent.stream``); its ``session`` says which tab it ended on."""
        ...

    def model_client(self, role: str) -> ModelClient:
        """A client of one role's endpoints (secrets redacted from requests)."""
        ...

    def page_driver(
        self, page: Page, *, guard_url: str | None = None, policy: NavigationPolicy | None = None
    ) -> AbstractAsyncContextManager[PageDriver]:
        """A ``PageDriver`` on ``page`` for a while (with the navigation guard of ``guard_url``, or of
        ``policy`` when given)."""
        ...

    def run_budgets(self, settings: AgentSettings, shared: Sequence[Budget] = ()) -> list[Budget]:
        """The budgets of one run: the config's per-run limits and ``shared``."""
        ...
