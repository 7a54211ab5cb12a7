"""The run's clock: its start, its own time so far, and the hard limit of ``max_time_s``.

The time a policy outside the process takes to decide (``WebEnv`` between an observation and the
next action) is paused out: ``max_time_s`` bounds the agent's own time, not the caller's."""

from __future__ import annotations

import asyncio
import time

__all__ = ["RunClock"]


class RunClock:
    """Started by ``start()``; ``pause()``/``resume()`` leave a stretch out of the run's time."""

    def __init__(self, max_time_s: float) -> None:
        self.max_time_s = max_time_s
        self.started = time.monotonic()
        self.started_at = ""
        self._paused_s = 0.0
        self._paused_at: float | None = None

    def start(self) -> None:
        self.started = time.monotonic()
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.monotonic()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._paused_s += time.monotonic() - self._paused_at
            self._paused_at = None

    def elapsed(self) -> float:
        """The run's own time so far (paused time left out)."""
        now = time.monotonic()
        paused = self._paused_s + (now - self._paused_at if self._paused_at is not None else 0.0)
        return now - self.started - paused

    def wall_s(self) -> float:
        """Wall-clock time since the start (paused time included): the run's ``duration_s``."""
        return time.monotonic() - self.started

    def limit(self) -> asyncio.Timeout:
        """The hard limit of the run: what is left of ``max_time_s`` of its own time."""
        return asyncio.timeout(max(0.0, self.max_time_s - self.elapsed()))
