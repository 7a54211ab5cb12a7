"""The files a run may upload (``[browser] upload_dir`` and ``upload_files``), by name only.

The policy's ``upload_file`` action names a file; ``AllowedFiles.open`` turns the name into the
bytes of a file the configuration allows, or refuses it. A page or a model never gives a path: a
name with a folder in it, a name not on the list, a dotfile, a link, anything but a regular file,
a file over ``MAX_UPLOAD_BYTES`` and a file that is gone are each an ``ActionError`` told to the
policy.

Check and use are one operation: the name is opened once, relative to its folder (``dir_fd``) and
without following a link (``O_NOFOLLOW``), the open file is checked (``fstat``: a regular file, not
too large) and read, and the browser is handed those bytes (``Upload``), never the path. A file
swapped for a link to another one after a check, by another user who can write the folder, can
no longer reach the page: there is no later look at the path. Pure: no browser here.
"""

from __future__ import annotations

import errno
import mimetypes
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ActionError

__all__ = ["MAX_LISTED", "MAX_UPLOAD_BYTES", "AllowedFiles", "Upload"]

#: File names the policy is told at most (a large upload_dir is listed in part).
MAX_LISTED = 50
#: The largest file a page is given (the bytes travel to the browser in one message).
MAX_UPLOAD_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Upload:
    """A file as the page gets it: its name, its type and the bytes read when it was opened."""

    name: str
    mime_type: str
    data: bytes = b""

    def __repr__(self) -> str:  # never the bytes in a log line or an error
        return f"Upload({self.name!r}, {self.mime_type}, {len(self.data)} bytes)"


class AllowedFiles:
    """The files of ``upload_dir`` (its own, not its subfolders') and the ``upload_files`` named."""

    def __init__(self, directory: Path | None = None, files: Iterable[Path] = ()) -> None:
        self.directory = directory.resolve() if directory is not None else None
        # An upload_files entry is the operator's: a link there is followed once, here.
        self.files = {path.name: path.resolve() for path in files}

    def __bool__(self) -> bool:
        return self.directory is not None or bool(self.files)

    @property
    def names(self) -> list[str]:
        """The names the policy may give (sorted; at most ``MAX_LISTED``): links and dotfiles left out."""
        names = set(self.files)
        if self.directory is not None:
            try:
                with os.scandir(self.directory) as entries:
                    names |= {
                        e.name for e in entries if e.is_file(follow_symlinks=False) and not e.name.startswith(".")
                    }
            except OSError:
                pass
        return sorted(names)[:MAX_LISTED]

    def open(self, name: str) -> Upload:
        """The bytes of the allowed file ``name`` names, read in one operation; ActionError (for the
        policy) for anything else. Blocking: a caller on an event loop runs it in a thread."""
        name = name.strip()
        if not self:
            raise ActionError("no file may be uploaded in this run (the user allowed none)")
        if not name or "/" in name or "\\" in name or name in (".", "..") or "\x00" in name:
            raise ActionError(f"give the name of an allowed file, not a path; the files are: {self._listed()}")
        if name in self.files:
            path = self.files[name]
            return _read(path.parent, path.name, name)
        if self.directory is not None and not name.startswith("."):
            return _read(self.directory, name, name)
        raise ActionError(f"{name!r} is not a file you may upload; the files are: {self._listed()}")

    def _listed(self) -> str:
        return ", ".join(self.names) or "none"


def _read(directory: Path, leaf: str, name: str) -> Upload:
    """``leaf`` in ``directory``, opened without following a link and checked once open."""
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise ActionError(f"the file {name!r} is no longer there") from None
    try:
        # O_NONBLOCK: a FIFO put in its place must not hold the open (it is refused below).
        fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        raise ActionError(f"the file {name!r} is no longer there") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ActionError(f"{name!r} is a link, not a file; links are never uploaded") from None
        raise ActionError(f"the file {name!r} cannot be read ({exc.strerror})") from None
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ActionError(f"{name!r} is not a regular file; only files are uploaded")
        if info.st_size > MAX_UPLOAD_BYTES:
            raise ActionError(
                f"the file {name!r} is larger than {MAX_UPLOAD_BYTES // 2**20} MiB, the limit for an upload"
            )
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_UPLOAD_BYTES + 1)  # a file that grew since: still bounded
    finally:
        os.close(fd)
    if len(data) > MAX_UPLOAD_BYTES:
        raise ActionError(f"the file {name!r} is larger than {MAX_UPLOAD_BYTES // 2**20} MiB, the limit for an upload")
    mime_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Upload(name=name, mime_type=mime_type, data=data)
