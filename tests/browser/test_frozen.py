"""A browser that stops answering altogether (its main process SIGSTOP'd: alive and connected, frozen).

A command of the session passes its deadline; a probe over the browser's direct connection (a
browser-level command no page takes part in) gets no answer either: the run ends at once with an
infrastructure error, rather than retaking the screenshot and reopening the page on a browser that
answers nothing, the browser is killed (its other sessions end at once) and the pool retires it. A browser that is only slow answers the probe.
Only the Chromium this test launched is signalled (found by a switch of its own on its command line).
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from webagent.browser.pool import BrowserPool
from webagent.browser.state import PROBE_S
from webagent.config import PROFILES, BrowserConfig
from webagent.errors import ActionError, BrowserTimeoutError
from webagent.images import frame_for
from webagent.testing.sites import SiteServer

from ..procs import alive, descendants

pytestmark = pytest.mark.browser

FRAME = frame_for(1280, 800, PROFILES["holo1.5"])


def chromium_main(marker: str) -> int:
    """The main process of the Chromium launched with ``marker`` (not its renderers and helpers)."""
    for pid in descendants(os.getpid()):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in args and not any(a.startswith(b"--type=") for a in args):
            return pid
    raise AssertionError(f"no Chromium launched with {marker}")


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGCONT)


def marked(**deadlines: float) -> tuple[BrowserConfig, str]:
    marker = f"--webagent-test-frozen={uuid.uuid4().hex}"  # Chromium ignores switches it does not know
    return BrowserConfig(args=[marker], **deadlines), marker


async def test_a_frozen_browser_ends_the_run_at_once_and_is_retired(site: SiteServer) -> None:
    config, marker = marked(command_timeout_s=2.0, capture_timeout_s=2.0)
    pool = BrowserPool(config)
    try:
        async with pool.session() as session:
            await session.goto(site.url + "/catalog/", start=True)
            await session.screenshot(FRAME)
            main = chromium_main(marker)
            with frozen(main):
                with pytest.raises(BrowserTimeoutError, match=r"the browser answers nothing: no screenshot") as caught:
                    async with asyncio.timeout(60):  # a missing deadline fails here instead of hanging the suite
                        await session.screenshot(FRAME)
                assert caught.value.infrastructure and session.browser_stuck
                assert session.pages_replaced == 0  # no page-level recovery on a browser that answers nothing
                assert f"within {PROBE_S:g} s" in str(caught.value)
                # Killed (it is ours): whatever else waits on it ends at once, not on its own deadlines.
                for _ in range(200):  # 10 s at most
                    if not alive(main):
                        break
                    await asyncio.sleep(0.05)
                assert not alive(main)
        assert pool.stuck == 1 and pool.crashes == 0 and pool.browsers == 0  # retired, not a crash
    finally:
        await pool.aclose()


async def test_an_action_on_a_frozen_browser_ends_the_run_too(site: SiteServer) -> None:
    config, marker = marked(command_timeout_s=2.0)
    pool = BrowserPool(config)
    try:
        async with pool.session() as session:
            await session.goto(site.url + "/catalog/", start=True)
            await session.screenshot(FRAME)
            with frozen(chromium_main(marker)), pytest.raises(BrowserTimeoutError, match="the action got no answer"):
                async with asyncio.timeout(60):
                    await session.press("Tab")
    finally:
        await pool.aclose()


async def test_a_browser_that_answers_the_probe_gets_the_page_level_recovery(site: SiteServer) -> None:
    """A page whose main thread never returns: the click is an ActionError (the policy is told), not
    the browser's failure, since the browser answers the probe."""
    config, _ = marked(command_timeout_s=2.0)
    pool = BrowserPool(config)
    try:
        async with pool.session() as session:
            await session.page.set_content(
                "<!doctype html><button style='position:absolute;left:0;top:0;width:400px;height:100px'"
                " onclick='for(;;){}'>spin</button>"
            )
            await session.screenshot(FRAME)
            with pytest.raises(ActionError, match="did not respond within"):
                async with asyncio.timeout(60):
                    await session.click(200, 50)
            assert not session.browser_stuck
        assert pool.stuck == 0
    finally:
        await pool.aclose()
