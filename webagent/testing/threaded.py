"""Local servers that synchronous code starts with ``with``: an event loop of their own in a daemon
thread (``LoopThread``), and an ``aiohttp.web`` application served on it (``serve_app``). The team
site, the OTLP receiver and the logging proxy start and stop this way."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web

__all__ = ["LoopThread", "serve_app"]

T = TypeVar("T")

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class LoopThread:
    """An event loop in a daemon thread: ``start`` runs a set-up there and then the loop until ``stop``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self, setup: Callable[[], Awaitable[T]]) -> T:
        """Run ``setup()`` on the thread's loop and return its result once it is done (its exception
        is raised here); the loop then runs until ``stop``."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        results: list[T] = []
        failures: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                results.append(loop.run_until_complete(setup()))
            except BaseException as exc:  # raised in start()
                failures.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=serve, name=self.name, daemon=True)
        thread.start()
        if not ready.wait(timeout=START_TIMEOUT_S):
            raise RuntimeError(f"{self.name} did not start within {START_TIMEOUT_S:g} s")
        if failures:
            raise failures[0]
        self._loop, self._thread = loop, thread
        return results[0]

    def stop(self, cleanup: Callable[[], Coroutine[Any, Any, object]] | None = None) -> None:
        """Run ``cleanup()`` on the loop (bounded), then stop the loop and join the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        try:
            if cleanup is not None:
                asyncio.run_coroutine_threadsafe(cleanup(), loop).result(timeout=STOP_TIMEOUT_S)
        finally:  # a clean-up that failed or ran past its deadline still stops the loop
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=STOP_TIMEOUT_S)


async def serve_app(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0: a free port); its runner (``cleanup()`` stops it) and port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, int(runner.addresses[0][1])
