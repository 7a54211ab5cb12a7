"""A persistent profile: a folder (0700) that keeps a browser's signed-in state (cookies, local
storage, IndexedDB) between sessions and runs, locked while one uses it.

Its state is ``state.json`` (0600, a Playwright storage state), loaded when a context opens and
saved back by its user; ``.lock`` is held (``flock``) while the profile is in use, so a second user
is refused in one line instead of sharing (and corrupting) the files.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from ..errors import InputError

__all__ = ["Profile", "ProfileInUse"]


class ProfileInUse(InputError):
    """The profile is locked by another session or process."""


class Profile:
    """A profile folder, created 0700 and locked by :meth:`acquire` until :meth:`release`."""

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser().resolve()
        #: The signed-in state (a storage state, 0600): loaded at the start, saved by the user.
        self.state = self.path / "state.json"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Create (0700) and lock the folder; InputError when it is not private or is in use."""
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = self.path.lstat()
        except OSError as exc:
            raise InputError(f"profile {self.path} cannot be made: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise InputError(f"profile {self.path} must be a folder of yours that only you may enter (0700)")
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ProfileInUse(f"profile {self.path} is in use by another session or process") from None
        self._fd = fd

    def saved(self) -> Path | None:
        """The saved state to start from, None before the first save."""
        return self.state if self.state.is_file() else None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock goes with it
            self._fd = None
