"""The files a run may upload (``[browser] upload_dir`` and ``upload_files``), by name only.

The policy's ``upload_file`` action names a file; ``AllowedFiles.resolve`` turns the name into the
path of a file the configuration allows, or refuses it. A page or a model never gives a path: a
name with a folder in it, a name not on the list, a link leading out of ``upload_dir`` and a file
that is gone are each an ``ActionError`` told to the policy. Pure: no browser here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .errors import ActionError

__all__ = ["MAX_LISTED", "AllowedFiles"]

#: File names the policy is told at most (a large upload_dir is listed in part).
MAX_LISTED = 50


class AllowedFiles:
    """The files of ``upload_dir`` (its own, not its subfolders') and the ``upload_files`` named."""

    def __init__(self, directory: Path | None = None, files: Iterable[Path] = ()) -> None:
        self.directory = directory.resolve() if directory is not None else None
        self.files = {path.name: path.resolve() for path in files}

    def __bool__(self) -> bool:
        return self.directory is not None or bool(self.files)

    @property
    def names(self) -> list[str]:
        """The names the policy may give (sorted; at most ``MAX_LISTED``)."""
        names = set(self.files)
        if self.directory is not None and self.directory.is_dir():
            names |= {
                p.name
                for p in self.directory.iterdir()
                if p.is_file() and not p.name.startswith(".") and p.resolve().parent == self.directory
            }
        return sorted(names)[:MAX_LISTED]

    def resolve(self, name: str) -> Path:
        """The allowed file ``name`` names; ActionError (for the policy) for anything else."""
        name = name.strip()
        if not self:
            raise ActionError("no file may be uploaded in this run (the user allowed none)")
        if not name or "/" in name or "\\" in name or name in (".", "..") or "\x00" in name:
            raise ActionError(f"give the name of an allowed file, not a path; the files are: {self._listed()}")
        if name in self.files:
            return self._existing(self.files[name], name)
        if self.directory is not None:
            path = (self.directory / name).resolve()
            if path.parent == self.directory and not name.startswith("."):
                return self._existing(path, name)
        raise ActionError(f"{name!r} is not a file you may upload; the files are: {self._listed()}")

    def _existing(self, path: Path, name: str) -> Path:
        if not path.is_file():
            raise ActionError(f"the file {name!r} is no longer there")
        return path

    def _listed(self) -> str:
        return ", ".join(self.names) or "none"
