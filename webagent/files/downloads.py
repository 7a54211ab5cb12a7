"""Where a run keeps the files its pages download, and what they are called there.

A run with an output folder keeps them in its ``downloads/`` folder; a run without one (the library
without ``output_dir``, ``WebEnv`` without one, an MCP session, the pytest plugin with
``--webagent-runs off``) in a private temporary folder (0700, ``webagent-downloads-*`` in the
system's temporary directory) made at its first download, which its runtime removes when it closes
(``Agent.aclose``; ``WebEnv`` sooner: at the next ``reset`` or ``close``). Never the current directory.

A download's name is the page's (``Content-Disposition``, a link's ``download`` attribute) made safe
(``safe_name``): no path separator, no control or format character, no leading dot or space, at most
``MAX_NAME_BYTES`` bytes of UTF-8 with its extension kept, and unique in the folder (``-2``, ``-3``,
... before the extension). Each file is written under a hidden temporary name in the folder, then
moved to a name no other file had (``O_EXCL``): nothing is ever written outside the folder, nor over
another file, and a reader never sees half of one. What is copied stops at the size limit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import unicodedata
from pathlib import Path

from .disk import cut_utf8, file_mode, make_dir

__all__ = ["FOLDER_NAME", "MAX_NAME_BYTES", "DownloadFolder", "TooLarge", "safe_name"]

#: The folder of a run's output folder its downloads go in.
FOLDER_NAME = "downloads"
#: The bytes of UTF-8 a download's name may take (a file name may take 255 on common file systems;
#: room is left for a ``-N`` suffix and the temporary name's prefix and suffix).
MAX_NAME_BYTES = 200
#: An extension kept whole when a long name is cut (at most this many bytes, dot included).
_MAX_EXTENSION_BYTES = 16
#: Names tried before giving up on a unique one (a run keeps at most ``max_downloads`` files).
_MAX_TRIES = 10_000
_CHUNK = 1024 * 1024
_PARTIAL_PREFIX = ".download-"


class TooLarge(Exception):
    """The file is larger than the limit (its size so far, at least ``size``)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


def safe_name(suggested: str) -> str:
    """``suggested`` as a file name of one folder: path separators, control, format and unassigned
    characters and lone surrogates replaced by ``_``, leading dots and spaces and trailing ones
    dropped, cut to ``MAX_NAME_BYTES`` bytes (keeping a short extension); ``download`` when
    nothing is left."""
    chars = [
        "_" if c in "/\\" or unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") else c
        for c in suggested
    ]
    name = "".join(chars).lstrip(". ").rstrip(". ")
    if not name.strip("_"):
        name = "download"
    return _cut(name, MAX_NAME_BYTES)


def _cut(name: str, limit: int) -> str:
    """``name`` at most ``limit`` bytes of UTF-8, its extension kept when it is short."""
    if len(name.encode("utf-8")) <= limit:
        return name
    stem, dot, ext = name.rpartition(".")
    extension = f".{ext}" if dot and stem and len(ext.encode("utf-8")) < _MAX_EXTENSION_BYTES else ""
    stem = name[: len(name) - len(extension)] if extension else name
    budget = limit - len(extension.encode("utf-8"))
    kept = cut_utf8(stem, budget).rstrip(". ")
    return (kept or "download") + extension


def _numbered(name: str, n: int) -> str:
    """The ``n``-th name tried for ``name``: itself, then ``stem-2.ext``, ``stem-3.ext``, ..."""
    if n == 1:
        return name
    stem, dot, ext = name.rpartition(".")
    if not (dot and stem):
        stem, ext = name, ""
    suffix = f"-{n}" + (f".{ext}" if ext else "")
    return _cut(stem, MAX_NAME_BYTES - len(suffix.encode("utf-8"))) + suffix


class DownloadFolder:
    """The folder one run (or session) keeps its downloads in: ``path``, made when the first file
    is kept; without one, a private temporary folder (``temporary``), removed by ``remove``.
    ``private``: the folder 0700 and its files 0600 (a run that holds a secret; a temporary folder
    always), the rule of every output (``webagent.files.disk``)."""

    def __init__(self, path: str | Path | None = None, *, private: bool = False) -> None:
        self._given = Path(path) if path is not None else None
        self._made: Path | None = None
        self.private = private or path is None
        #: ``remove`` was called (a temporary folder made again after it is removed again by its holder).
        self.removed = False
        #: Its run was set aside (a batch re-runs it in the same directory): nothing more is kept here.
        self.fenced = False

    @property
    def temporary(self) -> bool:
        """Whether it is a temporary folder of webagent's (removed by ``remove``)."""
        return self._given is None

    @property
    def path(self) -> Path | None:
        """The folder, once made (a given one: also when it was there before)."""
        return self._given if self._given is not None else self._made

    def make(self) -> Path:
        """The folder, made if it is not yet (with the parents it needs); refused once ``fenced``."""
        if self.fenced:
            raise OSError(f"the run was set aside; nothing more is kept in {self.path or 'its folder'}")
        if self._given is not None:
            return make_dir(self._given, private=self.private)
        if self._made is None:
            self._made = Path(tempfile.mkdtemp(prefix="webagent-downloads-"))
        return self._made

    def partial(self) -> Path:
        """A fresh, empty, hidden file in the folder for a download to be written into (``place``)."""
        fd, name = tempfile.mkstemp(dir=self.make(), prefix=_PARTIAL_PREFIX, suffix=".part")
        os.close(fd)
        return Path(name)

    def keep_copy(self, source: Path, name: str, limit: int) -> tuple[str, Path, int]:
        """Copy ``source`` (a finished download, not followed if it is a link) into the folder as
        ``name`` (or the first free numbered name): (its name, its path, its size). ``TooLarge``
        when it has more than ``limit`` bytes (then nothing is left in the folder)."""
        partial = self.partial()
        try:
            fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as src, partial.open("wb") as out:
                copied = 0
                while chunk := src.read(_CHUNK):
                    copied += len(chunk)
                    if copied > limit:
                        raise TooLarge(copied)
                    out.write(chunk)
            return self.place(partial, name, limit)
        finally:
            partial.unlink(missing_ok=True)

    def place(self, partial: Path, name: str, limit: int) -> tuple[str, Path, int]:
        """Move ``partial`` (a file of ``partial()``, written) to ``name`` in the folder, or the first
        free numbered name: (its name, its path, its size). ``TooLarge`` past ``limit`` bytes
        (``partial`` is removed either way, a fenced folder's too)."""
        try:
            folder = self.make()
            size = partial.stat().st_size
            if size > limit:
                raise TooLarge(size)
            os.chmod(partial, file_mode(partial, private=self.private))
            for n in range(1, _MAX_TRIES + 1):
                candidate = _numbered(name, n)
                target = folder / candidate
                try:  # the name is taken here, so that no other file is ever replaced
                    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
                except FileExistsError:
                    continue
                os.replace(partial, target)
                return candidate, target, size
            raise FileExistsError(f"no free name for {name!r} in {folder}")
        finally:
            partial.unlink(missing_ok=True)

    def remove(self) -> None:
        """Remove a temporary folder and what is in it (a given folder is the run's: left as it is)."""
        if not self.temporary:
            return
        self.removed = True
        made, self._made = self._made, None
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)

    def forget_partials(self) -> None:
        """Remove hidden files left by downloads cut off mid-copy (a run that was cancelled); not once
        fenced: the folder's path is then its re-run's, whose downloads may be in progress."""
        folder = self.path
        if folder is None or self.fenced or not folder.is_dir():
            return
        for leftover in folder.glob(f"{_PARTIAL_PREFIX}*.part"):
            with contextlib.suppress(OSError):
                leftover.unlink()
