"""A browser provider plugin for the tests (registered by ``install_plugin`` under the entry-point
group ``webagent.browser_providers`` of a tiny distribution on ``sys.path``): it starts local
Chromium processes with a remote-debugging port on 127.0.0.1 and lends each as a CDP host. Its
``fault`` option makes it raise or hang, as a broken third-party provider would, or lend a dead
endpoint (``dead``: host-0 is a port nothing listens on)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from webagent.browser.devtools import free_port
from webagent.browser.launcher import CHROMIUM_ARGS, HARDENED_ARGS
from webagent.browser.providers import GROUP, BrowserProvider, Lease

__all__ = ["CHROMIUM", "LoopbackChromiums", "install_plugin", "make"]

#: The Chromium binary itself (Debian's /usr/bin/chromium is a wrapper script that stays its parent).
CHROMIUM = "/usr/lib/chromium/chromium"


class LoopbackChromiums(BrowserProvider):
    """Lends ``hosts`` Chromium processes on loopback ports, ``sessions`` sessions each."""

    name = "loopback"
    eager = True

    def __init__(self, options: Mapping[str, object]) -> None:
        self.count = int(str(options.get("hosts", 2)))
        self.sessions = int(str(options.get("sessions", 4)))
        self.hardened = bool(options.get("hardened", False))
        self.fault = str(options.get("fault", ""))
        self.ports: dict[str, int] = {}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.lent: set[str] = set()
        self._dir = tempfile.TemporaryDirectory(prefix="webagent-fleet-")

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    async def acquire(self, *, timeout_s: float) -> Lease | None:
        if self.fault == "raise":
            raise RuntimeError("the provider's service refused the request")
        if self.fault == "hang":
            await asyncio.sleep(3600)
        free = [f"host-{i}" for i in range(self.count) if f"host-{i}" not in self.lent]
        if not free:
            return None
        name = free[0]
        if self.fault == "dead" and name == "host-0":  # a lease of a port nothing listens on
            self.lent.add(name)
            return Lease(name, f"http://127.0.0.1:{self.ports.setdefault(name, free_port())}", self.sessions)
        await self.start(name, timeout_s=timeout_s)
        self.lent.add(name)
        return Lease(name, f"http://127.0.0.1:{self.ports[name]}", self.sessions, handle=name)

    async def start(self, name: str, *, timeout_s: float = 60.0) -> None:
        """Start (or start again, on the same port) the Chromium of host ``name``."""
        port = self.ports.setdefault(name, free_port())
        profile = Path(self._dir.name) / f"{name}-{time.monotonic_ns()}"
        args = [
            CHROMIUM,
            "--headless",
            *CHROMIUM_ARGS,
            *(HARDENED_ARGS if self.hardened else ()),
            "--enable-automation",
            "--remote-debugging-address=127.0.0.1",
            f"--remote-debugging-port={port}",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        self.processes[name] = await asyncio.to_thread(self._spawn, args, Path(self._dir.name) / f"{name}.log")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"Chromium of {name} did not open port {port} within {timeout_s:g} s")

    @staticmethod
    def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(args, stdout=out, stderr=out, start_new_session=True)

    def kill(self, name: str) -> int:
        """SIGKILL host ``name``'s Chromium (its process group: its helpers too); its PID."""
        proc = self.processes.get(name)
        if proc is None:
            return 0
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return proc.pid

    async def release(self, lease: Lease, *, timeout_s: float) -> None:
        self.lent.discard(lease.name)
        self.kill(lease.name)

    async def aclose(self, *, timeout_s: float) -> None:
        for name in list(self.processes):
            self.kill(name)
        self._cleanup()

    def _cleanup(self) -> None:
        """The profiles removed, and the singleton folders their Chromiums, killed, left in the temp dir."""
        for socket in Path(self._dir.name).glob("*/SingletonSocket"):
            with contextlib.suppress(OSError):
                singleton = socket.readlink().parent  # /tmp/org.chromium.Chromium.XXXXXX: the socket's folder
                if singleton.name.startswith("org.chromium.Chromium.") and singleton.parent == Path(
                    tempfile.gettempdir()
                ):
                    shutil.rmtree(singleton, ignore_errors=True)
        self._dir.cleanup()


def make(options: Mapping[str, object]) -> LoopbackChromiums:
    """The entry point's factory."""
    return LoopbackChromiums(options)


def not_a_provider(options: Mapping[str, object]) -> object:
    """An entry point that makes something else."""
    return object()


@contextlib.contextmanager
def install_plugin(root: Path) -> Iterator[None]:
    """A distribution ``webagent-fleet-test`` in ``root`` on ``sys.path``, whose entry points (group
    ``webagent.browser_providers``) are ``loopback`` (this module's ``make``) and ``not-a-provider``."""
    info = root / "webagent_fleet_test-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: webagent-fleet-test\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{GROUP}]\nloopback = {__name__}:make\nnot-a-provider = {__name__}:not_a_provider\n"
    )
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
