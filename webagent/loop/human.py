"""The human hand-off: what the policy's ``ask_user`` asks, and who answers it.

A ``HumanHandler`` is an async callable given a ``HumanRequest`` (the question, the page's URL and
title, the goal); it returns the person's answer, or None when nobody will answer (a terminal that
is not interactive, an MCP client that declined). The run waits with its browser open and its
clock paused (the person's time is not the run's), at most ``[agent] ask_user_timeout_s``; then it
goes on with the answer, or ends with stop reason ``needs_human``. Without a handler (a batch, a
suite) an ``ask_user`` ends the run ``needs_human`` at once: a task that needs a person, counted
apart from failures.

The CLI's handler asks on the terminal (``webagent.cli.handoff``), the MCP server's forwards the
question to its client as an elicitation (``webagent.mcp_server.handoff``), a library caller passes
its own (``Agent.run(..., ask_user=...)``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["HumanHandler", "HumanRequest"]


@dataclass(frozen=True, slots=True)
class HumanRequest:
    """What the agent asks a person, and where it stands."""

    question: str
    goal: str
    url: str
    title: str = ""
    step: int = 0


HumanHandler = Callable[[HumanRequest], Awaitable[str | None]]
