"""A node's browser (``batch/nodebrowser.py``) relaunched after its Chromium died counts as back only
once it answers on its DevTools port: Chromium started while the port is taken runs without it,
which is a failed launch (tried again), not a restart the node's actors could not reach. So is a
lost actor's replacement on its port: held a moment, or by a browser still answering there."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import urllib.request

import pytest

from webagent.batch import nodebrowser
from webagent.batch.nodebrowser import NodeBrowser
from webagent.batch.worker import config_payload
from webagent.config import AgentConfig

from ..procs import chromium_mains

pytestmark = pytest.mark.browser


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/version", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


async def test_a_relaunch_counts_only_once_the_port_answers() -> None:
    node = NodeBrowser(config_payload(AgentConfig()), hardened=False)
    endpoint, error = await node.start()
    try:
        assert error is None and endpoint == f"http://127.0.0.1:{node.port}"
        assert await asyncio.to_thread(_answers, node.port)
        (chromium,) = chromium_mains(os.getpid())
        taken = socket.socket()
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        os.kill(chromium, signal.SIGKILL)
        for _ in range(100):  # the port is free once the dead Chromium's socket is closed
            try:
                taken.bind(("127.0.0.1", node.port))
                break
            except OSError:
                await asyncio.sleep(0.01)
        taken.listen()  # holds the port (answers nothing) across the first relaunches
        await asyncio.sleep(2.5 + 1.0)
        assert node.restarts == 0  # Chromium came up without its port: not a restart
        taken.close()
        for _ in range(300):
            if node.restarts:
                break
            await asyncio.sleep(0.1)
        assert node.restarts == 1
        assert await asyncio.to_thread(_answers, node.port)  # the actors reach it again
    finally:
        await node.aclose()


async def test_a_replacement_launches_on_the_lost_actors_port_once_it_is_free() -> None:
    """A node's browser actor started in a lost one's place (``port``): its port, still held a
    moment, is tried again until free, and the browser answers there."""
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    node = NodeBrowser(config_payload(AgentConfig()), hardened=False, port=port)
    starting = asyncio.create_task(node.start())
    try:
        await asyncio.sleep(2.5)
        assert not starting.done()  # held: tried again, not given up nor started without its port
        taken.close()
        endpoint, error = await asyncio.wait_for(starting, 60)
        assert error is None and endpoint == f"http://127.0.0.1:{port}"
        assert await asyncio.to_thread(_answers, port)
    finally:
        taken.close()
        await node.aclose()


async def test_a_browser_answering_on_the_port_is_not_taken_for_the_replacements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A browser already on the port (the lost actor's Chromium left running) answers there: the
    replacement does not count it as its own launch."""
    monkeypatch.setattr(nodebrowser, "RELAUNCHES", 2)
    first = NodeBrowser(config_payload(AgentConfig()), hardened=False)
    assert (await first.start())[1] is None
    second = NodeBrowser(config_payload(AgentConfig()), hardened=False, port=first.port)
    try:
        endpoint, error = await second.start()
        assert endpoint is None and f"127.0.0.1:{first.port} is taken" in str(error)
        assert len(chromium_mains(os.getpid())) == 1  # the first's only
    finally:
        await second.aclose()
        await first.aclose()
