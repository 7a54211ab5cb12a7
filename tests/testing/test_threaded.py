"""The loop thread under the local test servers: start, serve, fail to start, stop."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from aiohttp import web

from webagent.testing.threaded import LoopThread, serve_app


async def hello(request: web.Request) -> web.Response:
    return web.Response(text=f"hello from {threading.current_thread().name}")


def test_an_app_is_served_from_its_own_thread_until_stopped() -> None:
    thread = LoopThread("test-site")
    runners: list[web.AppRunner] = []

    async def start() -> int:
        app = web.Application()
        app.router.add_get("/", hello)
        runner, port = await serve_app(app)
        runners.append(runner)
        return port

    port = thread.start(start)
    assert thread.running
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as reply:
        assert reply.read() == b"hello from test-site"

    thread.stop(runners[0].cleanup)
    assert not thread.running
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
    thread.stop()  # a second stop does nothing


def test_a_failed_start_is_raised_by_start() -> None:
    thread = LoopThread("broken-site")

    async def start() -> None:
        raise OSError("address already in use")

    with pytest.raises(OSError, match="address already in use"):
        thread.start(start)
    assert not thread.running


def test_a_failing_clean_up_still_stops_the_thread() -> None:
    thread = LoopThread("site-with-a-bad-clean-up")

    async def start() -> threading.Thread:
        return threading.current_thread()

    async def cleanup() -> None:
        raise RuntimeError("clean-up failed")

    served_by = thread.start(start)
    with pytest.raises(RuntimeError, match="clean-up failed"):
        thread.stop(cleanup)
    served_by.join(timeout=10)
    assert not served_by.is_alive()
