"""The background process: one per user, started on demand by the first command that needs it.

It holds ``daemon.lock`` (``flock``) in the private runtime directory for its whole life, so a
second one started meanwhile leaves at once; holding it, it removes a socket a killed predecessor
left (``kill -9``) and listens on ``daemon.sock`` (0600, in a 0700 directory). A connection from
another user (``SO_PEERCRED``) is closed unread. Each connection carries one request line and gets
one reply line; each read has a deadline. It ends when its last session closes, after
``WEBAGENT_SHELL_IDLE_S`` seconds (default 1800) with no request, or on SIGTERM, closing every
session first.

``python -m webagent.shell.daemon`` starts it in the foreground (the client starts it detached).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import structlog
from pydantic import ValidationError

from ..errors import (
    BrowserCrashError,
    BrowserError,
    BrowserTimeoutError,
    ConfigError,
    InputError,
    NavigationError,
    WebAgentError,
)
from ..guard.secrets import redact_log_event
from .client import reply_timeout
from .commands import Commands
from .paths import lock_path, runtime_dir, socket_path
from .protocol import (
    EXIT_BAD,
    EXIT_NO_BROWSER,
    EXIT_STALE,
    LINE_LIMIT,
    PROTOCOL_VERSION,
    Reply,
    Request,
    ShellError,
)
from .sessions import SessionStore

__all__ = ["Daemon", "main", "peer_uid"]

log = structlog.get_logger("webagent.shell")

#: How long a client has to send its request line once connected.
READ_TIMEOUT_S = 10.0
DEFAULT_IDLE_S = 1800.0


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def error_reply(exc: BaseException) -> Reply:
    """An error as one line and its exit code."""
    match exc:
        case ShellError():
            code, text = exc.code, str(exc)
        case BrowserCrashError():
            code, text = EXIT_NO_BROWSER, f"the browser is gone ({exc}): close the session and start it again"
        case NavigationError() | InputError() | ConfigError():
            code, text = EXIT_BAD, str(exc)
        case BrowserTimeoutError() | TimeoutError():
            code, text = EXIT_STALE, f"the page is frozen: {exc or 'the command did not finish in time'}"
        case BrowserError() if "did not answer" in str(exc):
            code, text = EXIT_STALE, f"the page is frozen: {exc}"
        case WebAgentError():
            code, text = EXIT_BAD, f"{type(exc).__name__}: {exc}"
        case _:
            code, text = EXIT_BAD, f"internal error: {type(exc).__name__}: {exc}"
    first = " ".join(text.split())
    return Reply(code=code, text=first[:2000], data={"error": first[:2000]})


class Daemon:
    """The listening process: its sessions, its socket, its life."""

    def __init__(self, directory: Path, *, idle_s: float = DEFAULT_IDLE_S) -> None:
        self.directory = directory
        self.store = SessionStore(directory)
        self.commands = Commands(self.store)
        self.idle_s = idle_s
        self.last = time.monotonic()
        self.busy = 0
        self.done = asyncio.Event()
        self.had_session = False

    async def serve(self) -> None:
        path = socket_path(self.directory)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a predecessor's, killed: we hold the lock, so nobody listens there
        old = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(self._connection, path=str(path), limit=LINE_LIMIT)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.done.set)
        log.info("shell_daemon_listening", socket=str(path), pid=os.getpid())
        watcher = asyncio.create_task(self._watch_idle())
        try:
            await self.done.wait()
        finally:
            server.close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            try:
                async with asyncio.timeout(60):
                    await self.store.close_all()
            except TimeoutError:
                log.warning("shell_daemon_close_timeout")
            log.info("shell_daemon_stopped")

    async def _watch_idle(self) -> None:
        while not self.done.is_set():
            await asyncio.sleep(min(5.0, max(0.2, self.idle_s / 4)))
            if not self.busy and time.monotonic() - self.last >= self.idle_s:
                log.info("shell_daemon_idle", idle_s=self.idle_s)
                self.done.set()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            if sock is None or peer_uid(sock) != os.getuid():
                log.warning("shell_peer_refused")
                return
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    line = await reader.readline()
            except (TimeoutError, ValueError, ConnectionError):
                return
            reply = await self._answer(line)
            writer.write(reply.model_dump_json().encode() + b"\n")
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(READ_TIMEOUT_S):
                    await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(READ_TIMEOUT_S):
                    await writer.wait_closed()
            if self.had_session and not self.store.sessions and not self.busy:
                self.done.set()  # the last session closed: nothing left to keep

    async def _answer(self, line: bytes) -> Reply:
        self.busy += 1
        try:
            try:
                request = Request.model_validate_json(line)
            except ValidationError as exc:
                return Reply(code=EXIT_BAD, text=f"malformed request: {exc.errors()[0]['msg']}")
            if request.version != PROTOCOL_VERSION:
                return Reply(code=EXIT_BAD, text=f"protocol {request.version} is not this process's {PROTOCOL_VERSION}")
            try:
                async with asyncio.timeout(reply_timeout(request.command) - 5):  # the client waits a little longer
                    reply = await self.commands.handle(request)
            except Exception as exc:
                log.info("shell_command_failed", command=request.command, error=str(exc))
                reply = error_reply(exc)
            if self.store.sessions:
                self.had_session = True
            return reply
        finally:
            self.busy -= 1
            self.last = time.monotonic()


def main() -> int:
    directory = runtime_dir()
    fd = os.open(lock_path(directory), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another one runs (or is starting): the client talks to it
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for 'kill' and the tests
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    structlog.configure(
        processors=[redact_log_event, structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    idle = float(os.environ.get("WEBAGENT_SHELL_IDLE_S", DEFAULT_IDLE_S))
    asyncio.run(Daemon(directory, idle_s=idle).serve())
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
