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

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .clock import RunClock

__all__ = ["HumanHandler", "HumanRequest", "ask_person"]


@dataclass(frozen=True, slots=True)
class HumanRequest:
    """What the agent asks a person, and where it stands."""

    question: str
    goal: str
    url: str
    title: str = ""
    step: int = 0


HumanHandler = Callable[[HumanRequest], Awaitable[str | None]]


async def ask_person(
    human: HumanHandler, request: HumanRequest, *, timeout_s: float, clock: RunClock, limit: asyncio.Timeout | None
) -> tuple[str | None, str]:
    """The person's answer to ``request`` (None: none, blank or not within ``timeout_s``) and, without
    one, why. The person's time is not the run's: its ``clock`` and the step's ``limit`` stop meanwhile."""
    deadline = limit.when() if limit is not None else None
    if limit is not None:
        limit.reschedule(None)
    t0 = time.monotonic()
    clock.pause()
    try:
        async with asyncio.timeout(timeout_s):
            answer = await human(request)
    except TimeoutError:
        return None, f"no answer within {timeout_s:g} s"
    finally:
        clock.resume()
        if limit is not None and deadline is not None:
            limit.reschedule(deadline + (time.monotonic() - t0))
    if answer is None or not answer.strip():
        return None, "the person did not answer"
    return answer, ""
