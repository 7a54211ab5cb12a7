"""A task that rewards itself: a benchmark page (MiniWoB++, BrowserGym-style task sets) that says
when the episode is over and what it earned, read from the page after each step.

The loop knows such a task only through ``TaskHook``: ``start`` runs once the start page is open
(a seed, the task's own start; it may return the goal the page shows), ``check`` after every step.
When a check says ``done`` the run ends (stop reason ``answered``) and its success and reward are
the task's; the validator is not asked. Task sets themselves live in ``webagent.tasks.benchmarks``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .page import PageDriver

__all__ = ["TaskCheck", "TaskHook"]


@dataclass(frozen=True, slots=True)
class TaskCheck:
    """What the task's page says after a step."""

    done: bool
    reward: float = 0.0
    success: bool = False
    message: str = ""
    #: The page's own figures (e.g. MiniWoB's raw and time-scaled rewards, its reason).
    info: dict[str, Any] = field(default_factory=dict)


class TaskHook(Protocol):
    """A task whose page judges itself (see the module docstring)."""

    async def start(self, page: PageDriver) -> str | None:
        """Start the task on its open start page; the goal it shows, or None to keep the given one."""
        ...

    async def check(self, page: PageDriver) -> TaskCheck:
        """Read the task's state from the page (a ``BrowserError`` if the browser cannot say)."""
        ...
