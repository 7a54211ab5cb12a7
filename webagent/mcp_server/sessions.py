"""The browser sessions ``webagent mcp`` keeps between tool calls: a page each, driven by a ``Pilot``.

A session is a context of its own on the agent's pooled Chromium, opened on a URL under the same
navigation policy as a run starting there. At most ``limit`` are open at once; each closes on
``close_session`` and all of them when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from ..agent import Agent
from ..budget import Budget
from ..errors import SessionError
from ..pilot import Pilot
from ..urls import normalize_url

__all__ = ["KeptSession", "SessionStore"]

log = structlog.get_logger("webagent.mcp")


@dataclass
class KeptSession:
    """One open session: its id, its pilot (and page), what closes it."""

    id: str
    pilot: Pilot
    stack: contextlib.AsyncExitStack = field(repr=False)


class SessionStore:
    """The open sessions of one server, bounded by ``limit``."""

    def __init__(
        self, agent: Agent, *, limit: int, output_dir: Path | None = None, budgets: Sequence[Budget] = ()
    ) -> None:
        self.agent = agent
        self.limit = limit
        self.output_dir = output_dir
        self.budgets = list(budgets)
        self._open: dict[str, KeptSession] = {}
        self._opening = 0
        self._lock = asyncio.Lock()

    @property
    def ids(self) -> list[str]:
        return list(self._open)

    async def open(self, url: str) -> KeptSession:
        """A new session on ``url`` (SessionError past the limit; InputError or NavigationError when
        the URL is invalid, refused by the navigation policy or cannot be opened)."""
        url = normalize_url(url)
        async with self._lock:
            if len(self._open) + self._opening >= self.limit:
                raise SessionError(
                    f"this server keeps at most {self.limit} open session(s) and they are all in use: close one "
                    f"with close_session (open: {', '.join(self._open) or 'none yet'}) or start the server with "
                    "a larger --max-sessions"
                )
            self._opening += 1
        stack = contextlib.AsyncExitStack()
        try:
            policy = self.agent.navigation_policy(url)
            session = await stack.enter_async_context(self.agent.browsers.session(block_service_workers=policy.active))
            session_id = uuid.uuid4().hex[:8]
            run_dir = self.output_dir / f"session-{session_id}" if self.output_dir is not None else None
            pilot = self.agent.pilot(session.page, output_dir=run_dir, budgets=self.budgets)
            await pilot.goto(url)
        except BaseException:
            await stack.aclose()
            raise
        finally:
            self._opening -= 1
        kept = self._open[session_id] = KeptSession(session_id, pilot, stack)
        log.info("mcp_session_opened", session=session_id, url=url)
        return kept

    def get(self, session_id: str) -> KeptSession:
        """The open session ``session_id`` (SessionError when there is none)."""
        kept = self._open.get(session_id.strip())
        if kept is None:
            known = ", ".join(self._open) or "none is open"
            raise SessionError(f"no open session has the id {session_id!r} ({known}); open one with open_session")
        return kept

    async def close(self, session_id: str) -> None:
        """Close one session (SessionError when it is not open)."""
        kept = self.get(session_id)
        del self._open[kept.id]
        await kept.stack.aclose()
        log.info("mcp_session_closed", session=kept.id)

    async def close_all(self) -> None:
        """Close every session (when the server stops)."""
        while self._open:
            session_id, kept = self._open.popitem()
            try:
                await kept.stack.aclose()
            except Exception as exc:  # one session that fails to close must not keep the others open
                log.warning("mcp_session_close_failed", session=session_id, error=str(exc))
