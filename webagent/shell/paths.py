"""Where the background process lives: a private runtime directory (0700, its owner's), its socket
and its lock.

``$WEBAGENT_SHELL_DIR`` when set, else ``$XDG_RUNTIME_DIR/webagent``, else ``~/.cache/webagent/run``.
A directory another user owns, or one others may enter, is refused: nobody else may reach the socket.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .protocol import EXIT_BAD, ShellError

__all__ = ["lock_path", "log_path", "runtime_dir", "socket_path"]


def runtime_dir() -> Path:
    """The runtime directory, created 0700 (ShellError when it is not private to this user)."""
    explicit = os.environ.get("WEBAGENT_SHELL_DIR")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if explicit:
        path = Path(explicit)
    elif xdg and Path(xdg).is_dir():
        path = Path(xdg) / "webagent"
    else:
        path = Path.home() / ".cache" / "webagent" / "run"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ShellError(EXIT_BAD, f"{path} is not a directory of yours: the session socket cannot live there")
    if info.st_mode & 0o077:
        raise ShellError(
            EXIT_BAD, f"{path} may be entered by other users (mode {info.st_mode & 0o777:o}): chmod 700 it"
        )
    return path


def socket_path(directory: Path) -> Path:
    return directory / "daemon.sock"


def lock_path(directory: Path) -> Path:
    return directory / "daemon.lock"


def log_path(directory: Path) -> Path:
    return directory / "daemon.log"
