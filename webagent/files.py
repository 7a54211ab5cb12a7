"""Atomic file writes: readers (and a killed run) never see a partial file; file names cut to a
size every file system takes."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["MAX_NAME_BYTES", "cut_utf8", "write_atomic", "write_atomic_parts"]

#: The bytes a name webagent derives from an id, a goal or a test name may take before its hash is
#: added (255, the common limit of one file name, less room for the hash and a suffix).
MAX_NAME_BYTES = 100


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()


def write_atomic(path: str | Path, data: bytes | str, *, private: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    The file gets the usual permissions (0666 less the umask), not the temporary file's 0600, so a
    CI job can read what a container running as another user wrote; ``private``: 0600 (a secret,
    such as a signed-in browser state), never readable by others even for a moment.
    """
    return write_atomic_parts(path, [data.encode() if isinstance(data, str) else data], private=private)


def write_atomic_parts(path: str | Path, parts: Iterable[bytes], *, private: bool = False) -> Path:
    """``write_atomic`` of the concatenation of ``parts``, written one by one (a large file is never
    built in memory first)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.writelines(parts)
        os.chmod(tmp, 0o600 if private else _MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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
