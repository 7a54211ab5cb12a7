"""The command's side of the socket: one request, one reply, the background process started when
``start`` finds none (and a socket a killed one left behind is no obstacle: the new process takes
the lock and replaces it)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from pydantic import ValidationError

from .paths import log_path, runtime_dir, socket_path
from .protocol import EXIT_BAD, EXIT_NO_BROWSER, LINE_LIMIT, Reply, Request

__all__ = ["START_TIMEOUT_S", "call", "reply_timeout"]

#: How long ``start`` waits for a background process it started to listen.
START_TIMEOUT_S = 30.0
_LONG = {"act": 3600.0, "check": 600.0, "extract": 600.0, "start": 300.0, "close": 300.0, "wait": 180.0}


def reply_timeout(command: str) -> float:
    """How long a command waits for its reply (a goal runs within its own ``max_time``)."""
    return _LONG.get(command, 120.0)


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5.0)
        sock.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    return sock


def _spawn(directory: Path) -> None:
    """The background process, detached from the caller (its own session: it outlives the shell)."""
    with open(log_path(directory), "ab") as log:
        os.chmod(log_path(directory), 0o600)
        subprocess.Popen(
            [sys.executable, "-m", "webagent.shell.daemon"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )


def call(request: Request, *, timeout_s: float | None = None) -> Reply:
    """Send ``request`` and return the reply (exit 2 for no session, 6 when no process answers)."""
    directory = runtime_dir()
    path = socket_path(directory)
    sock = _connect(path)
    if sock is None:
        if request.command == "list" or (request.command == "close" and request.args.get("all")):
            return Reply(
                text="" if request.command == "list" else "closed 0 session(s)",
                data={"sessions": []} if request.command == "list" else {"closed": []},
            )
        if request.command != "start":
            return Reply(
                code=EXIT_BAD,
                text=f"no open session {request.session!r}: start one with 'webagent session start --session {request.session}'",
            )
        _spawn(directory)
        deadline = time.monotonic() + START_TIMEOUT_S
        while sock is None and time.monotonic() < deadline:
            time.sleep(0.05)
            sock = _connect(path)
        if sock is None:
            return Reply(code=EXIT_NO_BROWSER, text=f"the background process did not start: see {log_path(directory)}")
    with contextlib.closing(sock):
        sock.settimeout(timeout_s or reply_timeout(request.command))
        try:
            sock.sendall(request.model_dump_json().encode() + b"\n")
            reply = _read_line(sock)
        except TimeoutError:
            return Reply(
                code=EXIT_NO_BROWSER, text=f"no reply in {sock.gettimeout():g}s: the background process may be stuck"
            )
        except OSError as exc:
            return Reply(code=EXIT_NO_BROWSER, text=f"the background process went away ({exc.strerror or exc})")
    if not reply:
        return Reply(code=EXIT_NO_BROWSER, text="the background process closed the connection without a reply")
    try:
        return Reply.model_validate_json(reply)
    except ValidationError:
        return Reply(code=EXIT_NO_BROWSER, text="the background process sent a reply that is not one")


def _read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n") or size > LINE_LIMIT:
            break
    return b"".join(chunks)
