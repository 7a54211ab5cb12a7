"""What webagent writes to disk: atomic writes (readers, and a killed run, never see a partial
file), who may read it, and file names cut to a size every file system takes.

**Who may read it.** One rule, here: what a run that holds a secret writes is its owner's only.
``private=True`` makes the folders a call creates 0700 and its files 0600; the caller says so when
the run types secrets or holds a signed-in state or a password (``runtime.private_outputs``: the
run folders and their downloads, a batch's and a suite's outputs, a saved state's folder), and
the replay cache and a run's temporary downloads folder are always private. A file is also private when the folder it is written in
is (no permission for group or others): a report or a screenshot written later into a private run
folder stays its owner's. Everything else gets the usual permissions (0666 / 0777 less the umask),
so that a CI job can read what a container running as another user wrote (docker/README.md); an
existing folder is never changed (a mounted one is the host's).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "MAX_NAME_BYTES",
    "cut_utf8",
    "file_mode",
    "make_dir",
    "open_append",
    "private_folder",
    "secure_file",
    "write_atomic",
    "write_atomic_parts",
]

#: The bytes a name webagent derives from an id, a goal or a test name may take before its hash is
#: added (255, the common limit of one file name, less room for the hash and a suffix).
MAX_NAME_BYTES = 100


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()


def private_folder(folder: str | Path) -> bool:
    """Whether ``folder`` gives group and others no permission at all (what is written in it is its
    owner's only)."""
    try:
        return stat.S_IMODE(os.stat(folder).st_mode) & 0o077 == 0
    except OSError:
        return False


def make_dir(path: str | Path, *, private: bool = False) -> Path:
    """Create ``path`` and its missing parents; those made are 0700 when ``private`` (else 0777
    less the umask). Folders that exist are left as they are."""
    path = Path(path)
    missing: list[Path] = []
    at = path
    while not at.is_dir():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700 if private else 0o777)
        except FileExistsError:
            if not folder.is_dir():
                raise
    return path


def file_mode(path: str | Path, *, private: bool = False) -> int:
    """The mode of a file webagent writes at ``path``: 0600 when ``private`` or when its folder is
    private, else 0666 less the umask (for a file made some other way, then given its mode:
    ``write_atomic``'s temporary file, a download)."""
    return 0o600 if private or private_folder(Path(path).parent) else _MODE


def write_atomic(path: str | Path, data: bytes | str, *, private: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    The file gets the usual permissions (0666 less the umask), not the temporary file's 0600, so a
    CI job can read what a container running as another user wrote; ``private`` (or a private
    folder): 0600, never readable by others even for a moment, and the folders made for it 0700.
    """
    return write_atomic_parts(path, [data.encode() if isinstance(data, str) else data], private=private)


def write_atomic_parts(path: str | Path, parts: Iterable[bytes], *, private: bool = False) -> Path:
    """``write_atomic`` of the concatenation of ``parts``, written one by one (a large file is never
    built in memory first)."""
    path = Path(path)
    make_dir(path.parent, private=private)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.writelines(parts)
        os.chmod(tmp, file_mode(path, private=private))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def open_append(path: str | Path, *, private: bool = False) -> int:
    """A file descriptor appending to ``path`` (created if missing, with the folders it needs):
    0600 when ``private`` or in a private folder, also when the file was there before."""
    path = Path(path)
    make_dir(path.parent, private=private)
    mode = file_mode(path, private=private)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600 if mode == 0o600 else 0o666)
    if mode == 0o600:
        _own_only(fd)
    return fd


def secure_file(path: str | Path, *, private: bool = False) -> None:
    """Give a file another program wrote (Playwright's trace) the mode ``write_atomic`` would have."""
    path = Path(path)
    if file_mode(path, private=private) == 0o600:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            _own_only(fd)
        finally:
            os.close(fd)


def _own_only(fd: int) -> None:
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    except OSError:  # another user's file: its owner decides
        pass


def cut_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, on a character boundary (a file name is
    limited in bytes: 100 characters of a 4-byte script are 400; a lone surrogate counts as 3)."""
    if len(text) * 4 <= limit:
        return text
    size = 0
    for i, char in enumerate(text):
        size += len(char.encode("utf-8", "surrogatepass"))
        if size > limit:
            return text[:i]
    return text
